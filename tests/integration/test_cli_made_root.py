"""`put`, `publish` and `subscribe` make the root when it is missing, but only for a command
that can run: one refused for its own arguments (a queue name or topic no folder can carry,
a --file that cannot be read, no standard input) says so before the root is made, and leaves
no empty folder behind at a mistyped --data."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("put", "q\udcff", "x"), "boxmq put: destination name 'q\\xff' is not valid Unicode"),
        (("put", "q", "--file", "/no/such/file"), "boxmq put: cannot read /no/such/file:"),
        (("publish", "t", "--file", "/no/such/file"), "boxmq publish: cannot read /no/such/"),
        (("publish", "a/+", "x"), "boxmq publish: topic name 'a/+' must not contain the"),
        (("subscribe", "a/#/b"), "boxmq subscribe: topic filter 'a/#/b': '#' must be alone"),
        (("subscribe", "$share//x"), "boxmq subscribe: "),
        (("put", "q"), "boxmq put: no body: the standard input is closed"),
    ],
)
def test_a_refused_command_makes_no_root(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    """Each made an empty root folder, then said what was wrong."""
    root = tmp_path / "typo"
    command = [sys.executable, "-m", "boxmq.cli", "--data", str(root), *args]
    if args == ("put", "q"):  # its standard input closed, as `<&-` does
        command = ["sh", "-c", f"{shlex.join(command)} <&-"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(says), done.stderr
    assert not root.exists()
