"""`boxmq serve`'s configuration: the `--config` file first, then the flags the user typed.

A flag's default must not override the file, so `cli` gives `--data` and `--fsync` defaults
of type `Default`: text the user did not type. Values the file leaves out keep those defaults.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from boxmq.config import ServeConfig, load_config

__all__ = ["Default", "serve_config"]


class Default(str):
    """A flag's default value, told apart from the same text typed by the user."""

    __slots__ = ()


def _typed(value: str | None) -> str | None:
    return None if value is None or isinstance(value, Default) else value


def serve_config(args: argparse.Namespace) -> ServeConfig:
    defaults = ServeConfig(data=Path(args.data), fsync=str(args.fsync))
    config = defaults if args.config is None else load_config(args.config, defaults=defaults)
    return config.override(
        data=_typed(args.data), fsync=_typed(args.fsync), sweep_interval=args.sweep_interval
    )
