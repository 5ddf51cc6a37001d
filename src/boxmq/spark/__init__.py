"""boxmq's PySpark connector: a boxmq root as a Spark source and sink (docs/spark.md).

    import boxmq.spark                  # registers "boxmq" in the active SparkSession, if any
    boxmq.spark.register(spark)         # a session made after the import
    spark = boxmq.spark.local_session() # or: a quiet local session, registered

Needs the `spark` extra (`pip install 'boxmq[spark]'`); nothing else in boxmq imports this.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401  (the extra's presence, checked once with a useful message)
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "boxmq.spark needs PySpark: pip install 'boxmq[spark]' (pyspark>=4.2,<5, pyarrow, pandas)"
    ) from error

from pyspark import SparkContext
from pyspark.sql.utils import is_remote

from boxmq.spark.claims import StreamBusy
from boxmq.spark.records import COLUMNS, SCHEMA
from boxmq.spark.session import local_session, register
from boxmq.spark.source import BoxMQDataSource

__all__ = ["COLUMNS", "SCHEMA", "BoxMQDataSource", "StreamBusy", "local_session", "register"]

# Only a driver has a SparkContext (or, under Spark Connect, a remote session); executor
# workers import this module too, to unpickle the data source, and must not look for one.
if SparkContext._active_spark_context is not None or is_remote():
    register()
