"""`put(body)` with no options takes a shortcut past `put_many`: it must do what `put_many([body])`
does (the same file, name and in-memory envelope, but for the id)."""

from __future__ import annotations

import dataclasses
import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import boxmq
from boxmq.clock import ManualClock
from boxmq.errors import TargetMissing
from boxmq.model import MessageId
from boxmq.store.dropbox import Dropbox
from boxmq.store.names import decode

_BODIES = st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=50).map(bytearray),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=100),
)


@settings(max_examples=60, deadline=None)
@given(body=_BODIES)
def test_a_bare_put_is_put_many_of_the_body(body: bytes | str) -> None:  # bytearray too
    with (
        tempfile.TemporaryDirectory() as root,
        boxmq.open(root, fsync="never", clock=ManualClock()) as box,
    ):
        jobs = box.queue("jobs")
        with jobs.consumer("w", max_in_flight=2) as consumer:
            assert consumer.receive_nowait() is None  # the first look at the folder
            by_put = jobs.put(body)
            [by_many] = jobs.put_many([body])
            target = os.path.join(root, "jobs", "target")
            names = {decode(name).message_id: name for name in os.listdir(target)}
            assert names.keys() == {by_put, by_many}
            for name in names.values():
                with open(os.path.join(target, name), "rb") as file:
                    assert file.read() == (body.encode() if isinstance(body, str) else body)
            assert _without_id(decode(names[by_put])) == _without_id(decode(names[by_many]))
            assert names[by_put].replace(by_put, "") == names[by_many].replace(by_many, "")
            delivered = {m.id: m for m in consumer.receive_ready()}  # offered in memory
            assert delivered.keys() == {by_put, by_many}
            for message_id, message in delivered.items():
                assert message.envelope == decode(names[message_id])
                assert message.body == delivered[by_many].body
                message.ack()


def _without_id(envelope: boxmq.Envelope) -> boxmq.Envelope:
    return dataclasses.replace(envelope, message_id=MessageId(""))


def test_a_bare_put_that_cannot_commit_leaves_nothing_as_put_many_does() -> None:
    with tempfile.TemporaryDirectory() as root, boxmq.open(root, fsync="never") as box:
        jobs = box.queue("jobs")
        with jobs.consumer("w") as consumer:
            os.rmdir(os.path.join(root, "jobs", "target"))  # the commit's rename fails
            with pytest.raises(TargetMissing):  # the store failure, not the bare OSError
                jobs.put(b"lost")
            with pytest.raises(TargetMissing):  # the store failure, not the bare OSError
                jobs.put_many([b"lost"])
            assert os.listdir(os.path.join(root, "jobs", "working")) == []
            os.mkdir(os.path.join(root, "jobs", "target"))
            assert consumer.receive_nowait() is None


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_a_bare_put_refused_by_a_close_meanwhile_leaves_nothing_as_put_many_does(
    monkeypatch: pytest.MonkeyPatch, fsync: str
) -> None:
    """Another thread's `Box.close()` between the write in working/ and the commit: the put
    raises Closed, so its file must not wait in working/ for the sweep (put_many deletes its
    own). Neither put ever lost a message it returned, nor sent one it refused."""
    with tempfile.TemporaryDirectory() as root:
        box = boxmq.open(root, fsync=fsync)
        jobs = box.queue("jobs")
        write_file = Dropbox.write_file

        def written_then_closed(
            self: Dropbox, name: str, body: bytes, *, check: bool = True
        ) -> str:
            path = write_file(self, name, body, check=check)
            box.close()
            return path

        monkeypatch.setattr(Dropbox, "write_file", written_then_closed)
        with pytest.raises(boxmq.Closed):
            jobs.put(b"refused")
        for state in ("working", "target"):
            assert os.listdir(os.path.join(root, "jobs", state)) == [], state
