"""docs/pubsub.md's Python examples, run as a reader runs them: each block alone, in a fresh
interpreter, on an empty root in its own folder. Its first one waited for ever after its one
message (`for msg in sub` waits while the subscription is open), which parsing the block, all
test_docs does, cannot see; the exactly-once block's comments say what each call returns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pubsub.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
# `box.call(...)   # ...: True` or `# a repeat: False, ...`: what the call returns
_SAYS = re.compile(r"^(box\.\w+\(.*\))\s+#.*?\b(True|False)\b")


def _blocks() -> list[str]:
    return _PYTHON_BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def _run(block: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import boxmq\n" + block],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,  # a block that waits for ever fails here
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_page_has_the_blocks_this_file_runs() -> None:
    assert len(_blocks()) == 2


def test_the_subscribe_example_prints_what_it_says_and_ends(tmp_path: Path) -> None:
    block = _blocks()[0]
    printed = _run(block, tmp_path)
    said = re.search(r"print\(msg\.topic.*\)\s+# (.+)$", block, re.M)
    assert said is not None, "the print line says what it prints"
    assert printed == said.group(1) + "\n"


def test_the_exactly_once_calls_return_what_the_comments_say(tmp_path: Path) -> None:
    lines = _blocks()[1].splitlines()
    calls = [m.groups() for m in map(_SAYS.match, lines) if m is not None]
    assert len(calls) == len(lines) == 4
    printed = "".join(f"print({call})\n" for call, _ in calls)
    expected = "".join(f"{value}\n" for _, value in calls)
    assert _run("box = boxmq.open('./data')\n" + printed, tmp_path) == expected
