"""The sink's expiration column in a real SparkSession: a TIMESTAMP_NTZ is a wall-clock time
read in the session's time zone, as Spark reads it; an epoch that can only be seconds fails."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from tests.spark.jvm import JVM_OPTIONS

import boxmq
from boxmq.errors import InvalidArgument
from boxmq.spark import zones

Finish = Callable[[StreamingQuery], StreamingQuery]

# A zone whose offset (+05:45) no worker's local zone shares unless it is Kathmandu's own.
SESSION_ZONE = "Asia/Kathmandu"


@pytest.fixture
def root(tmp_path: Path) -> Iterator[str]:
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        yield box.root


@pytest.fixture
def in_kathmandu(spark: SparkSession) -> Iterator[str]:
    """The session's time zone set to one the worker's local zone (the test's) is not."""
    local = datetime.datetime(2031, 1, 2).astimezone().utcoffset()
    assert local != datetime.timedelta(hours=5, minutes=45), "run this test in another TZ"
    before = spark.conf.get("spark.sql.session.timeZone")
    assert before is not None
    spark.conf.set("spark.sql.session.timeZone", SESSION_ZONE)
    yield SESSION_ZONE
    spark.conf.set("spark.sql.session.timeZone", before)


def _expirations(root: str, queue: str) -> dict[str, int]:
    with boxmq.open(root) as box:
        return {
            peeked.envelope.type or "": peeked.envelope.expiration
            for peeked in box.queue(queue).peek()
        }


def test_a_timestamp_ntz_expiration_is_read_in_the_session_time_zone(
    spark: SparkSession, root: str, in_kathmandu: str
) -> None:
    """The worker read a TIMESTAMP_NTZ in its own local time zone, where Spark's own cast to
    TIMESTAMP (and every other conversion) reads it in spark.sql.session.timeZone."""
    ntz = "TIMESTAMP_NTZ'2031-01-02 03:04:05'"
    for kind, expiration in (("ntz", ntz), ("ltz", f"CAST({ntz} AS TIMESTAMP)")):
        # One frame each: a union of the two would widen both to TIMESTAMP.
        frame = spark.sql(f"SELECT 'x' AS body, '{kind}' AS type, {expiration} AS expiration")
        frame.write.format("boxmq").option("root", root).option("queue", "out").mode(
            "append"
        ).save()

    cast = spark.sql(f"SELECT unix_millis(CAST({ntz} AS TIMESTAMP)) AS ms").first()
    assert cast is not None
    spark_ms = cast.ms
    wall_clock = datetime.datetime(2031, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert spark_ms == int(wall_clock.timestamp() * 1000) - (5 * 60 + 45) * 60_000
    assert _expirations(root, "out") == {"ntz": spark_ms, "ltz": spark_ms}


def test_a_stream_reads_a_timestamp_ntz_expiration_in_the_session_time_zone_too(
    spark: SparkSession, root: str, in_kathmandu: str, tmp_path: Path, finish: Finish
) -> None:
    """A micro-batch's tasks learn the session's settings as a batch write's do."""
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"body": "x"}\n')
    ntz = "TIMESTAMP_NTZ'2031-01-02 03:04:05'"
    query = (
        spark.readStream.schema("body string")
        .json(str(source))
        .selectExpr("body", "'ntz' AS type", f"{ntz} AS expiration")
        .writeStream.format("boxmq")
        .option("root", root)
        .option("queue", "out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    cast = spark.sql(f"SELECT unix_millis(CAST({ntz} AS TIMESTAMP)) AS ms").first()
    assert cast is not None
    assert _expirations(root, "out") == {"ntz": cast.ms}


def test_a_timestamp_expiration_after_year_9999_is_written_as_it_is(
    spark: SparkSession, root: str
) -> None:
    """Spark's timestamps go on past year 9999 (the source reads such an expiration as one),
    Python's datetime does not: the write failed on OverflowError, 'date value out of range'."""
    for kind, ms in (("10000", 253_402_300_800_000), ("last", 9_223_372_036_854_775)):
        frame = spark.sql(
            f"SELECT 'x' AS body, '{kind}' AS type, timestamp_millis({ms}) AS expiration"
        )
        frame.write.format("boxmq").option("root", root).option("queue", "out").mode(
            "append"
        ).save()
    assert _expirations(root, "out") == {
        "10000": 253_402_300_800_000,
        "last": 9_223_372_036_854_775,
    }


@pytest.mark.parametrize("zone", ["PST", "GMT-08", "UTC+01:30", "-5", "Z"])
def test_a_timestamp_expiration_is_written_in_a_session_zone_only_java_knows(
    spark: SparkSession, root: str, zone: str
) -> None:
    """Spark takes these for spark.sql.session.timeZone and names the zone of the timestamps it
    hands the Python workers by them; Python's tz databases know none of them, so the write of
    any TIMESTAMP column failed in the worker with pytz's UnknownTimeZoneError."""
    before = spark.conf.get(zones.SESSION_TIME_ZONE)
    assert before is not None
    spark.conf.set(zones.SESSION_TIME_ZONE, zone)
    try:
        instant = "timestamp_millis(1792891800000)"
        frame = spark.sql(f"SELECT 'x' AS body, 'ltz' AS type, {instant} AS expiration")
        frame.write.format("boxmq").option("root", root).option("queue", "out").mode(
            "append"
        ).save()
    finally:
        spark.conf.set(zones.SESSION_TIME_ZONE, before)
    assert _expirations(root, "out") == {"ltz": 1792891800000}


def test_expirations_in_a_repeated_or_skipped_hour_are_the_instants_spark_gives(
    spark_missing: str | None, tmp_path: Path
) -> None:
    """A worker in Paris, where 02:30 of 2026-10-25 happens twice: PySpark handed the sink a
    TIMESTAMP as naive local time, which cannot say which 02:30 it was, so a message due at
    the second one (01:30 UTC) expired an hour early, at the first. Wall-clock times
    (TIMESTAMP_NTZ) in the repeated and in the skipped hour are read as Spark's cast reads them.
    A driver of its own: the session's workers live in the test's zone."""
    if spark_missing is not None:
        pytest.skip(spark_missing)
    with boxmq.open(tmp_path / "data", fsync="never") as box:
        root = box.root
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("zone_driver.py")), root, JVM_OPTIONS],
        env={**os.environ, "TZ": "Europe/Paris"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["second-0230"][1] - found["first-0230"][1] == 3_600_000
    assert {kind: stored for kind, (stored, _) in found.items()} == {
        kind: spark_ms for kind, (_, spark_ms) in found.items()
    }


@pytest.mark.parametrize("seconds", [1, 1_790_000_000, 99_999_999_999])
def test_an_expiration_in_epoch_seconds_fails_the_write_naming_the_unit(
    spark: SparkSession, root: str, seconds: int
) -> None:
    """Taken as milliseconds, 1_790_000_000 (2026-09-21 in seconds) was 1970-01-21: the
    message expired at once and nobody was told."""
    frame = spark.createDataFrame([("x", seconds)], "body string, expiration long")
    with pytest.raises(Exception, match=r"column 'expiration'.*epoch milliseconds.*seconds"):
        frame.write.format("boxmq").option("root", root).option("queue", "out").mode(
            "append"
        ).save()
    assert _expirations(root, "out") == {}


def test_an_expiration_from_1973_on_is_taken_as_epoch_milliseconds(
    spark: SparkSession, root: str
) -> None:
    frame = spark.createDataFrame(
        [("x", "at", 100_000_000_000), ("x", "past", 0), ("x", "long-past", -5)],
        "body string, type string, expiration long",
    )
    frame.write.format("boxmq").option("root", root).option("queue", "out").mode("append").save()
    assert _expirations(root, "out") == {"at": 100_000_000_000, "past": 1, "long-past": 1}


@pytest.mark.parametrize(
    ("name", "offset_hours"),
    [
        *[("UTC", 0), ("+08:00", 8), ("-5", -5), ("GMT-08", -8), ("UTC+01:30", 1.5)],
        *[("Europe/Paris", 1), ("PST", -8), ("EST", -5)],  # PST as java's ZoneId.SHORT_IDS has it
    ],
)
def test_the_session_zone_is_read_as_spark_reads_it(name: str, offset_hours: float) -> None:
    zone = zones.session_zone(name)
    assert zone is not None
    offset = datetime.datetime(2031, 1, 2, tzinfo=zone).utcoffset()
    assert offset == datetime.timedelta(hours=offset_hours)


def test_a_session_zone_python_does_not_know_fails_saying_what_to_set() -> None:
    assert (
        zones.session_zone(None) is None
    )  # never set: Spark uses the JVM's zone, as local runs do
    with pytest.raises(InvalidArgument, match=r"timeZone is 'Mars/Base'.*region id.*offset"):
        zones.session_zone("Mars/Base")
