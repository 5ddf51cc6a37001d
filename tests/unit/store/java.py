"""Compile a Java class and run it, for the tests that check a name reads as DropboxMQ's
Java reads it (the JDK Spark runs on brings `javac`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def run_java(folder: Path, name: str, source: str, *args: str) -> str:
    """Compile `source` (the public class `name`) in `folder`, run it with `args` and return
    what it printed; skip the test where there is no `javac`, fail it on CI."""
    if shutil.which("javac") is None:
        if os.environ.get("CI"):
            pytest.fail("no javac on PATH (CI has the JDK the Spark tests run on)")
        pytest.skip("no javac on PATH")
    (folder / f"{name}.java").write_text(source)
    subprocess.run(["javac", f"{name}.java"], cwd=folder, check=True, timeout=120)
    return subprocess.run(
        ["java", "-cp", ".", name, *args],
        cwd=folder,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    ).stdout
