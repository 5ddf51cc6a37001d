"""bench/spark: the boxmq data source against Spark's own binaryFile source, on one dropbox.

    python bench/spark.py [--messages 100000 | --quick] [--size 64] [--partitions 2] [--dir DIR]

One queue of N small messages is read four ways, in one SparkSession (local[2]) and one run:

- boxmq stream: `readStream.format("boxmq")`, Trigger.AvailableNow, one batch, `noop` sink. It
  claims every message (target/ → processing/), reads them, and acknowledges them (→ processed/)
  when Spark asks for the next batch: all of it is inside the measured time.
- binaryFile stream: `readStream.format("binaryFile")` over the same target/ folder, with the
  file name parsed into the same columns in SQL, `noop` sink. No claim and no ack: it only reads.
- boxmq batch: `read.format("boxmq")` over target/, `noop` write.
- binaryFile batch: `read.format("binaryFile")`, same parsing, `noop` write.

Every case reads a fresh hard-linked copy of the same files (the stream moves them). Spark's
file source runs with the settings the research note found fastest for tiny files (a smaller
open cost, no parallel listing job, the raw local file system), so the ratio is against the
tuned built-in. Before the timed cases, a round of 20,000 messages warms the Python workers and
the JVM's JIT (a first round at full size measured 2-3x slower than the next).
Rows/s = N / wall time of the query; for streams, the time of Spark's two main phases of
the batch is printed too (latestOffset: boxmq claims there; addBatch: the tasks read). The
issue's goals: boxmq >= 3x binaryFile streaming and batch, and >= 50,000 rows/s streaming on
2 cores.

Then the end-to-end latency of the demo's path: a paho client publishes at QoS 1 over MQTT to
`boxmq serve` (a child process, fsync always), a share group takes the messages, and a stream
(default trigger: the next micro-batch as soon as the last ends) hands them to a `foreachBatch`
sink; latency = the sink's clock when it has the row - the publisher's clock before publish
(one machine, one clock). `--rate` messages/s for `--seconds`; p50, p99 and max are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

import boxmq
import boxmq.spark
from boxmq.store.layout import queue_path
from processes import free_port, running, start_logged

TEMPLATE = "template"
QUICK_MESSAGES = 10_000
WARM_MESSAGES = 20_000  # enough for the JVM's JIT, not just to start the Python workers
STREAM_GOAL = 50_000.0  # rows/s, boxmq stream
RATIO_GOAL = 3.0  # boxmq / binaryFile, streaming and batch
QUERY_SECONDS = 1800  # a bound on any one query
PHASES = ("latestOffset", "addBatch")

# Spark settings that make its file source as fast as it gets on many tiny files.
TUNED = {
    "spark.sql.files.openCostInBytes": "8192",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "10000000",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.file.impl.disable.cache": "true",
}

BINARY_FILE = "path string, modificationTime timestamp, length long, content binary"
# The DropboxMQ name → the boxmq source's columns, in Spark SQL, for the built-in source.
PARSED = [
    "url_decode(f[1]) AS message_id",
    "cast(f[0] AS int) AS priority",
    "f[2] AS class",
    "cast(nullif(f[3], '') AS long) AS expiration",
    "url_decode(f[4]) AS correlation_id",
    "url_decode(f[5]) AS reply_to",
    "url_decode(f[6]) AS type",
    "str_to_map(f[7], '&', '=') AS properties",
    "content AS body",
]


@dataclass(frozen=True, slots=True)
class Result:
    case: str
    rows: int
    seconds: float
    phases: tuple[tuple[str, float], ...] = ()  # a stream's time per phase (Spark's durationMs)
    cpu: float = 0.0  # CPU seconds of this process and all its descendants (JVM, workers)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def _make_template(root: str, messages: int, size: int) -> None:
    body = os.urandom(size // 2).hex().encode()[:size]
    with boxmq.open(root, fsync="never") as box:
        queue = box.queue(TEMPLATE)
        for start in range(0, messages, 10_000):
            count = min(10_000, messages - start)
            queue.put_many(
                [boxmq.Outgoing(body, properties={"sensor": f"s{i % 50}"}) for i in range(count)]
            )


def _fresh_copy(root: str, name: str, messages: int | None = None) -> str:
    """A new queue holding hard links to (the first `messages` of) the template's files."""
    source = os.path.join(queue_path(root, TEMPLATE), "target")
    with boxmq.open(root, fsync="never") as box:
        box.queue(name)
    target = os.path.join(queue_path(root, name), "target")
    for index, entry in enumerate(sorted(os.listdir(source))):
        if messages is not None and index >= messages:
            break
        os.link(os.path.join(source, entry), os.path.join(target, entry))
    return target


def _binary_file(frame: DataFrame) -> DataFrame:
    named = frame.selectExpr("element_at(split(path, '/'), -1) AS name", "content")
    return named.selectExpr("split(name, '[.]') AS f", "content").selectExpr(*PARSED)


def _tree_cpu() -> float:
    """CPU seconds (user + system) used so far by this process and its descendants: Spark's
    JVM, its Python workers, and (through the parents that waited for them) the ones that ended,
    such as a stream's source runner. Other tenants of the machine are not counted."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, seconds)
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as source:
                fields = source.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while we looked
        ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        stats[int(entry)] = (int(fields[1]), ticks / tick)
    tree, total, grew = {os.getpid()}, 0.0, True
    while grew:
        grew = False
        for pid, (parent, _) in stats.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    for pid in tree:
        total += stats.get(pid, (0, 0.0))[1]
    return total


def _timed(case: str, rows: int, run: Callable[[], Phases]) -> Result:
    cpu = _tree_cpu()
    started = time.perf_counter()
    phases = run()
    seconds = time.perf_counter() - started
    return Result(case, rows, seconds, phases, _tree_cpu() - cpu)


Phases = tuple[tuple[str, float], ...]


def _stream(frame: DataFrame, checkpoint: str) -> Phases:
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(timeout=QUERY_SECONDS):
        query.stop()
        raise RuntimeError(f"a query ran for over {QUERY_SECONDS} s")
    # The batch that read the rows: latestOffset (the boxmq source claims there, and
    # acknowledges the batch before) and addBatch (the tasks read and write).
    [batch] = [p for p in query.recentProgress if p.numInputRows]
    return tuple((phase, batch.durationMs.get(phase, 0) / 1000) for phase in PHASES)


def _round(
    spark: SparkSession, root: str, messages: int, partitions: int, tag: str
) -> list[Result]:
    work = tempfile.mkdtemp(dir=root, prefix=f".bench-{tag}-")
    results = []

    name = f"{tag}-stream"
    _fresh_copy(root, name, messages)
    frame = (
        spark.readStream.format("boxmq")
        .option("root", root)
        .option("queue", name)
        .option("numPartitions", partitions)
        .load()
    )
    checkpoint = os.path.join(work, "chk-boxmq")
    results.append(_timed("boxmq stream", messages, lambda: _stream(frame, checkpoint)))

    folder = _fresh_copy(root, f"{tag}-files-stream", messages)
    reader = spark.readStream.format("binaryFile").schema(BINARY_FILE)
    files = _binary_file(reader.load(folder))
    checkpoint = os.path.join(work, "chk-files")
    results.append(_timed("binaryFile stream", messages, lambda: _stream(files, checkpoint)))

    name = f"{tag}-batch"
    _fresh_copy(root, name, messages)

    def boxmq_batch() -> Phases:
        reader = spark.read.format("boxmq").option("root", root).option("queue", name)
        frame = reader.option("numPartitions", partitions).load()
        frame.write.format("noop").mode("overwrite").save()
        return ()

    results.append(_timed("boxmq batch", messages, boxmq_batch))

    folder = _fresh_copy(root, f"{tag}-files-batch", messages)

    def files_batch() -> Phases:
        frame = _binary_file(spark.read.format("binaryFile").load(folder))
        frame.write.format("noop").mode("overwrite").save()
        return ()

    results.append(_timed("binaryFile batch", messages, files_batch))
    shutil.rmtree(work, ignore_errors=True)
    return results


def _report(results: list[Result], messages: int, size: int) -> None:
    rates = {result.case: result.rate for result in results}
    print(f"\n{messages} messages of {size} bytes, local[2], one run (warm workers)\n")
    print(f"{'case':<20} {'seconds':>8} {'rows/s':>10} {'CPU s':>7}")
    for result in results:
        phases = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in result.phases)
        print(
            f"{result.case:<20} {result.seconds:>8.2f} {result.rate:>10,.0f} "
            f"{result.cpu:>7.2f}  {phases}"
        )
    stream = rates["boxmq stream"] / rates["binaryFile stream"]
    batch = rates["boxmq batch"] / rates["binaryFile batch"]
    print(f"\nratio boxmq / binaryFile: streaming {stream:.1f}x, batch {batch:.1f}x")
    goals = [
        (f"streaming >= {RATIO_GOAL:g}x binaryFile", stream >= RATIO_GOAL),
        (f"batch >= {RATIO_GOAL:g}x binaryFile", batch >= RATIO_GOAL),
        (f"boxmq stream >= {STREAM_GOAL:,.0f} rows/s", rates["boxmq stream"] >= STREAM_GOAL),
    ]
    for goal, met in goals:
        print(f"goal {goal}: {'met' if met else 'NOT met'}")


# -- latency: publish over MQTT -> row in the sink ----------------------------------------------

LATENCY_GROUP = "$share/latency/bench/#"


@contextlib.contextmanager
def _serve(root: str, port: int) -> Iterator[None]:
    """`boxmq serve --mqtt` on `root`, logging beside it, until the block ends."""
    command = [sys.executable, "-m", "boxmq", "--data", root, "serve"]
    command += ["--mqtt", f"127.0.0.1:{port}"]
    folder = Path(root).parent
    with running(start_logged(command, folder, "serve"), "boxmq serve", folder / "serve.log", port):
        yield


def _publish(port: int, rate: float, seconds: float) -> int:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="latency-publisher")
    client.connect("127.0.0.1", port)
    client.loop_start()
    sent, start = 0, time.monotonic()
    infos = []
    while (elapsed := time.monotonic() - start) < seconds:
        ahead = sent / rate - elapsed
        if ahead > 0:
            time.sleep(ahead)
        body = json.dumps({"n": sent, "sent": time.time()})
        infos.append(client.publish("bench/latency", body, qos=1))
        sent += 1
    for info in infos:
        info.wait_for_publish(timeout=30)
    client.disconnect()
    client.loop_stop()
    return sent


def _latency(spark: SparkSession, base: str, rate: float, seconds: float) -> list[float]:
    root = os.path.join(base, "latency")
    with boxmq.open(root) as box:
        box.topics.attach_dropbox(LATENCY_GROUP, "spark")
    seen: list[float] = []
    lock = threading.Lock()

    def sink(batch: DataFrame, _batch_id: int) -> None:
        bodies = [row["body"] for row in batch.select("body").collect()]
        now = time.time()
        with lock:
            seen.extend(now - json.loads(body)["sent"] for body in bodies)

    port = free_port()
    with _serve(root, port):
        query = (
            spark.readStream.format("boxmq")
            .option("root", root)
            .option("subscription", LATENCY_GROUP)
            .option("consumer", "spark")
            .option("fsync", "never")
            .load()
            .selectExpr("CAST(body AS STRING) AS body")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", os.path.join(base, "latency-chk"))
            .start()
        )
        try:
            time.sleep(5)  # the first micro-batches start the workers: not part of the path
            sent = _publish(port, rate, seconds)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with lock:
                    if len(seen) >= sent:
                        break
                time.sleep(0.2)
        finally:
            query.stop()
    if len(seen) != sent:
        raise RuntimeError(f"the sink got {len(seen)} of {sent} messages")
    return seen


def _report_latency(latencies: list[float], rate: float) -> None:
    ms = sorted(1000 * value for value in latencies)
    p50 = statistics.median(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"\nend-to-end latency, MQTT QoS 1 publish -> foreachBatch sink, {len(ms)} messages "
        f"at {rate:g}/s: p50 {p50:,.0f} ms, p99 {p99:,.0f} ms, max {ms[-1]:,.0f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # One or the other: --quick used to win silently over a count given with it.
    count = parser.add_mutually_exclusive_group()
    count.add_argument("--messages", type=int, default=100_000)
    count.add_argument("--quick", action="store_true", help=f"{QUICK_MESSAGES} messages")
    parser.add_argument("--size", type=int, default=64, help="body bytes")
    parser.add_argument("--partitions", type=int, default=2, help="boxmq numPartitions")
    parser.add_argument("--dir", help="where the root goes (default: a temporary folder)")
    parser.add_argument("--rate", type=float, default=200.0, help="latency: messages/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency: how long")
    options = parser.parse_args(argv)
    messages = QUICK_MESSAGES if options.quick else options.messages
    base = tempfile.mkdtemp(prefix="boxmq-bench-spark-", dir=options.dir)
    root = os.path.join(base, "data")
    try:
        print(f"making {messages} messages in {root} ...", flush=True)
        _make_template(root, messages, options.size)
        spark = boxmq.spark.local_session("bench-spark", config=TUNED)
        print("warming the workers ...", flush=True)
        _round(spark, root, min(WARM_MESSAGES, messages), options.partitions, "warm")
        print(f"measuring ... (load average {os.getloadavg()[0]:.2f})", flush=True)
        results = _round(spark, root, messages, options.partitions, "timed")
        _report(results, messages, options.size)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print("measuring the latency ...", flush=True)
        seconds = min(options.seconds, 5.0) if options.quick else options.seconds
        _report_latency(_latency(spark, base, options.rate, seconds), options.rate)
        spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
