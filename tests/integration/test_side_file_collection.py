"""The root's sweep deletes side files no message names, rarely and only once they are old."""

from __future__ import annotations

import os
import time
from pathlib import Path

import boxmq
from boxmq.model import PROPERTIES_FILE
from boxmq.store.side_files import COLLECT_EVERY, GRACE


def test_the_sweep_deletes_old_side_files_no_message_names(root: Path) -> None:
    clock = boxmq.ManualClock(time.time())  # ages are measured against the files' mtimes
    with boxmq.open(root, fsync="never", clock=clock) as box:
        named = box.side_files.put(b"named by a message")
        box.side_files.put(b"its message was acknowledged and deleted")
        subscriber = box.subscribe("t/#", "worker")
        box.topics.publish("t/1", b"body", properties={PROPERTIES_FILE: named}, reserved=True)
        clock.advance(GRACE + 1)
        box.sweep()
        assert sorted(os.listdir(box.side_files.path)) == [named]
        late = box.side_files.put(b"written after that sweep")
        os.utime(os.path.join(box.side_files.path, late), (1, 1))  # old at once
        clock.advance(COLLECT_EVERY - 1)
        box.sweep()  # not due yet: it lists every file of the root
        assert late in os.listdir(box.side_files.path)
        clock.advance(1)
        box.sweep()
        assert sorted(os.listdir(box.side_files.path)) == [named]
        subscriber.close()
