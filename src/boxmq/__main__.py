"""The `boxmq` command: pyproject's entry point, and `python -m boxmq ...` (for a venv whose
scripts are not on PATH)."""

from __future__ import annotations

import sys


def main() -> int:
    """boxmq.cli's main, with a Ctrl-C while it loads (a third of a second) ended as one after:
    130, no traceback. `import boxmq` loads nothing, so this try begins at once."""
    try:
        from boxmq.cli import main as run

        return run()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
