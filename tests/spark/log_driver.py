"""A Spark driver that streams a queue to its end, for a test to read what the driver says.

    python log_driver.py ROOT CHECKPOINT JVM_OPTIONS

The stream's offset methods (where expired messages are moved) run in a Python process Spark
starts, whose standard error is the driver's: what that process says in the test session's own
SparkSession goes to the terminal, never to a test. So the test reads this driver's standard
error instead. Queue "in" → queue "out", Trigger.AvailableNow; nothing here configures logging,
as a user's script need not."""

from __future__ import annotations

import sys

import boxmq.spark

ROOT, CHECKPOINT, JVM_OPTIONS = sys.argv[1:4]
QUERY_SECONDS = 120  # a bound on the query, whose end the test waits for

spark = boxmq.spark.local_session(
    "boxmq-log", master="local[1]", config={"spark.driver.defaultJavaOptions": JVM_OPTIONS}
)
query = (
    spark.readStream.format("boxmq")
    .option("root", ROOT)
    .option("queue", "in")
    .load()
    .writeStream.format("boxmq")
    .option("root", ROOT)
    .option("queue", "out")
    .option("checkpointLocation", CHECKPOINT)
    .trigger(availableNow=True)
    .start()
)
ended = query.awaitTermination(QUERY_SECONDS)
spark.stop()
sys.exit(0 if ended else f"the query did not end within {QUERY_SECONDS} s")
