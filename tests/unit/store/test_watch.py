"""The watcher: inotify reports new names; polling says "rescan"; wakeup interrupts a wait."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import logging
import os
import select
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.descriptors import no_descriptor_left
from tests.inotify import inotify_watcher

from boxmq import forks
from boxmq.store import watch as watch_module
from boxmq.store.watch import Changes, InotifyWatcher, PollingWatcher, Watcher, watch


@pytest.fixture
def inotify(tmp_path: Path) -> InotifyWatcher:
    return inotify_watcher(watch(str(tmp_path), poll_interval=0.1))


def test_inotify_reports_renamed_linked_and_written_files(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    (tmp_path / "x.tmp").write_bytes(b"1")  # written in place: reported once closed
    names = set(inotify.wait(1.0).names)
    os.rename(tmp_path / "x.tmp", tmp_path / "renamed")
    os.link(tmp_path / "renamed", tmp_path / "linked")
    for _ in range(3):
        names |= set(inotify.wait(0.2).names)
    assert {"x.tmp", "renamed", "linked"} <= names
    inotify.close()


def test_inotify_wait_times_out_with_nothing(inotify: InotifyWatcher) -> None:
    started = time.monotonic()
    changes = inotify.wait(0.05)
    assert changes.names == []
    assert not changes.everything
    assert time.monotonic() - started < 1.0
    inotify.close()


def test_wakeup_interrupts_a_wait(inotify: InotifyWatcher) -> None:
    timer = threading.Timer(0.05, inotify.wakeup)
    timer.start()
    started = time.monotonic()
    inotify.wait(10.0)
    assert time.monotonic() - started < 5.0
    timer.join()
    inotify.close()


def test_polling_says_rescan_at_most_once_per_interval(tmp_path: Path) -> None:
    # A whole second between rescans: the two "not due" checks below hold unless this thread
    # stalls for a second, where a 0.05 s interval failed on any 50 ms stall of a loaded machine.
    watcher = watch(str(tmp_path), poll_interval=1.0, polling=True)
    assert isinstance(watcher, PollingWatcher)
    assert watcher.wait(0).everything is False  # not due yet: no rescan
    assert watcher.wait(5.0).everything is True  # naps until due (~1 s), then says rescan
    watcher.wakeup()
    assert watcher.wait(5.0).everything is False  # woken early: nothing due


def test_a_name_that_came_and_left_between_two_reads_is_not_reported(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """Another process's put that it claimed at once: nothing to offer, nothing to claim."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a").write_bytes(b"a")
    (tmp_path / "elsewhere" / "b").write_bytes(b"b")
    assert inotify.wait(1.0).names == ["elsewhere"]  # a folder made in the watched one
    os.rename(tmp_path / "elsewhere" / "a", tmp_path / "came-and-left")
    os.rename(tmp_path / "elsewhere" / "b", tmp_path / "came-and-stayed")
    os.rename(tmp_path / "came-and-left", tmp_path / "elsewhere" / "a")
    changes = inotify.wait(1.0)
    assert changes.names == ["came-and-stayed"]
    assert changes.gone == []
    inotify.close()


def test_a_name_that_left_after_it_was_reported_is_gone(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a").write_bytes(b"a")
    assert inotify.wait(1.0).names == ["elsewhere"]  # a folder made in the watched one
    os.rename(tmp_path / "elsewhere" / "a", tmp_path / "claimed-later")
    assert inotify.wait(1.0).names == ["claimed-later"]
    os.rename(tmp_path / "claimed-later", tmp_path / "elsewhere" / "a")
    (tmp_path / "deleted").write_bytes(b"d")
    changes = inotify.wait(1.0)
    assert (changes.names, changes.gone) == (["deleted"], ["claimed-later"])
    os.unlink(tmp_path / "deleted")
    changes = inotify.wait(1.0)
    assert (changes.names, changes.gone) == ([], ["deleted"])
    inotify.close()


def test_names_of_every_length_and_not_utf8_are_reported_as_fsdecode_reads_them(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """Events carry their names NUL padded (to the next 16 bytes) and are matched that way:
    names of lengths around each padding, one a prefix of the next, and one that is not
    UTF-8 come, stay, leave, or come and leave, as their names."""
    (tmp_path / "elsewhere").mkdir()
    raw = [b"n" * length for length in (1, 14, 15, 16, 17, 31, 32, 33, 100)] + [b"bad\xff"]
    for index, name in enumerate(raw):
        (tmp_path / "elsewhere" / str(index)).write_bytes(name)
    assert inotify.wait(1.0).names == ["elsewhere"]
    base = os.fsencode(tmp_path)
    for index, name in enumerate(raw):
        os.rename(os.fsencode(tmp_path / "elsewhere" / str(index)), base + b"/" + name)
    for name in raw[1::2]:  # came and left in one read: never reported
        os.rename(base + b"/" + name, base + b"/elsewhere/" + name)
    stayed = [os.fsdecode(name) for name in raw[::2]]
    assert inotify.wait(1.0) == Changes(stayed, False, [])
    for name in raw[::2]:
        os.rename(base + b"/" + name, base + b"/elsewhere/" + name)
    assert inotify.wait(1.0) == Changes([], False, stayed)
    inotify.close()


def _folder_watcher(tmp_path: Path) -> tuple[Path, InotifyWatcher]:
    """A watcher of a dropbox's target/ (a folder with a parent of its own)."""
    folder = tmp_path / "box" / "target"
    folder.mkdir(parents=True)
    return folder, inotify_watcher(watch(str(folder), poll_interval=0.1))


def _until(watcher: InotifyWatcher, wanted: Callable[[Changes], bool]) -> list[Changes]:
    """What the watcher says, wait after wait, until `wanted` (at most 5 s)."""
    seen: list[Changes] = []
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        seen.append(watcher.wait(0.5))
        if wanted(seen[-1]):
            return seen
    pytest.fail(f"never: the watcher said {seen}")


@pytest.mark.parametrize("when", ["read-between", "made-again-at-once"])
def test_inotify_follows_its_folder_deleted_and_made_again_at_its_path(
    tmp_path: Path, when: str
) -> None:
    """A subscription ended and made again (an unsubscribe, a share group's last member out),
    a queue deleted and put to again, by any process: the watch was on the old folder, so the
    new one's files were found only by the reader's next full rescan (5 s). A file kept open
    that was renamed into the folder (a spare's descriptor, store/spares.py) holds the old
    folder's inode, whose own IN_DELETE_SELF then comes only once it is closed."""
    folder, watcher = _folder_watcher(tmp_path)
    (tmp_path / "spare").write_bytes(b"old")
    with open(tmp_path / "spare", "rb"):  # held open across the deletion
        os.rename(tmp_path / "spare", folder / "old")
        assert _until(watcher, lambda changes: "old" in changes.names)
        shutil.rmtree(tmp_path / "box")
        if when == "read-between":
            # Told of the folder's leaving, it rescans (nothing there); until the folder is
            # made again it looks for it on a timer (poll_interval), and then rescans again.
            assert watcher.wait(1.0).everything
            time.sleep(0.3)
            assert not watcher.wait(0).everything  # no folder yet
            folder.mkdir(parents=True)
            assert _until(watcher, lambda changes: changes.everything)
        else:
            folder.mkdir(parents=True)
            assert _until(watcher, lambda changes: changes.everything)
        (folder / "new").write_bytes(b"new")
        assert _until(watcher, lambda changes: "new" in changes.names)
    watcher.close()


def test_inotify_follows_its_folder_renamed_away_and_made_again(tmp_path: Path) -> None:
    """docs/operations.md: a folder grown large is made again by `mv` and `mkdir`; the
    watch stays with the new folder, not with the old one moved aside."""
    folder, watcher = _folder_watcher(tmp_path)
    os.rename(folder, tmp_path / "box" / "target.old")
    folder.mkdir()
    assert _until(watcher, lambda changes: changes.everything)
    (tmp_path / "box" / "target.old" / "aside").write_bytes(b"a")
    (folder / "new").write_bytes(b"n")
    seen = _until(watcher, lambda changes: "new" in changes.names)
    assert not any("aside" in changes.names for changes in seen)
    watcher.close()


def test_inotify_watches_a_folder_made_again_at_once_where_its_parent_stayed(
    tmp_path: Path,
) -> None:
    """Between the `mv` and the `mkdir`, nothing is at the path: the parent says when a folder
    comes to it, long before the next look on the timer (10 s here)."""
    folder = tmp_path / "box" / "target"
    folder.mkdir(parents=True)
    watcher = inotify_watcher(watch(str(folder), poll_interval=10.0))
    os.rename(folder, tmp_path / "box" / "target.old")
    assert watcher.wait(1.0).everything  # its folder left: rescan (nothing there)
    assert watcher.wait(0).names == []
    folder.mkdir()
    assert watcher.wait(2.0).everything  # watched again, at the mkdir
    (folder / "new").write_bytes(b"n")
    assert _until(watcher, lambda changes: "new" in changes.names)
    watcher.close()


def inotify_instances() -> int:
    """The inotify instances this process holds open."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return links.count("anon_inode:inotify")


def test_three_hundred_watchers_share_one_inotify_instance_and_each_wakes(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """Past the 128 instances a user may have, one per watcher, the 129th watcher polled: a
    broker with 200 share groups or durable subscriptions read at once. All wait at once,
    one polls the instance for the others; each wakes for the file that lands in its folder."""
    folders = [tmp_path / f"q{index}" for index in range(300)]
    for folder in folders:
        folder.mkdir()
    watchers = [watch(str(folder), poll_interval=60.0) for folder in folders]
    assert all(isinstance(watcher, InotifyWatcher) for watcher in watchers)
    assert inotify_instances() == 1
    waiting = threading.Barrier(len(watchers) + 1)
    told: dict[int, list[str]] = {}

    def wait(index: int, watcher: Watcher) -> None:
        waiting.wait()
        names: list[str] = []
        end = time.monotonic() + 10.0
        while not names and time.monotonic() < end:
            names = watcher.wait(end - time.monotonic()).names
        told[index] = names

    threads = [
        threading.Thread(target=wait, args=(index, watcher))
        for index, watcher in enumerate(watchers)
    ]
    for thread in threads:
        thread.start()
    waiting.wait()
    for index, folder in enumerate(folders):
        (folder / f"m{index}").write_bytes(b"m")
    for thread in threads:
        thread.join()
    assert told == {index: [f"m{index}"] for index in range(len(folders))}
    for watcher in watchers:
        watcher.close()
    inotify.close()


def test_two_watchers_of_one_folder_share_its_watch_until_the_last_lets_go(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """The kernel gives a folder one watch however many ask: each watcher is told of each
    name, and one closing leaves the other its watch (it removed the other's)."""
    other = watch(str(tmp_path), poll_interval=60.0)
    assert isinstance(other, InotifyWatcher)
    (tmp_path / "both").write_bytes(b"b")
    assert inotify.wait(1.0).names == ["both"]
    assert other.wait(1.0).names == ["both"]
    inotify.close()
    woken: list[Changes] = []
    waiter = threading.Thread(target=lambda: woken.append(other.wait(5.0)))
    waiter.start()
    (tmp_path / "after").write_bytes(b"a")
    waiter.join()
    assert woken[0].names == ["after"]
    other.close()


class LatePoll:
    """The instance's poll, entered only once the test says so: what a thread that lost the
    processor between taking its turn to poll and polling does."""

    def __init__(self, poll: select.poll) -> None:
        self._poll = poll
        self.polling = threading.Event()
        self.go = threading.Event()

    def poll(self, timeout: int | None) -> list[tuple[int, int]]:
        self.polling.set()
        self.go.wait()
        return self._poll.poll(timeout)


def test_news_read_by_another_thread_s_look_wakes_the_watcher_that_polls(
    tmp_path: Path, inotify: InotifyWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive's look (`wait(0)`) reads the instance itself: the events another watcher
    was about to poll for are read there, and handed to it, which must wake."""
    folder = tmp_path / "polled"
    folder.mkdir()
    polling = watch(str(folder), poll_interval=60.0)
    late = LatePoll(watch_module._shared()._poll)
    monkeypatch.setattr(watch_module._shared(), "_poll", late)
    woken: list[Changes] = []
    waiter = threading.Thread(target=lambda: woken.append(polling.wait(10.0)))
    waiter.start()
    assert late.polling.wait(5.0)
    (folder / "m").write_bytes(b"m")
    inotify.wait(0)  # reads the instance before the poller polls
    sent = time.monotonic()
    late.go.set()
    waiter.join()
    assert woken[0].names == ["m"]
    assert time.monotonic() - sent < 5.0  # woken, not timed out
    polling.close()
    inotify.close()


def test_an_overflow_of_the_one_queue_tells_every_watcher_to_rescan(
    tmp_path: Path, inotify: InotifyWatcher
) -> None:
    """The instance's queue is every watcher's: events past its length are lost to all,
    those of a folder that had none of its own as well as they may be."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"fs.inotify.max_queued_events is {limit}: too long a queue to fill here")
    here, there, quiet = (tmp_path / name for name in ("here", "there", "quiet"))
    for folder in (here, there, quiet):
        folder.mkdir()
    watchers = [watch(str(folder), poll_interval=60.0) for folder in (here, there, quiet)]
    (here / "m").write_bytes(b"m")
    for _ in range(limit // 2 + 1):  # two events a move, read by nobody meanwhile
        os.rename(here / "m", there / "m")
        os.rename(there / "m", here / "m")
    assert [watcher.wait(0).everything for watcher in watchers] == [True, True, True]
    assert [watcher.wait(0) for watcher in watchers] == [Changes()] * 3  # told once
    for watcher in watchers:
        watcher.close()
    inotify.close()


def test_a_watcher_takes_no_descriptor_of_its_own(tmp_path: Path, inotify: InotifyWatcher) -> None:
    """It took three (an instance and a wake-up pipe): with none left, it polled."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "new").write_bytes(b"n")
    with no_descriptor_left():
        watcher = watch(str(folder), poll_interval=60.0)
        assert isinstance(watcher, InotifyWatcher)
        os.rename(tmp_path / "new", folder / "new")
        assert watcher.wait(1.0).names == ["new"]
        watcher.close()
    inotify.close()


def test_an_inotify_instance_without_descriptors_for_its_wakeups_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The process's instance takes the last descriptor, its wake-ups' eventfd finds none
    (EMFILE): the watcher is refused (`watch` polls instead) and the instance is closed,
    neither the descriptor nor one of the 128 inotify instances a user may have kept. The
    log says so, once: a reader that polled said nothing."""
    monkeypatch.setattr(watch_module, "_process", None)  # as in a process that has none yet
    monkeypatch.setattr(watch_module, "_told", {})
    held = inotify_instances()
    with no_descriptor_left(free=1):  # the instance's
        with pytest.raises(OSError, match="Too many open files"):
            InotifyWatcher(str(tmp_path))
        assert watch(str(tmp_path), poll_interval=60.0).polls
        os.close(os.open(os.devnull, os.O_RDONLY))  # the one left is free again
    assert watch_module._process is None
    assert inotify_instances() == held
    [told] = [record for record in caplog.records if record.name == "boxmq.queue"]
    assert told.levelname == "WARNING"
    assert told.getMessage().startswith(
        "no inotify instance for this process (Too many open files: "
    )


def _told(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "boxmq.queue"]


def test_a_missing_folder_is_polled_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder that does not exist cannot be watched: its reader polls, which the log did
    not say. Said once per process, not once per folder (a deleted queue's readers)."""
    monkeypatch.setattr(watch_module, "_told", {})
    caplog.set_level(logging.DEBUG, logger="boxmq.queue")
    missing = [tmp_path / name / "target" for name in ("gone", "also-gone")]
    assert all(watch(str(path), poll_interval=5.0).polls for path in missing)
    [(level, text)] = _told(caplog)
    assert level == "DEBUG"
    assert text.startswith(f"{missing[0]} is missing (deleted, or not made yet): ")
    assert "every 5 s" in text


def _refuse_watches(fd: int, path: bytes, mask: int) -> int:
    """inotify_add_watch as it fails once the user's fs.inotify.max_user_watches are taken."""
    ctypes.set_errno(errno.ENOSPC)
    return -1


def test_the_watch_limit_reached_is_said_once_with_its_fix_and_its_end_once(
    tmp_path: Path,
    inotify: InotifyWatcher,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """100,000 subscriptions read at once take 200,000 watches: past the kernel's limit
    (ENOSPC from inotify_add_watch) their readers polled, slower and dearer, and the log said
    nothing. No test can reach the limit on demand without changing the machine's sysctl, so
    the add-watch call is replaced by one that fails as the kernel's does."""
    monkeypatch.setattr(watch_module, "_told", {})
    caplog.set_level(logging.INFO, logger="boxmq.queue")
    folders = [tmp_path / f"q{index}" for index in range(3)]
    for folder in folders:
        folder.mkdir()
    kernel_add = watch_module._shared()._add
    monkeypatch.setattr(watch_module._shared(), "_add", _refuse_watches)
    polled = [watch(str(folder), poll_interval=0.5) for folder in folders[:2]]
    assert all(watcher.polls for watcher in polled)
    limit = Path("/proc/sys/fs/inotify/max_user_watches").read_text().strip()
    [(level, text)] = _told(caplog)
    assert level == "WARNING"
    assert text.startswith(f"inotify watch limit reached (fs.inotify.max_user_watches = {limit}")
    assert "polled every 0.5 s" in text
    assert "sysctl fs.inotify.max_user_watches=" in text
    monkeypatch.setattr(watch_module._shared(), "_add", kernel_add)
    watcher = watch(str(folders[2]), poll_interval=0.5)
    assert isinstance(watcher, InotifyWatcher)
    assert [level for level, _ in _told(caplog)] == ["WARNING", "INFO"]
    assert _told(caplog)[1][1].startswith("inotify watches to be had again")
    watcher.close()
    for watcher in polled:
        watcher.close()
    inotify.close()


def test_a_reader_refused_a_watch_is_watched_once_watches_are_to_be_had(
    tmp_path: Path,
    inotify: InotifyWatcher,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A reader opened past the watch limit polled until it was opened again: one whose MQTT
    client stays connected polled for the broker's whole life, however many watches were
    freed since (the sysctl raised, other processes gone). It tries again now and then, and
    once watched says "rescan": a file that landed before the watch is in that rescan, one
    after in the watch's news."""
    monkeypatch.setattr(watch_module, "_told", {})
    caplog.set_level(logging.INFO, logger="boxmq.queue")
    kernel_add = watch_module._shared()._add
    tries: list[bytes] = []

    def refuse(fd: int, path: bytes, mask: int) -> int:
        tries.append(path)
        return _refuse_watches(fd, path, mask)

    monkeypatch.setattr(watch_module._shared(), "_add", refuse)
    monkeypatch.setattr(watch_module, "_RETRY_FIRST", 3600.0)
    first = watch(str(tmp_path / "q"), poll_interval=60.0)  # no folder there yet, either
    assert first.polls
    assert [first.wait(0) for _ in range(100)] == [Changes()] * 100  # no try before it is due
    assert len(tries) == 1  # the open's (its parent's watch refused: no more)
    first.close()
    monkeypatch.setattr(watch_module, "_RETRY_FIRST", 0.0)  # a try at each look from now on
    watcher = watch(str(tmp_path / "q"), poll_interval=60.0)
    assert watcher.wait(0) == Changes()  # tried, refused again: it polls, said once
    assert len(tries) == 3
    (tmp_path / "q").mkdir()
    monkeypatch.setattr(watch_module._shared(), "_add", kernel_add)
    (tmp_path / "q" / "early").write_bytes(b"e")
    assert watcher.wait(0).everything  # watched: rescan, which finds "early"
    assert not watcher.polls
    (tmp_path / "q" / "late").write_bytes(b"l")
    assert watcher.wait(1.0).names == ["late"]
    assert [level for level, _ in _told(caplog)] == ["WARNING", "INFO"]
    assert _told(caplog)[1][1].startswith("inotify watches to be had again")
    watcher.close()
    inotify.close()


@pytest.fixture
def no_instance_yet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As in a process that has no inotify instance yet: the one a test makes is closed after
    it, the process's own comes back."""
    monkeypatch.setattr(watch_module, "_process", None)
    monkeypatch.setattr(watch_module, "_instance_retry", None)
    monkeypatch.setattr(watch_module, "_instance_refused", None)
    yield
    if (made := watch_module._process) is not None:
        forks._holders.discard(made)  # a child forked later must not close the numbers again
        os.close(made.fd)
        os.close(made._kick)


def test_a_reader_refused_an_instance_is_woken_by_inotify_once_there_is_room(
    tmp_path: Path,
    no_instance_yet: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker started while the user's 128 inotify instances were taken (or without a
    descriptor left) polled for its whole life: each of its readers polled until it was
    opened again, though other processes had closed theirs. Each tries again now and then,
    and the log says once that the instance was made."""
    monkeypatch.setattr(watch_module, "_told", {})
    monkeypatch.setattr(watch_module, "_RETRY_FIRST", 0.0)  # a try at each look
    caplog.set_level(logging.INFO, logger="boxmq.queue")
    with no_descriptor_left():
        watcher = watch(str(tmp_path), poll_interval=60.0)
        polled = watcher.polls
        assert watcher.wait(0) == Changes()  # tried, refused again: it polls, said once
    (tmp_path / "early").write_bytes(b"e")
    assert watcher.wait(0).everything  # watched: rescan, which finds "early"
    assert (polled, watcher.polls) == (True, False)
    (tmp_path / "late").write_bytes(b"l")
    assert watcher.wait(1.0).names == ["late"]
    told = _told(caplog)
    assert [level for level, _ in told] == ["WARNING", "INFO"]
    assert told[0][1].startswith("no inotify instance for this process (Too many open files")
    assert told[1][1].startswith("an inotify instance for this process at last")
    watcher.close()


class _Clock:
    """time.monotonic for watch.py, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_readers_refused_an_instance_ask_for_one_together(
    tmp_path: Path, no_instance_yet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each polling reader refused an instance asked the kernel for one on its own: a
    broker's hundreds of subscriptions made hundreds of failed inotify_init1 calls a minute.
    The process asks when due, once for all of them, and each reader watches at its next
    look after the instance is made."""
    real_init = watch_module._INOTIFY_INIT
    assert real_init is not None
    asked: list[int] = []

    def init(flags: int) -> int:
        asked.append(flags)
        return int(real_init(flags))

    monkeypatch.setattr(watch_module, "_INOTIFY_INIT", init)
    monkeypatch.setattr(watch_module, "_told", {})
    clock = _Clock()
    monkeypatch.setattr(watch_module, "time", clock)
    folders = [tmp_path / f"q{index}" for index in range(3)]
    for folder in folders:
        folder.mkdir()

    def look() -> list[Changes]:
        return [reader.wait(0) for reader in readers]

    with no_descriptor_left():
        readers = [watch(str(folder), poll_interval=60.0) for folder in folders]
        assert len(asked) == 1  # the first open's: the others were given its refusal
        assert look() == [Changes()] * 3  # not due yet
        clock.now += 1.0
        assert look() == [Changes()] * 3  # due: the first look asks, refused again
        assert len(asked) == 2
        clock.now += 1.0
        assert look() == [Changes()] * 3  # two seconds after that refusal, not one
        assert len(asked) == 2
        clock.now += 1.0
        assert look() == [Changes()] * 3
        assert len(asked) == 3
    clock.now += 4.0
    assert all(changes.everything for changes in look())  # watched: rescan
    assert len(asked) == 4
    assert not any(reader.polls for reader in readers)
    monkeypatch.setattr(watch_module, "time", time)  # the wait below times out by it
    (folders[1] / "late").write_bytes(b"l")
    assert readers[1].wait(1.0).names == ["late"]
    for reader in readers:
        reader.close()


def test_a_refused_reader_tries_again_ever_later_at_most_once_a_minute() -> None:
    backoff = watch_module._Backoff(now=100.0)
    dues = [backoff.due]
    for _ in range(8):
        backoff.refused(now=dues[-1])
        dues.append(backoff.due)
    assert dues[0] == 101.0  # a second after the refusal
    waits = [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert [later - due for due, later in itertools.pairwise(dues)] == waits


def test_a_folder_made_again_past_the_watch_limit_is_polled_until_it_is_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader's folder deleted and made again (an unsubscribe and a new subscribe) when no
    watch is left: the reader looked for it on a timer and found it, but unwatched, and said
    "nothing new" at each look, so that what landed in it waited for the reader's next full
    rescan. It says "rescan" at each look now, until a watch is to be had. The add-watch
    call is replaced as above: the limit cannot be reached on demand."""
    monkeypatch.setattr(watch_module, "_told", {})
    caplog.set_level(logging.INFO, logger="boxmq.queue")
    folder, watcher = _folder_watcher(tmp_path)  # looks again every 0.1 s
    kernel_add = watch_module._shared()._add
    monkeypatch.setattr(watch_module._shared(), "_add", _refuse_watches)
    shutil.rmtree(folder)
    folder.mkdir()
    assert _until(watcher, lambda changes: changes.everything)  # it left: rescan
    time.sleep(0.15)
    assert watcher.wait(1.0).everything  # polled: rescan at the next look
    assert [level for level, _ in _told(caplog)] == ["WARNING"]
    monkeypatch.setattr(watch_module._shared(), "_add", kernel_add)
    assert watcher.wait(1.0).everything  # watched again
    (folder / "new").write_bytes(b"n")
    assert _until(watcher, lambda changes: "new" in changes.names)
    assert [level for level, _ in _told(caplog)] == ["WARNING", "INFO"]
    watcher.close()
