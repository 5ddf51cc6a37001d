"""Every script under bench/ still loads and parses its options: no test runs them (a run takes
minutes and needs mosquitto, Prosody or Java), so a name one of them imports from src/ or from
another bench module could vanish, or an option clash, unnoticed until the next measurement.

One interpreter runs each script as `__main__` with `--help` (argparse prints and exits 0) and
imports the modules the others share: cheaper than a process per script, which would import
boxmq, paho, slixmpp and pyspark again each time.
"""

from __future__ import annotations

import ast
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.unit.mqtt.packet_bytes import ours

from boxmq.mqtt.packets import Connect

BENCH = Path(__file__).resolve().parents[2] / "bench"

# What the scripts import from each other (`from processes import ...`), not scripts.
SHARED = {"machine.py", "mqtt_wire.py", "options.py", "processes.py"}

# Run by the child: a script's SystemExit other than 0, or any exception, is a failure it
# names; each script runs with bench/ first on sys.path, as `python bench/x.py` has it.
_DRIVER = """
import runpy, sys, traceback
bench, shared, scripts = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
sys.path.insert(0, bench)
failed = []
for name in shared + scripts:
    sys.argv = [f"{bench}/{name}", "--help"]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__" if name in scripts else name[:-3])
        if name in scripts:
            failed.append(f"{name}: --help did not exit")
    except SystemExit as stop:
        if stop.code not in (0, None):
            failed.append(f"{name}: exit {stop.code}")
    except BaseException:
        failed.append(f"{name}: {traceback.format_exc()}")
print("FAILED:", *failed, sep="\\n" if failed else " ")
"""


def test_every_bench_script_imports_and_answers_help() -> None:
    names = sorted(path.name for path in BENCH.glob("*.py"))
    scripts = [name for name in names if name not in SHARED]
    assert {"store.py", "chaos.py", "spark.py", "xmpp.py"} <= set(scripts)  # the glob sees them
    assert set(names) >= SHARED
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(BENCH), ",".join(sorted(SHARED)), ",".join(scripts)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("FAILED:"), done.stdout[-4000:]
    for script in scripts:  # each printed its usage line
        assert f"usage: {script}" in done.stdout, script


def test_bench_spark_refuses_quick_with_a_count(tmp_path: Path) -> None:
    # --quick replaced a --messages given with it, so a run asked for 500 measured 10,000
    # unsaid; the pair is a usage error now, before a message is made (--dir stays empty).
    asked = ["--quick", "--messages", "500", "--dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(BENCH / "spark.py"), *asked],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: argument --messages: not allowed with argument --quick" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_bench_picks_its_ports_with_the_tests_own_picker() -> None:
    # bench/ and the tests each kept a copy of the port picker, and a fix made to one only
    # (5efe5ac, copied later by abca5eb) was a bug of the other; both use harness/ports.py now.
    from harness import ports

    processes = runpy.run_path(str(BENCH / "processes.py"), run_name="bench_processes")
    assert processes["free_ports"] is ports.free_ports
    assert processes["free_port"] is ports.free_port


def test_bench_mqtt_wire_connect_is_read_by_the_server_as_written() -> None:
    # The raw clients' CONNECT wrote its property length as one byte, which a property added
    # past 127 bytes would have made a malformed packet; a Variable Byte Integer as the others
    # now, the server's codec reads back what it says.
    wire = runpy.run_path(str(BENCH / "mqtt_wire.py"), run_name="mqtt_wire")
    connect = ours(wire["connect5"]("dev-1", False, 65_535, expiry=7_200))
    assert isinstance(connect, Connect)
    assert (connect.client_id, connect.clean_start) == ("dev-1", False)
    assert connect.properties.receive_maximum == 65_535
    assert connect.properties.session_expiry_interval == 7_200


def _bench_mqtt() -> dict[str, Any]:
    """bench/mqtt.py's names. It imports its siblings (processes, machine) as `python
    bench/mqtt.py` has them, taken out of sys.modules again after: tests import
    tests.processes, not that one."""
    loaded = set(sys.modules)
    sys.path.insert(0, str(BENCH))
    try:
        return runpy.run_path(str(BENCH / "mqtt.py"), run_name="bench_mqtt")
    finally:
        sys.path.remove(str(BENCH))
        for name in set(sys.modules) - loaded:
            del sys.modules[name]


def test_bench_mqtt_max_inflight_only_widens_mosquittos_window() -> None:
    # --max-inflight N set mosquitto's max_inflight_messages to N whatever N was, so that
    # -M 5 narrowed its window towards the subscriber from its default 20 to 5, where boxmq's
    # own (100) is widened only past it: "at least N" on every broker, never narrower.
    conf = _bench_mqtt()["_mosquitto_conf"]
    default = conf(1883, None)
    assert "max_inflight_messages" not in default
    assert conf(1883, 5) == default == conf(1883, 20)
    assert "max_inflight_messages 1000\n" in conf(1883, 1000)
    assert conf(1883, 21) == default + "max_inflight_messages 21\n"


def test_bench_mqtt_lifts_boxmqs_queue_as_mosquittos(tmp_path: Path) -> None:
    # mosquitto's max_queued_messages was lifted (0: none) and boxmq's max_queued left at its
    # 10,000, so that a subscriber falling that far behind made boxmq alone drop (INCOMPLETE).
    bench = _bench_mqtt()
    bench["mosquitto_command"](tmp_path, bench["_mosquitto_conf"](1883, None))
    assert "max_queued_messages 0\n" in (tmp_path / "mosquitto.conf").read_text()
    lifted = f"max_queued = {bench['BOXMQ_QUEUED']}\nmax_queued_bytes = 0\n"
    assert all(lifted in bench["_boxmq_conf"](window) for window in (None, 20, 1000))
    assert bench["BOXMQ_QUEUED"] >= 5 * max(case.messages for case in bench["_cases"](False))


def test_bench_mqtt_messages_sets_every_cases_count_within_the_lifted_queue() -> None:
    # A small A/B run of one case needed a wrapper around _cases: --quick was the only count
    # there was. --messages N gives every case N, and no more than boxmq's queue is lifted for.
    bench = _bench_mqtt()
    cases = bench["_cases"]
    assert [c.messages for c in cases(False, 3_000)] == [3_000] * 4
    assert [c.messages for c in cases(True, 3_000)] == [3_000] * 4
    assert [c.name for c in cases(False, 3_000)] == [c.name for c in cases(False)]
    assert bench["BOXMQ_QUEUED"] >= 5 * bench["MOST_MESSAGES"]
    script = str(BENCH / "mqtt.py")
    for wrong in ("0", str(bench["MOST_MESSAGES"] + 1)):
        refused = subprocess.run(
            [sys.executable, script, "--messages", wrong], capture_output=True, text=True
        )
        assert refused.returncode == 2
        assert "--messages must be 1 to 200,000" in refused.stderr


# A run as small as each script makes one, so that one that takes the selector runs briefly.
_SMALL = {
    "mqtt.py": "--brokers boxmq --fsync never --messages 1 --repeat 1",
    "mqtt_groups.py": "--brokers boxmq --fsync never --groups 1 --messages 1",
    "mqtt_topics.py": "--brokers boxmq --fsync never --clients 1 --messages 1",
    "mqtt_idle.py": "--brokers boxmq --connections 4 --clients 1 --idle 0.1",
    "tls.py": "--brokers boxmq --connections 1 --messages 1",
    "store.py": "--quick --dir /dev/null",  # a run fails at once: not a folder
}


@pytest.mark.parametrize(
    ("script", "selector", "refusal"),
    [
        ("mqtt.py", "--cases qos1,qso2", "--cases: no 'qso2' (qos0, qos1, qos2, shared-qos1)"),
        ("mqtt.py", "--brokers mosquito", "--brokers: no 'mosquito' (boxmq, mosquitto, amqtt)"),
        ("mqtt_groups.py", "--filters overlapping", "no 'overlapping' (distinct, overlap)"),
        ("mqtt_groups.py", "--sessions persitent", "no 'persitent' (clean, persistent)"),
        ("mqtt_groups.py", "--brokers mosquito", "--brokers: no 'mosquito' (boxmq, mosquitto)"),
        ("mqtt_topics.py", "--sessions clear", "--sessions: no 'clear' (clean, persistent)"),
        ("mqtt_topics.py", "--brokers mosquito", "--brokers: no 'mosquito' (boxmq, mosquitto)"),
        ("mqtt_idle.py", "--brokers mosquito", "--brokers: no 'mosquito' (boxmq, mosquitto)"),
        ("tls.py", "--brokers mosquito", "--brokers: no 'mosquito' (boxmq, mosquitto)"),
        ("store.py", "--case processed/ --case 1p_nevr", "no row's label holds '1p_nevr'"),
        ("mqtt.py", "--cases qos1,qos2,qos1", "--cases: 'qos1' twice"),
        ("mqtt_idle.py", "--brokers boxmq,mosquitto,mosquitto", "--brokers: 'mosquitto' twice"),
        ("mqtt_groups.py", "--groups 1,ten", "--groups: '1,ten' is not whole numbers above 0"),
        ("mqtt_groups.py", "--groups 0", "--groups: '0' is not whole numbers above 0"),
        ("mqtt_topics.py", "--clients 1k", "--clients: '1k' is not whole numbers above 0"),
    ],
)
def test_a_bench_refuses_a_selector_naming_nothing_it_runs(
    script: str, selector: str, refusal: str
) -> None:
    # bench/mqtt.py --cases qos1,qso2 ran qos1 alone, and store.py --case with a typo beside
    # another the other's rows alone, as if asked; mqtt_groups and mqtt_topics took any
    # --sessions but "clean" for persistent and any --filters but "distinct" for overlap, and
    # they and mqtt_idle any broker but mosquitto for boxmq (mqtt.py and tls.py failed with a
    # KeyError after their start). Each is a usage error now, naming what there is. So is a
    # name given twice (mqtt_idle measured mosquitto twice, or once when it was not installed:
    # it took one of the two out), and a count of --groups or --clients that is not one
    # (a ValueError's traceback, for --groups 0 once its broker had started).
    refused = subprocess.run(
        [sys.executable, str(BENCH / script), *_SMALL[script].split(), *selector.split()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2, (refused.stdout[-2000:], refused.stderr[-2000:])
    assert refusal in refused.stderr


def test_bench_start_broker_refuses_a_broker_it_does_not_know(tmp_path: Path) -> None:
    # Any name but "mosquitto" started boxmq, logging under the name given, so that a caller
    # passing one of its own (amqtt, a typo) measured boxmq under that name.
    processes = runpy.run_path(str(BENCH / "processes.py"), run_name="bench_processes")
    with pytest.raises(ValueError, match=r"no broker 'amqtt' \(boxmq, mosquitto\)"):
        processes["start_broker"]("amqtt", 1883, tmp_path, "never", mosquitto="", boxmq="")
    assert not list(tmp_path.iterdir())  # nothing written, nothing started


def test_no_bench_script_imports_the_tests() -> None:
    # chaos_mixed.py and xmpp.py imported tests.xmpp's Prosody and clients, so that bench/ ran
    # only beside tests/ and a change made for a test changed a benchmark; what both run is
    # harness/'s.
    for path in BENCH.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.split(".")[0] == "tests"], (path.name, names)


def test_every_bench_refuses_an_fsync_the_store_has_no_policy_for() -> None:
    # mqtt_topics.py, mqtt_groups.py and chaos.py took any --fsync word and handed it on to
    # boxmq, which refused it only once a broker or the chaos run (or a role of it) had
    # started; argparse refuses it before --help, which a bench taking it goes on to answer.
    for argv in (
        ["mqtt.py"],
        ["mqtt_topics.py"],
        ["mqtt_groups.py"],
        ["xmpp.py"],
        ["chaos.py", "run"],
        ["chaos.py", "role", "producer"],
        ["chaos_mixed.py", "role", "cli"],
    ):
        script, *command = argv
        done = subprocess.run(
            [sys.executable, str(BENCH / script), *command, "--fsync", "sometimes", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ.copy(),
        )
        assert done.returncode == 2, (script, done.stdout[-2000:])
        assert "invalid choice: 'sometimes'" in done.stderr, (script, done.stderr)


_DEAD_LETTER_RUN = """
import sys, types
sys.path.insert(0, sys.argv[1])
import boxmq, chaos, chaos_mixed, random
root, logs = sys.argv[2] + "/root", sys.argv[2] + "/logs"
import os
os.makedirs(logs)
open(logs + "/serve.err", "w").close()
# What serve's sweep does to a message a fifth holder left locked (the CLI's or bob's lock
# run out): serve and the CLI open the root with max_deliveries 5, the roles with None.
with boxmq.open(root, max_deliveries=5) as box:
    queue = box.queue(chaos_mixed.QUEUE, create=True)
    mid = queue.put(chaos.body_for("p0.1.1", random.Random(1)))
    with open(logs + "/p0.log", "w") as p0, open(logs + "/cli.log", "w") as cli:
        p0.write(f"P {mid} p0.1.1 1 4\\n")
        for n in range(1, 6):
            queue.get("cli1")
            cli.write(f"R {mid} p0.1.1 {n * 10} {n}\\nL {mid} {n * 10 + 1}\\n")
            queue.unlock(mid, "cli1")
run = types.SimpleNamespace(root=root, logs=logs, seed=1, fsync="always")
sys.exit(chaos_mixed.check(run, []))
"""


def test_chaos_mixed_takes_a_dead_letter_of_max_deliveries_for_no_violation(
    tmp_path: Path,
) -> None:
    # chaos.py run --mixed (seed 53, 12 kills) said a stored put was never acked and was
    # left locked, never delivered again: serve's sweep had sent it to error/ at its fifth
    # delivery (max_deliveries, 5 for serve and the CLI, as docs/mqtt.md says), which the
    # check did not know of; it counts such dead letters now, and only those.
    done = subprocess.run(
        [sys.executable, "-c", _DEAD_LETTER_RUN, str(BENCH), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 dead letters of max_deliveries (5)" in done.stdout, done.stdout


_TIMED_OUT_RUN = """
import sys, types
sys.path.insert(0, sys.argv[1])
import os, chaos, chaos_mixed
root, logs = sys.argv[2] + "/root", sys.argv[2] + "/logs"
os.makedirs(logs)
os.makedirs(root)
open(logs + "/serve.err", "w").close()
# What the XMPP role logs of a publish serve never answered (killed while it was asked):
# harness.prosody's Client.request raises AssertionError once its timeout passes.
log = chaos.Log(logs + "/xmpp.log")
no_reply = AssertionError("alice@localhost got no reply from queue.localhost within 4 s")
reply = chaos_mixed.unanswered(log, no_reply)
log.write("E", "publish", "xmpp.1.1", chaos_mixed.condition(reply), chaos.now())
run = types.SimpleNamespace(root=root, logs=logs, seed=1, fsync="always")
sys.exit(chaos_mixed.check(run, []))
"""


def test_chaos_mixed_counts_a_request_serve_never_answered_as_a_timeout(tmp_path: Path) -> None:
    # chaos.py run --mixed counted the XMPP requests that a killed serve never answered as
    # "xmpp iq AssertionError" and "xmpp publish error", which read as crashes of the role or
    # of serve; they are timeouts while serve was down, and are counted as such.
    done = subprocess.run(
        [sys.executable, "-c", _TIMED_OUT_RUN, str(BENCH), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (counted,) = [line for line in done.stdout.splitlines() if line.startswith("refused")]
    assert "AssertionError" not in counted, counted
    assert "publish error" not in counted, counted
    timed_out = "no reply within 4 s (serve down)"
    assert f"'xmpp iq (any request): {timed_out}': 1" in counted, counted
    assert f"'xmpp publish: {timed_out}': 1" in counted, counted


def _chaos_snippet(code: str) -> str:
    """What `code` prints, run in a Python of its own with bench/ first on its path (chaos.py
    imported there, as its roles do); it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(BENCH)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_STORED_TWICE_RUN = """
import sys
sys.path.insert(0, sys.argv[1])
import chaos
put = {"id1": "p0.1.0", "id2": "p0.1.1", "id3": "p1.2.0"}  # what the producers logged
cases = {
    "held": ({"id1": "p0.1.0", "id9": "p0.1.2"}, ["id9"]),  # id9: p0.1's put a kill cut off
    "twice": ({"id1": "p0.1.0", "id8": "p0.1.0"}, []),  # one put, two messages
    "unlogged": ({"id7": "p0.1.1"}, ["id7"]),  # acked under an id p0.1 never returned
    "untagged": ({}, ["id6"]),  # acked and never delivered
}
for name, (tags, unknown) in cases.items():
    print(name, chaos.stored_twice_or_unlogged(put, tags, unknown))
"""


def test_chaos_finds_a_put_stored_twice_and_an_ack_no_put_returned(tmp_path: Path) -> None:
    # chaos.py run's queue check keyed every count by message id: a put stored twice (two
    # messages of one body's tag, p0.1.0) was two deliveries of ids no put log names, each
    # counted as "acked not in a put log (puts whose log line a kill cut off)", and so was
    # an ack of an id no put returned: 0 violations. The fifth round checks both by tag.
    said = dict(line.split(" ", 1) for line in _chaos_snippet(_STORED_TWICE_RUN).splitlines())
    assert said["held"] == "[]", said
    assert (
        "1 puts delivered under two ids (stored twice): [('p0.1.0', ['id1', 'id8'])]"
        in (said["twice"])
    ), said
    assert "1 acked ids no put returned" in said["unlogged"], said
    assert "('id7', 'p0.1.1')" in said["unlogged"], said
    assert "('id6', None)" in said["untagged"], said


_EXITED_RUN = """
import signal, subprocess, sys, types
sys.path.insert(0, sys.argv[1])
import chaos
def role(name, code):
    quiet = subprocess.DEVNULL  # not this script's pipes: its run ends with its own
    p = subprocess.Popen([sys.executable, "-c", code], stdout=quiet, stderr=quiet)
    return types.SimpleNamespace(name=name, inc=2, p=p)
crashed = role("c1", "raise SystemExit(3)")
killed = role("p0", "import time; time.sleep(60)")
running = role("sub0", "import time; time.sleep(60)")
crashed.p.wait()
killed.p.send_signal(signal.SIGKILL)
killed.p.wait()
print(sorted(chaos.exited_by_themselves([crashed, killed, running])))
running.p.kill()
"""


def test_chaos_counts_a_role_that_exited_by_itself(tmp_path: Path) -> None:
    # chaos.py run printed "exited by itself: ['serve', 'c1']" at each kill and went on, c1
    # not started again until it was picked to be killed, and ended with violations=0 (the
    # fifth round's c18, whose roles found their snapshot of src/ replaced under them). A
    # role that ends by itself is now told once per start and is a violation; one this
    # script SIGKILLed, or still running, is not.
    said = _chaos_snippet(_EXITED_RUN)
    assert said.strip() == "['c1.2 (exit 3)']", said
