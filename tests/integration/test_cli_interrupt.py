"""A Ctrl-C at any moment of a `boxmq` command ends it as one while it waits does: exit 130, no
traceback. The moments tried here are the third of a second its modules take to load, when a
Ctrl-C was a KeyboardInterrupt traceback (found pressing Ctrl-C just after Enter)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]

# Sends this process a real SIGINT when the module named on argv[1] starts to load, then runs
# the command as argv[2] says: `-m` as `python -m boxmq` does, or the console script's
# `module:function` as the script pip writes from pyproject's [project.scripts] does.
_INTERRUPTED_AT_IMPORT = """
import importlib.abc, os, runpy, signal, sys

at = sys.argv[1]

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == at:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell's; a test's may ignore it
sys.meta_path.insert(0, Interrupt())
how = sys.argv[2]
sys.argv = ["boxmq", *sys.argv[3:]]
if how == "-m":
    runpy.run_module("boxmq", run_name="__main__", alter_sys=True)
else:
    module, _, function = how.partition(":")
    sys.exit(getattr(__import__(module, fromlist=[function]), function)())
"""


def _console_script() -> str:
    with (ROOT / "pyproject.toml").open("rb") as read:
        scripts: dict[str, str] = tomllib.load(read)["project"]["scripts"]
    return scripts["boxmq"]


@pytest.mark.parametrize("how", ["-m", "console script"])
@pytest.mark.parametrize("module", ["boxmq.client.box", "boxmq.cli_parser", "boxmq.store.layout"])
def test_a_ctrl_c_while_it_loads_ends_it_with_130_and_no_traceback(
    root: Path, how: str, module: str
) -> None:
    entry = _console_script() if how == "console script" else how
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_AT_IMPORT, module, entry, "--data", str(root), "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert (done.returncode, done.stderr) == (130, "")
    assert not root.exists()  # stopped before it did anything


def test_a_ctrl_c_while_it_waits_ends_it_with_130_and_no_traceback(root: Path) -> None:
    """The same as the one while it loads: what the tests above compare with."""
    command = [sys.executable, "-m", "boxmq", "--data", str(root), "--fsync", "never"]
    waiting = subprocess.Popen(
        [*command, "subscribe", "news/#"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
        # Python's handler, as a shell starts it with: the test's runner may ignore SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Its subscription's record, written before it waits. (The wait looked for a folder
    # "subscriptions" that no layout has, and so always ran out its 30 s.)
    record = f"*/.subscriptions/client.cli-{waiting.pid}/.subscription"
    until(
        lambda: list((root / "topic-root").glob(record)),
        "it never subscribed",
        within=30,
        every=0.02,
    )
    time.sleep(0.2)  # into its wait for a message
    waiting.send_signal(signal.SIGINT)
    _, err = waiting.communicate(timeout=60)
    assert (waiting.returncode, err) == (130, "")
