"""The Spark test group: one SparkSession for the whole run, and the skip rules.

Every test here carries the `spark` marker (`pytest -m "not spark"` leaves the JVM out). Without
pyspark or java a local run skips them and says why; under CI=true that is an error instead,
because CI must run them (`make test` installs the spark extra).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.spark.jvm import QUICK_JVM

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

HERE = Path(__file__).parent
_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java on PATH and no JAVA_HOME (Spark needs Java 17)"
    return None


MISSING = _missing()
if MISSING is not None and _CI:
    raise RuntimeError(f"CI must run the Spark tests, but {MISSING}")
if importlib.util.find_spec("pyspark") is None:
    # The modules import boxmq.spark, which needs pyspark: leave them out; the one module that
    # imports nothing of it (test_prerequisites.py) reports the skip and its reason.
    collect_ignore_glob = ["test_[!p]*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if MISSING is not None:
        pytest.skip(MISSING)
    import boxmq.spark

    session = boxmq.spark.local_session(
        "boxmq-tests", config={"spark.sql.streaming.stopTimeout": "10s", **QUICK_JVM}
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_missing() -> str | None:
    """Why the Spark tests cannot run on this machine, or None."""
    return MISSING


STREAM_SECONDS = 120  # a bound on any one streaming query of these tests


@pytest.fixture
def finish() -> Callable[[StreamingQuery], StreamingQuery]:
    """Wait (bounded) for an availableNow query to end; its failure is raised as it was."""

    def wait(query: StreamingQuery) -> StreamingQuery:
        if not query.awaitTermination(timeout=STREAM_SECONDS):
            query.stop()
            pytest.fail(f"the streaming query did not end within {STREAM_SECONDS} s")
        return query

    return wait
