"""What `--json` prints, parsed as a script parses it."""

from __future__ import annotations

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
