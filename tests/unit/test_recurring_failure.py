"""RecurringFailure: a failure of a task repeated on a timer is told once per errno, and its
end once."""

from __future__ import annotations

import errno

from boxmq.errors import RecurringFailure


def _error(code: int | None) -> OSError:
    return OSError(code, "refused") if code is not None else OSError("no errno")


def test_a_failure_is_news_once_per_errno_and_its_end_once() -> None:
    failing = RecurringFailure()
    assert not failing.recovered()  # nothing failed yet
    assert failing.news(_error(errno.EROFS))
    assert not failing.news(_error(errno.EROFS))  # the same, at the next run
    assert failing.news(_error(errno.EIO))  # another errno
    assert failing.recovered()
    assert not failing.recovered()
    assert failing.news(_error(errno.EIO))  # failing again after a run that succeeded


def test_an_oserror_without_errno_is_still_a_failure() -> None:
    failing = RecurringFailure()
    assert failing.news(_error(None))
    assert not failing.news(_error(None))
    assert failing.recovered()
