"""The sink on disk: messages staged by tasks, published at commit, at most once per batch.

Tasks write each row as a file in a staging folder of their own (one per task attempt):

    queue:  <root>/<queue>/working/.spark/<job>/<batch>/<task>-<random>/<message name>
    topic:  <root>/.spark/staging/<job>/<batch>/<task>-<random>/<message name>

No consumer looks there, so a half-written batch is never seen. The driver's commit then
publishes the folders of the attempts Spark chose: a queue's files are linked into target/, a
topic's go through boxmq's fan-out (one link per matching subscription). Idempotence per batch,
with two small files per job in `<root>/.spark/sinks/`:

- `<job>.json` holds the last batch published. A batch at or below it is a replay (Spark
  crashed after our commit but before its own commit log): nothing is published again.
- `<job>.intent` names the folders of a commit in progress, written (and flushed) before the
  first message is published. A commit that crashed half-way is finished from those folders
  by the replay, which ignores its own new attempt: each message is published exactly once.

Every message leaves its staged file by one rename, so a replay knows what was published
before the crash: what is still staged was not, what is gone was (and may already have been
consumed: publishing it again would be a second copy, not a repair).

- A queue: the staged file is renamed into target/.
- A topic: the staged file is hard-linked into a pending folder in every matching
  subscription, `<subscription>/working/.spark/<job>/<batch>/<copy name>` (no consumer looks
  there), then unlinked; then each pending copy is renamed into its target/. A staged file
  still there means none of its copies reached a target/ yet: the replay links it again (a
  copy already pending is kept) and goes on. A staged file gone means all its copies were
  pending: the replay renames what is left in the subscriptions' pending folders of the batch.
  Only a replay looks through the subscriptions; a normal commit knows where its copies are.
  (store/fanout.py does both, for any fan-out that must survive a crash.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import boxmq
from boxmq.errors import BoxMQError, QueueNotFound
from boxmq.model import Envelope
from boxmq.spark.durable import write_json
from boxmq.store.commit import Committer, FsyncPolicy, Move, flush_filesystem
from boxmq.store.dropbox import Dropbox
from boxmq.store.fanout import finish_pending, send_through_pending
from boxmq.store.layout import State, queue_path
from boxmq.store.names import decode_lenient
from boxmq.store.spares import write_new

__all__ = ["Destination", "Publisher", "ensure_queue", "stage_dir", "write_staged"]


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a sink's messages go: a queue, or topics (from the option or a column)."""

    root: str
    queue: str | None

    def staging(self, job: str) -> str:
        if self.queue is not None:
            working = os.path.join(queue_path(self.root, self.queue), State.WORKING.value)
            return os.path.join(working, ".spark", job)
        return os.path.join(self.root, ".spark", "staging", job)


def stage_dir(destination: Destination, job: str, batch: int | None, task: str) -> str:
    """A task attempt's own staging folder (made): `<task>-<random>`, never one an earlier
    attempt used, since a driver restarted after a crash numbers its tasks from 0 again, and a
    folder that an unfinished commit's `.intent` names must not gain the replay's new rows.
    `batch` None for a one-off batch write."""
    batch_dir = os.path.join(destination.staging(job), _batch_name(batch))
    os.makedirs(batch_dir, exist_ok=True)
    while True:
        path = os.path.join(batch_dir, f"{task}-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return path


def write_staged(directory: str, name: str, body: bytes) -> bool:
    """Write one message file; False if the name is taken in this folder (draw another id)."""
    try:
        # A full disk: the task fails, and no file cut short stays in its folder (it named
        # its side file, withdrawn by the task: sink.py), as a put's new file.
        write_new(os.path.join(directory, name), body, spares=None)
    except FileExistsError:
        return False
    return True


class Publisher:
    """The driver side of a sink: publish a batch's staged folders, once."""

    def __init__(self, destination: Destination, fsync: FsyncPolicy) -> None:
        self._destination = destination
        self._flush = fsync is not FsyncPolicy.NEVER
        self._books = os.path.join(destination.root, ".spark", "sinks")

    def commit(self, job: str, batch: int | None, folders: Sequence[str]) -> int:
        """Publish the messages in `folders` for `batch` of `job`; how many were published.

        `batch` None is a one-off batch write: no replay to guard against, no books kept.
        """
        if batch is None:
            published = self._publish(folders, _pending(job, None), replay=False)
            self._cleanup(job, None)
            return published
        last, intent = self._last(job), self._intent(job)
        if intent is not None and intent[0] <= last:
            self._drop_intent(job)  # its batch was published; only the unlink was lost
            intent = None
        if intent is not None and intent[0] != batch:
            # Not the batch Spark replays: only a moved or rewound checkpoint gets here.
            # Finish what was started (its messages are half out already), then go on.
            self._finish(job, *intent, replay=True)
            last, intent = self._last(job), None
        if batch <= last:
            # A replay of a batch already published: nothing to do. A query resumed from an
            # older copy of its checkpoint lands here too, with new rows: by design, they are
            # dropped (docs/spark.md says to use a new checkpointLocation instead).
            self._cleanup(job, batch)
            return 0
        if intent is None:
            # Before the intent, which a replay would finish from these same folders.
            self._check_staged(batch, folders)
            self._write(f"{job}.intent", {"batch": batch, "folders": list(folders)})
        else:
            folders = intent[1]  # finish the crashed commit; this attempt's files are dropped
        return self._finish(job, batch, folders, replay=intent is not None)

    def abort(self, job: str, batch: int | None, folders: Sequence[str]) -> set[str]:
        """Drop the staged folders of a failed batch, unless a commit already started on them;
        those of `folders` gone (the side files only their files named can go too).

        `folders` are those of the tasks that succeeded; a task that failed on a bad row
        staged the rows before it too, and Spark sends no message of it: every attempt's
        folder of the batch goes. A batch write's job never runs again to clean them up."""
        intent = self._intent(job) if batch is not None else None
        keep = set(intent[1]) if intent is not None and intent[0] == batch else set()
        base = self._destination.staging(job)
        batch_dir = os.path.join(base, _batch_name(batch))
        attempts: list[str] = []
        with contextlib.suppress(FileNotFoundError), os.scandir(batch_dir) as entries:
            attempts = [entry.path for entry in entries]
        for folder in {*folders, *attempts}:
            if folder not in keep:
                shutil.rmtree(folder, ignore_errors=True)
        for folder in (batch_dir, base, os.path.dirname(base)):
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only once empty, as _cleanup leaves them
        return {folder for folder in folders if not os.path.lexists(folder)}

    def _check_staged(self, batch: int, folders: Sequence[str]) -> None:
        """Every task's folder is there (each task makes its own, rows or none): one gone was
        deleted, with what it staged, under the running query (a queue's with the queue, as
        `boxmq delete` takes working/ too). Published as it is, the batch was recorded with
        those rows missing, and its source acknowledged them: lost. Failed, the batch is run
        again (the boxmq source reads the same messages) and staged afresh."""
        gone = [folder for folder in folders if not os.path.isdir(folder)]
        if not gone:
            return
        queue = self._destination.queue
        where = f"queue {queue!r} deleted" if queue is not None else "their folder deleted"
        error = QueueNotFound if queue is not None else BoxMQError
        raise error(
            f"boxmq sink: the staged rows of batch {batch} ({len(gone)} task(s)'s, in {gone[0]}) "
            f"were deleted before they were published ({where} under the running query?); "
            "restart the query from its checkpoint: the batch is run again and nothing is lost"
        )

    # -- steps ---------------------------------------------------------------------------------

    def _finish(self, job: str, batch: int, folders: Sequence[str], *, replay: bool) -> int:
        published = self._publish(folders, _pending(job, batch), replay=replay)
        self._write(f"{job}.json", {"batch": batch})
        self._drop_intent(job)
        self._cleanup(job, batch)
        return published

    def _drop_intent(self, job: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self._books, f"{job}.intent"))

    def _publish(self, folders: Sequence[str], pending: str, *, replay: bool) -> int:
        """Publish what is staged in `folders`; how many messages were staged. `pending`: the
        folder, inside a subscription's working/, of this batch's copies on their way."""
        staged = sorted(
            (os.path.join(folder, name), name)
            for folder in folders
            if os.path.isdir(folder)
            for name in os.listdir(folder)
        )
        topics = self._destination.queue is None
        if not staged and not (topics and replay):
            return 0
        if self._flush:
            flush_filesystem(self._destination.root)  # the bodies, before any name appears
        if not topics:
            assert self._destination.queue is not None
            self._to_queue(self._destination.queue, staged)
        else:
            self._to_topics(staged, pending)
            if replay:  # copies whose staged file was gone: pending when the driver died
                self._finish_pending(pending)
        if self._flush:
            flush_filesystem(self._destination.root)  # the renames: now the batch is durable
        return len(staged)

    def _to_queue(self, queue: str, staged: list[tuple[str, str]]) -> None:
        target = os.path.join(queue_path(self._destination.root, queue), State.TARGET.value)
        for path, name in staged:
            # One rename: a replay finds the file either still staged or published. A name
            # already in target/ (the same message_id and metadata) is replaced: one message.
            try:
                Move(path, os.path.join(target, name)).apply()
            except FileNotFoundError:
                if not os.path.lexists(path):
                    # Listed just now, so only a delete took it: the queue deleted during these
                    # renames (renamed away whole, this staging with it). Its rows go as those
                    # renamed before it went, and the batch is recorded. Failing would not get
                    # them back (the intent's folders went too, the replay would find nothing)
                    # and running the batch again would put back the rows the delete took;
                    # knowing which were out needs a write per message. docs/spark.md says so.
                    continue
                # The queue was deleted under the running query (its staging made working/
                # again): made again, as a put makes it ("made if missing", docs/spark.md).
                ensure_queue(self._destination)
                Move(path, os.path.join(target, name)).apply()

    def _to_topics(self, staged: list[tuple[str, str]], pending: str) -> None:
        made: set[str] = set()  # the pending folders this commit made, removed once empty
        # fsync "never" here: this publisher flushes once per batch, not once per message.
        with boxmq.open(self._destination.root, fsync="never") as box:
            for path, name in staged:
                envelope: Envelope = decode_lenient(name)[0]
                send_through_pending(path, pending, box.topics.copies(envelope), made)
        for folder in made:
            _remove_empty(folder)

    def _finish_pending(self, pending: str) -> None:
        """A replay: rename into target/ every copy left pending in any subscription."""
        for folder in finish_pending(self._destination.root, pending):
            _remove_empty(folder)

    def _cleanup(self, job: str, batch: int | None) -> None:
        """Remove the staging of `batch` and of older batches (attempts Spark gave up)."""
        base = self._destination.staging(job)
        with contextlib.suppress(FileNotFoundError), os.scandir(base) as entries:
            for entry in entries:
                if batch is None or not entry.name.isdigit() or int(entry.name) <= batch:
                    shutil.rmtree(entry.path, ignore_errors=True)
        for folder in (base, os.path.dirname(base)):
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only once empty: no other batch or job is staged there

    # -- books ---------------------------------------------------------------------------------

    def _last(self, job: str) -> int:
        data = self._read(f"{job}.json")
        value = data.get("batch") if data else None
        return value if isinstance(value, int) else -1

    def _intent(self, job: str) -> tuple[int, list[str]] | None:
        data = self._read(f"{job}.intent")
        batch, folders = (data or {}).get("batch"), (data or {}).get("folders")
        if not isinstance(batch, int) or not isinstance(folders, list):
            return None
        return batch, [str(folder) for folder in folders]

    def _read(self, name: str) -> dict[str, object] | None:
        try:
            with open(os.path.join(self._books, name)) as source:
                data = json.load(source)
        except FileNotFoundError:
            return None
        return data if isinstance(data, dict) else None

    def _write(self, name: str, data: dict[str, object]) -> None:
        os.makedirs(self._books, exist_ok=True)
        write_json(os.path.join(self._books, name), data, flush=self._flush)


def _pending(job: str, batch: int | None) -> str:
    """Where a batch's copies wait in a subscription, relative to its working/ folder."""
    return os.path.join(".spark", job, _batch_name(batch))


def _batch_name(batch: int | None) -> str:
    """The folder of a batch's staged rows and pending copies; "once" for a batch write."""
    return "once" if batch is None else str(batch)


def _remove_empty(folder: str) -> None:
    """Remove a batch's pending folder and its job's, each only if empty. `.spark` stays: a
    sink of another query may be making its own folder in it."""
    for _ in range(2):  # <batch>, <job>
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def ensure_queue(destination: Destination) -> None:
    """Make the queue's folders, as a put would, so the sink can publish into it."""
    if destination.queue is not None:
        path = queue_path(destination.root, destination.queue)
        Dropbox(path, Committer(destination.root, FsyncPolicy.NEVER))
