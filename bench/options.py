"""How a benchmark reads an option that names some of what it runs (`--cases qos1,qos2`,
`--brokers boxmq`, `--sessions clean`): every name one it knows, or a usage error before
anything starts. A name that was not one (a typo) used to run the others alone as if asked,
or another thing under that name. Not a benchmark (bench/README.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def chosen(
    parser: argparse.ArgumentParser, option: str, text: str, known: Sequence[str]
) -> list[str]:
    """The comma-separated names of `text`, in its order; `parser` stops the run (exit 2) on
    the first that is not one of `known`, naming it and them."""
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in known:
            parser.error(f"{option}: no {name!r} ({', '.join(known)})")
    return names
