"""What `boxmq serve` says at start of what it does."""

from __future__ import annotations

import pytest

from boxmq.runtime import _expired_said, _fsync_said, _processed_said
from boxmq.store.commit import FsyncPolicy


@pytest.mark.parametrize(
    ("keep", "retention", "said"),
    [
        (True, 86400.0, "processed/ files are deleted after 1d (processed_retention)"),
        (True, None, "processed/ files are kept forever (processed_retention)"),
        (
            False,
            86400.0,
            "processed/ gets nothing from this server's clients (keep_processed = false); what "
            "other programs on the root acknowledge there is deleted after 1d "
            "(processed_retention)",
        ),
        (
            False,
            None,
            "processed/ gets nothing from this server's clients (keep_processed = false); what "
            "other programs on the root acknowledge there is kept forever (processed_retention)",
        ),
    ],
)
def test_the_processed_line_says_what_the_configuration_does(
    keep: bool, retention: float | None, said: str
) -> None:
    """With keep_processed = false (serve's default) an ack deletes, and nothing of this
    server's clients goes to processed/: the line said "processed/ files are deleted after 1d"
    all the same, as if their messages were kept a day. The retention still holds for what
    other programs (the embedded API, `boxmq ack`) leave there."""
    assert _processed_said(keep, retention) == said


@pytest.mark.parametrize(
    ("retention", "said"),
    [
        (None, "expired/ files are kept until purged (expired_retention = forever)"),
        (604800.0, "expired/ files are deleted 7d after they expired (expired_retention)"),
    ],
)
def test_the_expired_line_says_how_long_expired_messages_stay(
    retention: float | None, said: str
) -> None:
    assert _expired_said(retention) == said


@pytest.mark.parametrize(
    ("policy", "interval", "said"),
    [
        (FsyncPolicy.ALWAYS, 1.0, "fsync=always"),
        (FsyncPolicy.NEVER, 1.0, "fsync=never"),
        (FsyncPolicy.INTERVAL, 0.5, "fsync=interval, every 500ms"),
    ],
)
def test_the_fsync_policy_is_said_with_its_interval(
    policy: FsyncPolicy, interval: float, said: str
) -> None:
    """`fsync=interval` was said without how often, so the file's fsync_interval could not be
    seen to have been taken."""
    assert _fsync_said(policy, interval) == said
