"""The demo's path end to end: MQTT publishers → a share group → Spark → a topic → MQTT.

A real boxmq MQTT server (in a thread, on a free port) and real paho clients; the Spark stream
reads the share group's dropbox from the same root, as `make demo` does.
"""

from __future__ import annotations

import json
import queue
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from tests.integration.mqtt.clients import (
    Paho,
    Received,
    RunningServer,
    paho,
    paho_properties,
    start_server,
)

import boxmq

GROUP = "$share/etl/sensors/#"


@contextmanager
def stopped_after(client: Paho) -> Iterator[Paho]:
    """`client` for the block, stopped at its end however it ends: a failed assertion left
    its loop thread connected to a server about to stop, to be told at the next test."""
    try:
        yield client
    finally:
        client.stop()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningServer]:
    with start_server(tmp_path / "root") as server:
        yield server


def test_mqtt_publishes_reach_spark_once_and_spark_alerts_reach_mqtt(
    spark: SparkSession,
    running: RunningServer,
    tmp_path: Path,
    finish: Callable[[StreamingQuery], StreamingQuery],
) -> None:
    root = str(running.root)
    with boxmq.open(root) as box:  # another process's view of the root, as Spark's
        box.topics.attach_dropbox(GROUP, "spark")
    with stopped_after(paho(running, "operator", clean=False, expiry=600)) as operator:
        operator.subscribe("alerts/#", qos=1)
        sent = Counter[str]()
        with stopped_after(paho(running, "sensors")) as sensors:
            for n in range(120):
                qos = 2 if n % 3 == 0 else 1
                body = json.dumps({"n": n, "room": f"r{n % 4}"})
                sensors.publish(f"sensors/r{n % 4}/{'door' if qos == 2 else 'temp'}", body, qos=qos)
                sent[body] += 1

        out = tmp_path / "events"
        stream = (
            spark.readStream.format("boxmq")
            .option("root", root)
            .option("subscription", GROUP)
            .option("consumer", "spark")
            .load()
        )
        finish(
            stream.selectExpr("CAST(body AS STRING) AS body", "topic")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        rows = spark.read.parquet(str(out)).collect()
        assert Counter(row["body"] for row in rows) == sent  # each exactly once
        assert {row["topic"].split("/")[2] for row in rows} == {"door", "temp"}

        alerts = (
            spark.read.parquet(str(out))
            .where("topic LIKE '%/door'")
            .selectExpr("body", "concat('alerts/', split(topic, '/')[1]) AS topic")
        )
        alerts.write.format("boxmq").option("root", root).mode("append").save()
        expected = sum(1 for body in sent if json.loads(body)["n"] % 3 == 0)
        got: list[Received] = []
        try:
            while len(got) < expected:
                got.append(operator.next(timeout=20))
        except queue.Empty:
            pytest.fail(f"the operator got {len(got)} of {expected} alerts over MQTT")
        assert {message.topic for message in got} == {f"alerts/r{room}" for room in range(4)}
        assert operator.nothing(within=1.0)  # and nothing twice


def test_an_mqtt_v5_messages_metadata_reaches_spark_and_goes_back_to_mqtt_as_it_came(
    spark: SparkSession, running: RunningServer
) -> None:
    """docs/spark.md's columns for a message an MQTT v5 client published (its properties,
    `reply_to`, `correlation_id`, `expiration`), and docs/mqtt.md's "a message read and
    published again with its properties goes out as it came in", through Spark's sink."""
    root = str(running.root)
    with boxmq.open(root) as box:
        box.topics.attach_dropbox("$share/etl/requests/#", "spark")
    with stopped_after(paho(running, "operator", clean=False, expiry=600)) as operator:
        operator.subscribe("answers/#", qos=1)
        sent: dict[str, object] = {
            "UserProperty": [("tenant", "acme"), ("trace", "a1")],
            "ContentType": "application/json",
            "ResponseTopic": "answers/dev-7",
            "CorrelationData": b"req-7",
            "PayloadFormatIndicator": 1,
        }
        properties = paho_properties(PacketTypes.PUBLISH, MessageExpiryInterval=3600, **sent)
        with stopped_after(paho(running, "device")) as device:
            device.publish("requests/1", b"{}", 1, properties=properties)

        frame = (
            spark.read.format("boxmq")
            .option("root", root)
            .option("subscription", "$share/etl/requests/#")
            .option("consumer", "spark")
            .load()
        )
        [row] = frame.collect()
        assert (row.topic, bytes(row.body)) == ("requests/1", b"{}")
        assert row.properties == {
            "tenant": "acme",
            "trace": "a1",
            "mqtt.content-type": "application/json",
            "mqtt.response-topic": "answers/dev-7",
            "mqtt.correlation-data": "cmVxLTc=",  # base64 of req-7
            "mqtt.payload-format": "utf-8",
        }
        assert (row.reply_to, row.correlation_id) == ("answers/dev-7", "req-7")
        assert 3599 <= (row.expiration - row.timestamp).total_seconds() <= 3601

        frame.selectExpr("body", "reply_to AS topic", "properties").write.format("boxmq").option(
            "root", root
        ).mode("append").save()
        answer = operator.next(timeout=20)
        assert (answer.topic, answer.payload) == ("answers/dev-7", b"{}")
        for name, value in sent.items():
            assert getattr(answer.properties, name) == value, name
