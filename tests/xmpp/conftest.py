"""The XMPP integration group: one Prosody for the session, and the skip rules.

Every test here carries the `xmpp` marker. Without Prosody a local run skips them and says
why; under CI=true that is an error instead (`make test` installs Prosody as root).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.prosody import Prosody, prosody_or_reason, run_prosody

HERE = Path(__file__).parent
_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.xmpp)


@pytest.fixture(scope="session")
def prosody(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prosody]:
    reason = prosody_or_reason()
    if reason is not None:
        if _CI:
            pytest.fail(f"CI must run the XMPP tests, but {reason}")
        pytest.skip(reason)
    with run_prosody(tmp_path_factory.mktemp("prosody")) as server:
        yield server


@pytest.fixture(scope="session")
def roomy_prosody(prosody: Prosody, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prosody]:
    """A second Prosody, its component_stanza_size_limit raised to 1 MiB (`prosody` first:
    its skip rules)."""
    roomy = tmp_path_factory.mktemp("roomy")
    with run_prosody(roomy, component_stanza_size_limit=2**20) as server:
        yield server
