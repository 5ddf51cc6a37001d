"""Fanning one staged file out to several dropboxes so that a crash can never send a copy twice.

Linking the staged file straight into each target/ and unlinking it last leaves, after a crash
in between, a staged file whose copies are partly out: a consumer may have taken one already,
and linking them all again would send it a second time. So a copy goes through a pending
folder of its subscription, `<dropbox>/working/<pending>/<copy>` (no consumer looks there):

1. the staged file is linked into the pending folder of every dropbox it goes to;
2. the staged file is unlinked: from here on every copy exists, pending;
3. each pending copy is renamed into its dropbox's target/.

So a staged file still there means none of its copies reached a target/ yet: linking it again
is safe (a copy already pending is kept). A staged file gone means every copy was pending:
what is left pending is renamed into target/ (`finish_pending`), never linked again. Only a
recovery looks through the subscriptions; a normal fan-out knows where its copies are.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence

from boxmq.store import layout
from boxmq.store.layout import State, wait_for_targets
from boxmq.store.topics import has_record, subscription_folders

__all__ = ["finish_pending", "send_through_pending"]

log = logging.getLogger("boxmq.store")


def send_through_pending(
    path: str, pending: str, copies: Sequence[tuple[str, str]], made: set[str] | None = None
) -> None:
    """Send the staged file `path` as each `(dropbox, copy name)` of `copies`, its copies
    waiting in `<dropbox>/working/<pending>/` (made if missing, and added to `made` then)
    between the unlink of `path` and their rename into target/.

    `path` already gone: another process (or a recovery) unlinked it, so every copy was
    pending; what is still pending is renamed all the same, each copy once whoever does it."""
    folders = [os.path.join(dropbox, State.WORKING.value, pending) for dropbox, _ in copies]
    for folder, (dropbox, copy) in zip(folders, copies, strict=True):
        _link_pending(path, folder, dropbox, copy, made)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # every copy is pending now
    for folder, (dropbox, copy) in zip(folders, copies, strict=True):
        pending_copy = os.path.join(folder, copy)
        target = os.path.join(dropbox, State.TARGET.value, copy)
        try:
            os.rename(pending_copy, target)
        except FileNotFoundError:
            # Renamed already, or the subscription was deleted (or never linked), or its
            # target/ moved aside since its deliver looked (AssuredIntake): waited for.
            _when_target_back(dropbox, pending_copy, target)


def _when_target_back(dropbox: str, pending_copy: str, target: str) -> None:
    """A copy out (its staged file gone) whose rename into target/ found none: if the
    subscription's target/ was moved aside (operations.md's "Disk usage"), renamed once it is
    back, within TARGET_BACK_WAIT; else left pending, for a restart's `finish_pending`, and
    said. Nothing to do if the subscription is gone or the copy was renamed already."""
    if not wait_for_targets([dropbox]):
        with contextlib.suppress(FileNotFoundError):
            os.rename(pending_copy, target)
        return
    log.warning(
        "%s: its target/ was moved aside while a copy was sent and is not back after %s s; "
        "the copy waits in %s until target/ is back and boxmq starts again",
        dropbox,
        layout.TARGET_BACK_WAIT,
        pending_copy,
    )


def finish_pending(root: str, pending: str) -> list[str]:
    """A recovery: rename into target/ every copy left in `working/<pending>/` of any
    subscription under `root`, once the staged files they came from were handled (a copy of
    a file still staged must be linked again, not renamed). The pending folders it emptied,
    for the caller to remove if they are its own."""
    emptied = []
    # Every subscription folder, its record not read: for 10,000 subscriptions the call took
    # 823 M instructions with their records opened and parsed, 150 M without
    # (docs/benchmarks.md). A folder with no record (a subscribe died before writing it) is
    # no subscription: what it holds is left for the sweep's rules (`remove_if_abandoned`
    # keeps a folder that holds a message), not made ready in it.
    for dropbox in subscription_folders(root):
        folder = os.path.join(dropbox, State.WORKING.value, pending)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        if names and not has_record(dropbox):
            continue
        for copy in names:
            with contextlib.suppress(FileNotFoundError):
                os.rename(
                    os.path.join(folder, copy), os.path.join(dropbox, State.TARGET.value, copy)
                )
        emptied.append(folder)
    return emptied


def _link_pending(path: str, folder: str, dropbox: str, copy: str, made: set[str] | None) -> None:
    """Link `path` as `copy` into a subscription's pending `folder`, made (and added to
    `made`) if missing. A copy already there was linked before a crash: kept. No working/
    (the subscription was deleted meanwhile), or no `path` (sent already): no copy."""
    try:
        os.link(path, os.path.join(folder, copy))
        return
    except FileExistsError:
        return
    except FileNotFoundError:
        pass
    working = os.path.join(dropbox, State.WORKING.value)
    current = working
    try:
        for part in os.path.relpath(folder, working).split(os.sep):
            current = os.path.join(current, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(current)
    except FileNotFoundError:
        return  # the subscription is gone
    if made is not None:
        made.add(folder)
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.link(path, os.path.join(folder, copy))
