"""Says, as a skip with its reason, when this machine cannot run the Spark tests."""

from __future__ import annotations

import pytest


def test_spark_can_run_here(spark_missing: str | None) -> None:
    if spark_missing is not None:
        pytest.skip(spark_missing)
