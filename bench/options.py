"""How a benchmark reads an option that names some of what it runs (`--cases qos1,qos2`,
`--brokers boxmq`, `--sessions clean`) or the sizes it runs at (`--groups 1,10`): every name
one it knows, once, and every size a whole number above 0, or a usage error before anything
starts. A name that was not one (a typo) used to run the others alone as if asked, or another
thing under that name; one given twice ran twice; a size that was not one stopped the run
with a traceback. Not a benchmark (bench/README.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def chosen(
    parser: argparse.ArgumentParser, option: str, text: str, known: Sequence[str]
) -> list[str]:
    """The comma-separated names of `text`, in its order; `parser` stops the run (exit 2) on
    the first that is not one of `known`, naming it and them, or that is given twice."""
    names = [name.strip() for name in text.split(",")]
    for at, name in enumerate(names):
        if name not in known:
            parser.error(f"{option}: no {name!r} ({', '.join(known)})")
        if name in names[:at]:
            parser.error(f"{option}: {name!r} twice")
    return names


def counts(text: str) -> list[int]:
    """The comma-separated sizes of `text` (`--groups 1,10,100`), for argparse's `type=`: a
    text that is not whole numbers above 0 is its usage error (exit 2), naming the option."""
    try:
        sizes = [int(size) for size in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not whole numbers above 0, comma-separated")
    return sizes
