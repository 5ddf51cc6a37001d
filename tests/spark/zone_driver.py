"""A Spark driver whose Python workers live in a zone with daylight saving time.

    TZ=Europe/Paris python zone_driver.py ROOT JVM_OPTIONS

The session's workers take their local zone from the process that starts them, so the test
session's (the test's own zone) cannot show what a machine in Paris does. This driver writes,
with the boxmq sink, one message per expiration expression of the table below (session time
zone Europe/Paris too), and prints one JSON object: each message's type → [the expiration the
sink stored, the epoch ms Spark gives the same expression]."""

from __future__ import annotations

import json
import sys

import boxmq
import boxmq.spark

ROOT, JVM_OPTIONS = sys.argv[1:3]
FALL_BACK = "2026-10-25 02:30:00"  # happens twice in Paris: 02:30 CEST, then 02:30 CET
SPRING_FORWARD = "2026-03-29 02:30:00"  # never happens in Paris: 02:00 CET is 03:00 CEST
EXPRESSIONS = {
    # instants (TIMESTAMP): the first and the second 02:30 of 2026-10-25, one hour apart
    "first-0230": "timestamp_millis(1792888200000)",  # 00:30 UTC
    "second-0230": "timestamp_millis(1792891800000)",  # 01:30 UTC
    "second-0259": "timestamp_millis(1792893599000)",  # 01:59:59 UTC
    # wall-clock times (TIMESTAMP_NTZ) read in the session time zone
    "ntz-fall-back": f"TIMESTAMP_NTZ'{FALL_BACK}'",
    "ntz-spring-forward": f"TIMESTAMP_NTZ'{SPRING_FORWARD}'",
    # the same wall-clock times cast to TIMESTAMP by Spark
    "cast-fall-back": f"CAST(TIMESTAMP_NTZ'{FALL_BACK}' AS TIMESTAMP)",
    "cast-spring-forward": f"CAST(TIMESTAMP_NTZ'{SPRING_FORWARD}' AS TIMESTAMP)",
}

spark = boxmq.spark.local_session(
    "boxmq-zone",
    master="local[1]",
    config={
        "spark.driver.defaultJavaOptions": JVM_OPTIONS,
        "spark.sql.session.timeZone": "Europe/Paris",
    },
)
found: dict[str, list[int]] = {}
for kind, expression in EXPRESSIONS.items():
    # One frame each: a union would widen a TIMESTAMP_NTZ to TIMESTAMP.
    frame = spark.sql(f"SELECT 'x' AS body, '{kind}' AS type, {expression} AS expiration")
    frame.write.format("boxmq").option("root", ROOT).option("queue", "out").mode("append").save()
    row = spark.sql(f"SELECT unix_millis(CAST({expression} AS TIMESTAMP)) AS ms").first()
    assert row is not None
    found[kind] = [0, row.ms]
spark.stop()
with boxmq.open(ROOT) as box:
    for peeked in box.queue("out").peek():
        found[peeked.envelope.type or ""][0] = peeked.envelope.expiration
print(json.dumps(found))
