"""`make demo`: sensors publish over MQTT to `boxmq serve`; Spark counts and aggregates.

    make demo            # or: python examples/demo.py [--dir ./demo] [--rooms 4] [--seed 7]

Needs the demo extra (`pip install -e '.[demo]'`: the spark extra, paho-mqtt, matplotlib) and
Java 17. Everything runs on this machine, on loopback:

1. `boxmq serve` starts with an MQTT listener on a free port and its root in DIR/data.
2. The share group `$share/etl/sensors/#` gets its Spark member before anything is published:
   it is a dropbox, so it keeps what arrives while no stream runs.
3. An operator connects with a persistent MQTT session and subscribes to `alerts/#`.
4. Simulated sensors publish over MQTT: temperature readings at QoS 1 and door events
   (+1 someone came in, -1 someone left) at QoS 2. Occupancy is the counting example of the
   QoS document: a door event counted twice, or lost, makes the count wrong for good.
5. A Structured Streaming job consumes the share group, writes every event to Parquet, and
   a second one turns the readings into one-minute windows per room (mean, max, count), in
   Parquet too; a third publishes an alert for each window hotter than 30 °C to
   `alerts/temperature/<room>`, which reaches the operator over MQTT.
6. Occupancy per room is summed from Parquet and compared with what the simulation knows;
   a PNG plot of the windows and the occupancy is written.

The sensors publish in two rounds of event time (the second closes the windows the first left
open: a window is written once the watermark has passed its end); the second round's streams
go on from the first's checkpoints, so every event counts once. Each run takes a --dir of its
own (`make demo` names one by the time): one that holds an earlier run's results is refused,
since what Spark counts there is compared with this run's simulation alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import boxmq
import boxmq.spark

GROUP_FILTER = "$share/etl/sensors/#"
MEMBER = "spark"
WINDOW = "1 minute"
HOT = 30.0  # °C: a window whose hottest reading is above this raises an alert
START = 1_800_000_000  # event time of the first reading (epoch s), a round minute
EVERY = 5  # seconds of event time between two readings of one room
EVENT = "room string, kind string, temperature double, delta int, ts long"


# -- the broker --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def broker(root: str, port: int, log: str) -> Iterator[None]:
    """`boxmq serve` in a child process, until the block ends (then SIGTERM, as an operator)."""
    command = [
        sys.executable,
        "-m",
        "boxmq",
        "--data",
        root,
        "serve",
        "--mqtt",
        f"127.0.0.1:{port}",
    ]
    with open(log, "ab") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"boxmq serve did not start; see {log}")
            time.sleep(0.1)
        yield
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)


def connect(client_id: str, port: int, *, persistent: bool = False) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    properties.SessionExpiryInterval = 3600 if persistent else 0
    client.connect("127.0.0.1", port, clean_start=not persistent, properties=properties)
    client.loop_start()
    return client


# -- the sensors ---------------------------------------------------------------------------------


@dataclass
class Building:
    """The simulation: what really happened, to compare the pipeline's results with."""

    rooms: int
    rng: random.Random
    occupancy: Counter[str] = field(default_factory=Counter)
    events: int = 0

    def events_between(self, first: int, seconds: int) -> Iterator[tuple[str, dict[str, object]]]:
        for second in range(first, first + seconds, EVERY):
            for number in range(self.rooms):
                room = f"room{number}"
                hot = number % 3 == 0 and (second // 60) % 2 == 1  # every 3rd room, odd minutes
                temperature = round(self.rng.gauss(32.5 if hot else 22.0, 1.5), 2)
                reading = {"room": room, "kind": "temp", "temperature": temperature}
                yield f"sensors/{room}/temp", reading | {"ts": START + second}
                if self.rng.random() < 0.4:
                    delta = 1 if self.occupancy[room] == 0 or self.rng.random() < 0.55 else -1
                    self.occupancy[room] += delta
                    door = {"room": room, "kind": "door", "delta": delta}
                    yield f"sensors/{room}/door", door | {"ts": START + second}


def publish_round(building: Building, port: int, first: int, seconds: int) -> int:
    """Publish one round over MQTT; returns once the broker acknowledged every message."""
    sensors = connect(f"sensors-{first}", port)
    try:
        sent = []
        for topic, event in building.events_between(first, seconds):
            qos = 2 if event["kind"] == "door" else 1  # a door event must count exactly once
            sent.append(sensors.publish(topic, json.dumps(event), qos=qos))
        for info in sent:
            info.wait_for_publish(timeout=30)
            if not info.is_published():
                raise SystemExit(f"the broker did not acknowledge message {info.mid}")
        building.events += len(sent)
        return len(sent)
    finally:
        sensors.disconnect()
        sensors.loop_stop()


class Operator:
    """A person's MQTT client with a persistent session, subscribed to the alerts."""

    def __init__(self, port: int) -> None:
        self.alerts: list[str] = []
        self._lock = threading.Lock()
        self._client = connect("operator", port, persistent=True)
        self._client.on_message = self._received
        self._client.subscribe("alerts/#", qos=1)

    def _received(self, _client: mqtt.Client, _data: object, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.alerts.append(f"{message.topic}: {message.payload.decode()}")

    def wait_for(self, count: int, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.alerts) >= count:
                    break
            time.sleep(0.1)
        with self._lock:
            return list(self.alerts)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


# -- the Spark jobs ------------------------------------------------------------------------------


def run(query_writer: object) -> int:
    """Start a stream with Trigger.AvailableNow, wait for it, return the rows it read."""
    query = query_writer.trigger(availableNow=True).start()  # type: ignore[attr-defined]
    query.awaitTermination()
    return sum(progress.numInputRows for progress in query.recentProgress)


def ingest(spark: SparkSession, root: str, out: str) -> int:
    """The share group → every event, parsed, in Parquet (idempotent with its checkpoint)."""
    events = (
        spark.readStream.format("boxmq")
        .option("root", root)
        .option("subscription", GROUP_FILTER)
        .option("consumer", MEMBER)
        .load()
        .select(F.from_json(F.col("body").cast("string"), EVENT).alias("e"), "topic")
        .select("e.*", "topic")
        .withColumn("at", F.col("ts").cast("timestamp"))
    )
    return run(
        events.writeStream.format("parquet")
        .option("path", os.path.join(out, "events"))
        .option("checkpointLocation", os.path.join(out, "checkpoints", "events"))
        .partitionBy("kind")
    )


def aggregate(spark: SparkSession, out: str) -> int:
    """Parquet events → one-minute windows per room → Parquet."""
    folder = os.path.join(out, "events")
    temps = (
        spark.readStream.schema(spark.read.parquet(folder).schema)
        .parquet(folder)
        .where(F.col("kind") == "temp")
    )
    windows = (
        temps.withWatermark("at", "30 seconds")
        .groupBy(F.window("at", WINDOW), "room")
        .agg(
            F.round(F.avg("temperature"), 2).alias("mean"),
            F.max("temperature").alias("hottest"),
            F.count("*").alias("readings"),
        )
        .select(F.col("window.start").alias("start"), "room", "mean", "hottest", "readings")
    )
    return run(
        windows.writeStream.format("parquet")
        .option("path", os.path.join(out, "windows"))
        .option("checkpointLocation", os.path.join(out, "checkpoints", "windows"))
        .outputMode("append")
    )


def alert(spark: SparkSession, root: str, out: str) -> int:
    """Parquet windows → an alert per hot window, published to alerts/temperature/<room>."""
    folder = os.path.join(out, "windows")
    windows = spark.readStream.schema(spark.read.parquet(folder).schema).parquet(folder)
    alerts = windows.where(F.col("hottest") > HOT).select(
        F.to_json(F.struct("room", "start", "hottest", "mean")).alias("body"),
        F.concat(F.lit("alerts/temperature/"), F.col("room")).alias("topic"),
    )
    return run(
        alerts.writeStream.format("boxmq")
        .option("root", root)
        .option("checkpointLocation", os.path.join(out, "checkpoints", "alerts"))
    )


def hot_windows(spark: SparkSession, out: str) -> int:
    return int(
        spark.read.parquet(os.path.join(out, "windows")).where(F.col("hottest") > HOT).count()
    )


def occupancy(spark: SparkSession, out: str) -> dict[str, int]:
    doors = spark.read.parquet(os.path.join(out, "events")).where(F.col("kind") == "door")
    rows = doors.groupBy("room").agg(F.sum("delta").alias("people")).collect()
    return {row["room"]: int(row["people"]) for row in rows}


def plot(spark: SparkSession, out: str, counted: dict[str, int]) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt

    windows: Any = spark.read.parquet(os.path.join(out, "windows")).orderBy("start").toPandas()
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(3, 1))
    for room, frame in windows.groupby("room"):
        left.plot(frame["start"], frame["mean"], marker="o", label=str(room))
    left.axhline(HOT, color="red", linestyle="--", linewidth=1, label=f"alert above {HOT:g} °C")
    left.set(title="mean temperature per one-minute window", ylabel="°C")
    left.legend(fontsize="small")
    left.tick_params(axis="x", labelrotation=30)
    rooms = sorted(counted)
    right.bar(rooms, [counted[room] for room in rooms])
    right.set(title="occupancy (from door events)", ylabel="people")
    figure.tight_layout()
    path = os.path.join(out, "demo.png")
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


# -- the whole thing -------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="./demo", help="root, outputs, checkpoints, log")
    parser.add_argument("--rooms", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    base = os.path.abspath(options.dir)
    root, out = os.path.join(base, "data"), os.path.join(base, "out")
    os.makedirs(out, exist_ok=True)
    if os.path.exists(os.path.join(out, "events")):
        raise SystemExit(f"{base} holds an earlier run's results: give another --dir")
    log = os.path.join(base, "serve.log")
    port = free_port()
    building = Building(options.rooms, random.Random(options.seed))

    with boxmq.open(root) as box:
        box.topics.attach_dropbox(GROUP_FILTER, MEMBER)  # before the first publish: keeps all
    spark = boxmq.spark.local_session("boxmq-demo")
    with broker(root, port, log):
        print(f"boxmq serve: MQTT on 127.0.0.1:{port}, root {root} (log: {log})")
        operator = Operator(port)
        for round_, (first, seconds) in enumerate([(0, 300), (300, 120)], start=1):
            sent = publish_round(building, port, first, seconds)
            print(f"\nround {round_}: the sensors published {sent} events over MQTT")
            print(f"  ingest: {ingest(spark, root, out)} events from {GROUP_FILTER} to Parquet")
            print(f"  aggregate: {aggregate(spark, out)} readings into closed windows")
            read = alert(spark, root, out)
            hot = hot_windows(spark, out)
            print(f"  alert: {read} new window(s) read; {hot} hot so far, each published once")
            received = operator.wait_for(hot, timeout=30)
            print(f"  the operator received {len(received)} alert(s) over MQTT")
            for line in received[-2:]:
                print(f"    {line}")
        operator.close()

    counted = occupancy(spark, out)
    stored = spark.read.parquet(os.path.join(out, "events")).count()
    truth = {
        room: people for room, people in building.occupancy.items() if people or room in counted
    }
    print(f"\nevents published {building.events}, in Parquet {stored}")
    print(f"occupancy from Spark: {dict(sorted(counted.items()))}")
    print(f"occupancy simulated:  {dict(sorted(truth.items()))}")
    exact = stored == building.events and counted == truth
    print("every event counted exactly once" if exact else "MISMATCH: see above")
    print(f"plot: {plot(spark, out, counted)}")
    spark.stop()
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
