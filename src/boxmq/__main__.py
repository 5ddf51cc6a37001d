"""`python -m boxmq ...` is the `boxmq` command (for a venv whose scripts are not on PATH)."""

from __future__ import annotations

import sys

from boxmq.cli import main

sys.exit(main())
