"""What a light command loads: `boxmq put`, `get`, `ack`, `ls` and `import boxmq` start in a
fraction of what the broker's modules cost (docs/benchmarks.md), so they must not load those.

Shell scripts call `boxmq put` once per message, and the tests start hundreds of such
processes: each module below, imported at the top of a module a light command reaches, costs
every one of them (`python -X importtime -m boxmq put q x` shows which).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The broker's (serve), the MQTT codec, the config file's reader, TLS, the XMPP and Spark
# doors (the XMPP flags' checks too); subprocess came with a search for the C library
# (store/libc.py), platform with uuid; passwd's getpass and rules came with its parser.
HEAVY = (
    "asyncio",
    "ssl",
    "tomllib",
    "subprocess",
    "platform",
    "boxmq.runtime",
    "boxmq.config",
    "boxmq.cli_serve",
    "boxmq.mqtt",
    "boxmq.xmpp",
    "boxmq.cli_passwd",
    "getpass",
    "boxmq.spark",
    "slixmpp",
    "pyspark",
)

# Publish/subscribe and the exactly-once intake: what `ls` and `publish` need, not a queue's
# put, get or ack (Box.topics and Box.intake import them when first used).
PUBSUB = ("boxmq.client.topics", "boxmq.client.assured")


def _run(*args: str, status: int = 0) -> tuple[set[str], str]:
    """Every module a fresh interpreter imports to run `python -X importtime args...`, and
    what it printed."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert done.returncode == status, done.stderr
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return modules, done.stdout


def _imported(*args: str, status: int = 0) -> set[str]:
    return _run(*args, status=status)[0]


def _heavy(modules: set[str], heavy: tuple[str, ...] = HEAVY + PUBSUB) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy))


@pytest.fixture
def cli(tmp_path: Path) -> list[str]:
    return ["-m", "boxmq", "--data", str(tmp_path / "data"), "--fsync", "never"]


def test_put_get_ack_and_ls_load_none_of_the_brokers_modules(cli: list[str]) -> None:
    put = _imported(*cli, "put", "jobs", "hi")
    assert {"boxmq.client.box", "boxmq.cli", "argparse"} <= put  # the check sees modules
    assert _heavy(put) == []
    got, printed = _run(*cli, "get", "jobs")
    assert _heavy(got) == []
    message_id = printed.split()[1]  # `id  <id>`, the first line
    assert _heavy(_imported(*cli, "ack", "jobs", message_id)) == []
    assert _heavy(_imported(*cli, "get", "jobs", status=3)) == []  # none ready
    assert _heavy(_imported(*cli, "ls"), HEAVY) == []  # ls lists subscriptions too


def test_import_boxmq_loads_none_of_the_brokers_modules() -> None:
    assert _heavy(_imported("-c", "import boxmq")) == []


def test_dir_of_boxmq_lists_every_name_of_the_api_before_any_is_loaded() -> None:
    """`import boxmq` loads its names when first asked for (PEP 562); dir() listed only those
    asked for so far, so python.md's signature check, run alone, found no `State`."""
    listed = subprocess.run(
        [sys.executable, "-c", "import boxmq; print(sorted(set(boxmq.__all__) - set(dir(boxmq))))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert listed.stdout.strip() == "[]"


def test_a_module_of_boxmq_the_docs_write_as_boxmq_dot_name_loads_when_first_asked_for() -> None:
    """python.md writes `boxmq.core.ExactlyOnceLimits(...)`, `boxmq.model.GROUP_KEY` and
    `boxmq.errors.StoreFailed`; after `import boxmq` alone each raised AttributeError (no
    attribute 'core'), as no import had loaded the module yet. Each loads when asked for now,
    and a name that is no module of boxmq still raises AttributeError."""
    asked = (
        "import boxmq; "
        "print(boxmq.core.ExactlyOnceLimits.__name__, boxmq.model.GROUP_KEY, "
        "boxmq.errors.StoreFailed.__name__, "
        "hasattr(boxmq, 'nothing'), hasattr(boxmq, '_private'))"
    )
    modules, printed = _run("-c", asked)
    assert printed.split() == [
        "ExactlyOnceLimits",
        "JMSXGroupID",
        "StoreFailed",
        "False",
        "False",
    ]
    assert _heavy(modules, HEAVY) == []


def test_serve_and_publish_load_them_which_the_check_would_see(cli: list[str]) -> None:
    # Guard against a check that passes because it could never see these modules.
    modules = _imported("-c", "import boxmq.cli_serve, boxmq.runtime")
    assert {"ssl", "tomllib", "asyncio", "boxmq.mqtt", "boxmq.config"} <= set(_heavy(modules))
    assert _heavy(_imported(*cli, "publish", "news", "hi")) == ["boxmq.client.topics"]
