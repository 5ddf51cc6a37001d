"""What `--json` prints, parsed as a script parses it."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from tests.integration.test_cli import ok


def test_peek_shows_the_type_get_shows(root: Path) -> None:
    ok(root, "put", "docs", "%PDF", "--type", "application/pdf")
    ok(root, "put", "docs", "plain")
    typed, untyped = json.loads(ok(root, "--json", "peek", "docs"))
    assert typed["type"] == "application/pdf"
    assert "type" not in untyped  # only when set, as peek's correlation-id and reply-to
    assert "TYPE" in ok(root, "peek", "docs").splitlines()[0]
    assert json.loads(ok(root, "--json", "get", "docs"))["type"] == "application/pdf"
    [locked] = json.loads(ok(root, "--json", "peek", "docs", "--state", "processing"))
    assert locked["type"] == "application/pdf"


def test_subscribe_shows_when_a_message_expires_as_get_does(root: Path) -> None:
    ok(root, "subscribe", "t/#", "--name", "s", "--keep", "--idle", "0")
    ok(root, "subscribe", "u/#", "--name", "s", "--keep", "--idle", "0")
    ok(root, "publish", "t/a", "soon", "--expires-in", "1h")
    ok(root, "publish", "t/a", "never")
    ok(root, "publish", "u/a", "soon", "--expires-in", "1h")
    got = json.loads(ok(root, "--json", "get", "u/#", "--subscriber", "s"))
    soon, never = map(
        json.loads,
        ok(root, "--json", "subscribe", "t/#", "--name", "s", "--idle", "0").splitlines(),
    )
    # The same time (published a moment apart), written the same way.
    apart = datetime.datetime.fromisoformat(soon["expires"]) - datetime.datetime.fromisoformat(
        got["expires"]
    )
    assert abs(apart.total_seconds()) < 10
    assert soon["expires"].endswith("+00:00")
    assert "expires" not in never  # only when set, as its correlation-id and reply-to
