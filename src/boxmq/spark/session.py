"""Registering the data source, and a quiet local SparkSession for pipelines and tests.

`spark.dataSource.register` works per session, so `import boxmq.spark` registers into the
session active at that moment, and `register(spark)` into any other. `local_session` builds a
`local[N]` session the way the research note found quiet and correct on this kind of machine:
workers run this very interpreter (PYSPARK_PYTHON; otherwise they run whatever `python3` is on
PATH, without boxmq or pyarrow), no UI, no progress bar, log4j at ERROR.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping

from pyspark.sql import SparkSession

from boxmq.spark.source import BoxMQDataSource

__all__ = ["local_session", "register"]

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = off
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gw.name = org.apache.spark.api.python.PythonGatewayServer
logger.gw.level = error
"""


def register(spark: SparkSession | None = None) -> SparkSession | None:
    """Register the "boxmq" format in `spark` (default: the active session, if there is one).

    Returns the session registered into, or None when there was none."""
    session = spark if spark is not None else SparkSession.getActiveSession()
    if session is not None:
        session.dataSource.register(BoxMQDataSource)
    return session


def _cores(master: str) -> int:
    """The threads a local `master` runs tasks in, as Spark counts them: `local` is one,
    `local[*]` (and `local[*,F]`) every core; 2 for any other master (cores unknown here)."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if match is None:
        return 2
    if match[1] is None:
        return 1
    if match[1] == "*":
        return os.cpu_count() or 1
    return int(match[1])


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"boxmq-spark-log4j2-{os.getuid()}.properties")
    try:
        with open(path) as existing:
            if existing.read() == _LOG4J:
                return path
    except FileNotFoundError:
        pass
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as out:
        out.write(_LOG4J)
    os.replace(temporary, path)
    return path


def local_session(
    app_name: str = "boxmq",
    *,
    master: str = "local[2]",
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """A quiet SparkSession on this machine with the "boxmq" format registered.

    `config` adds or overrides Spark settings. Shuffle partitions default to the core count of
    `master` (Spark's 200 is slow for the small shuffles of a streaming aggregate)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback" warning
    cores = str(_cores(master))
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": cores,
        "spark.default.parallelism": cores,
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_log4j_file()}",
        **(config or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
