"""A small data pipeline on Spark with boxmq as its source and sink (docs/spark.md).

    python examples/spark_pipeline.py [--dir ./spark-pipeline] [--sensors 10]

Needs the spark extra (`pip install -e '.[spark]'`) and Java 17. Everything runs on this machine:
the producers use boxmq's embedded API, Spark runs in local mode.

1. Simulated sensors put temperature readings (JSON) into the queue "sensors".
2. Stream 1: the queue → one-minute windows per sensor (mean, max, count) → Parquet files.
3. Stream 2: the Parquet windows (as a stream) → windows hotter than 30 °C → alerts published to
   the topic "alerts/temperature/<sensor>" (the `topic` column names each row's topic).
4. An operator subscribed to "alerts/#" receives the alerts through the embedded API.

It runs the pipeline twice: the second round of readings closes the windows the first round
left open (a window is written once the watermark has passed its end). Both streams keep their
checkpoints in --dir, so every reading counts once and every alert is sent once, even when
the script is killed and run again.
"""

from __future__ import annotations

import argparse
import json
import os
import random

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import boxmq
import boxmq.spark

WINDOW = "1 minute"
HOT = 30.0  # °C: a window whose hottest reading is above this raises an alert
START = 1_800_000_000  # event time of the first reading (epoch s), a round minute
READING_EVERY = 5  # seconds of event time between two readings of one sensor


def produce(root: str, sensors: int, first_second: int, seconds: int) -> int:
    """Sensors put one reading every READING_EVERY seconds of event time; some run hot."""
    rng = random.Random(first_second)
    readings = []
    for second in range(first_second, first_second + seconds, READING_EVERY):
        for sensor in range(sensors):
            hot = sensor % 4 == 0 and (second // 60) % 2 == 1  # every 4th sensor, odd minutes
            temperature = round(rng.gauss(33.0 if hot else 22.0, 1.5), 2)
            body = {"sensor": f"s{sensor}", "temperature": temperature, "ts": START + second}
            readings.append(boxmq.Outgoing(json.dumps(body), properties={"sensor": f"s{sensor}"}))
    with boxmq.open(root) as box:
        box.queue("sensors").put_many(readings)
    return len(readings)


def aggregate(spark: SparkSession, root: str, out: str) -> int:
    readings = (
        spark.readStream.format("boxmq")
        .option("root", root)
        .option("queue", "sensors")
        .option("maxRecordsPerTrigger", 1000)
        .load()
        .select(
            F.from_json(
                F.col("body").cast("string"), "sensor string, temperature double, ts long"
            ).alias("r")
        )
        .select("r.sensor", "r.temperature", F.col("r.ts").cast("timestamp").alias("at"))
    )
    windows = (
        readings.withWatermark("at", "30 seconds")
        .groupBy(F.window("at", WINDOW), "sensor")
        .agg(
            F.round(F.avg("temperature"), 2).alias("mean"),
            F.max("temperature").alias("hottest"),
            F.count("*").alias("readings"),
        )
        .select(F.col("window.start").alias("start"), "sensor", "mean", "hottest", "readings")
    )
    query = (
        windows.writeStream.format("parquet")
        .option("path", os.path.join(out, "windows"))
        .option("checkpointLocation", os.path.join(out, "checkpoints", "windows"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(progress.numInputRows for progress in query.recentProgress)


def alert(spark: SparkSession, root: str, out: str) -> int:
    folder = os.path.join(out, "windows")
    schema = spark.read.parquet(folder).schema
    windows = spark.readStream.schema(schema).parquet(folder)
    alerts = windows.where(F.col("hottest") > HOT).select(
        F.to_json(F.struct("sensor", "start", "hottest", "mean")).alias("body"),
        F.concat(F.lit("alerts/temperature/"), F.col("sensor")).alias("topic"),
        F.create_map(F.lit("sensor"), F.col("sensor")).alias("properties"),
        F.lit(7).alias("priority"),
    )
    query = (
        alerts.writeStream.format("boxmq")
        .option("root", root)
        .option("checkpointLocation", os.path.join(out, "checkpoints", "alerts"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(progress.numInputRows for progress in query.recentProgress)


def show_windows(spark: SparkSession, out: str) -> None:
    frame = spark.read.parquet(os.path.join(out, "windows")).orderBy("start", "sensor")
    print(f"  {frame.count()} windows in Parquet so far; the hot ones:")
    frame.where(F.col("hottest") > HOT).show(5, truncate=False)


def receive_alerts(operator: boxmq.Subscriber) -> None:
    received = 0
    while (message := operator.receive(timeout=1.0)) is not None:
        if received < 3:
            print(f"  {message.envelope.topic}: {message.body.decode()}")
        received += 1
        message.ack()
    print(f"  the operator received {received} alert(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="./spark-pipeline", help="root, outputs, checkpoints")
    parser.add_argument("--sensors", type=int, default=10)
    options = parser.parse_args()
    base = os.path.abspath(options.dir)
    root, out = os.path.join(base, "data"), os.path.join(base, "out")
    os.makedirs(out, exist_ok=True)

    spark = boxmq.spark.local_session("boxmq-pipeline")
    with boxmq.open(root) as box:
        # Subscribed before anything is published: a durable subscription keeps what arrives.
        operator = box.subscribe("alerts/#", "operator", max_in_flight=10)
        for round_, (first, seconds) in enumerate([(0, 300), (300, 120)], start=1):
            put = produce(root, options.sensors, first, seconds)
            print(f"\nround {round_}: the sensors put {put} readings into the queue 'sensors'")
            read = aggregate(spark, root, out)
            print(f"  stream 1 read {read} readings from the queue")
            show_windows(spark, out)
            sent = alert(spark, root, out)
            print(f"  stream 2 read {sent} new window(s) and sent an alert for each hot one")
            receive_alerts(operator)
        operator.close()
        counts = box.queue("sensors").counts()
        print(f"\nqueue 'sensors': {counts.done} processed, {counts.ready} ready")
        print(f"windows: {os.path.join(out, 'windows')} (Parquet)")
    spark.stop()


if __name__ == "__main__":
    main()
