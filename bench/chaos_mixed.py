"""`chaos.py run --mixed`: every door on one root, `boxmq serve` and the embedded consumer
SIGKILLed at random (run through chaos.py; this script is its roles: `chaos_mixed.py role ...`).

    python bench/chaos.py run --mixed --seed N [--kills 10] [--kill-min 2 --kill-max 5] [--fsync F]

One root, one queue (`chaos`) and one topic tree (`chaos/t0-3`), as docs/concepts.md and
docs/xmpp.md say the doors share them:
- `boxmq serve` with MQTT and the XMPP component `queue.localhost` of a Prosody of our own
  (harness/prosody.py, on free ports), its XMPP lock timeout 3 s;
- chaos.py's embedded producer (`p0`: put, put_many) and consumer (`c0`: lock 2 s);
- the CLI (`cli`): `boxmq put` and `boxmq publish chaos/t3`, `boxmq get` of the queue or of the
  share group `$share/g/#` with a 3 s lock, then `boxmq ack`, or (one in ten) not;
- XMPP (`xmpp`, one process, never killed): alice publishes to the queue node `chaos`, to the
  topic node `chaos/t2`, and sends assured messages (urn:xmpp:qos `assured`, then `deliver`)
  to `chaos@queue.localhost`; bob subscribes to the queue node (3 at a time, again every 2 s,
  since a restarted component forgets him) and retracts (acks) what he gets, or (one in ten)
  holds it until its lock runs out; carol subscribes to the topic node `chaos/t1` and
  retracts;
- chaos.py's MQTT QoS 1 publisher (`pub`, chaos/t0-3) and persistent `$share/g/#` member
  (`sub0`), never killed here.
A kill every --kill-min to --kill-max s: `boxmq serve` one time in two, else the embedded
consumer (seven in ten) or producer, restarted at once. Then a drain (serve stays up; the
embedded consumer, the CLI, XMPP and sub0 take what is left) and the checks: every stored put
(put returned, CLI id printed, XMPP publish result) acked or in processed/, or in error/ at its
fifth delivery (max_deliveries: serve's and the CLI's, counted apart); every assured
message whose `deliver` was answered delivered and acked; no message stored twice (under two
ids: an assured one is sent again under its msgId after a kill); every PUBACKed MQTT publish,
every `boxmq publish` that printed its id and every XMPP topic publish answered `result`
delivered to the group `$share/g/#` (sub0 or the CLI); nothing delivered after its ack, no
ack by another than its last holder, no topic node item sent again after its retract; what
the CLI or bob left locked delivered again (the spread printed: its lock, 3 s, unless serve
was killed in between); nothing in any processing/ after the drain, every file's body whole,
and no Traceback, ERROR or CRITICAL in serve's log; a wait that runs out (a CLI command past
30 s, a drain past 70 s, serve's stop on SIGTERM past 15 s) and a role that exits by itself
are violations too. Needs prosody and the xmpp extra. About a minute a run (40 s of chaos
for 10 kills, then the drain).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import functools
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for harness.*

from harness.stopping import stop

import chaos
from chaos import Log, body_for, now, read_log

PY = sys.executable
HERE = os.path.abspath(__file__)
QUEUE = chaos.QUEUE  # chaos.role_producer's and role_consumer's queue: the XMPP node of that name
GROUP = "$share/g/#"  # chaos.role_subscriber's group; role_publisher publishes to chaos/t0-3
# harness/prosody.cfg.lua's component, as harness.prosody.SERVICE (not imported here: it
# loads slixmpp, which only the XMPP role and the run's start need)
SERVICE = "queue.localhost"
LOCK = 3.0  # the CLI's `get --lock` and the XMPP component's lock timeout
IQ_TIMEOUT = 4.0  # an iq the killed serve had read is never answered: ask again after this
NO_REPLY = "no-reply"  # how a request with no reply within IQ_TIMEOUT is counted
# serve's sweeps and the CLI's commands open the root with the default limit (the roles' own
# max_deliveries=None covers only their own unlocks): a message whose fifth holder leaves it
# locked (the CLI's or bob's lock run out, c0 killed) goes to error/, as docs/mqtt.md says.
MAX_DELIVERIES = 5
_TAGGED = re.compile(rb"([\w.]+)\|([0-9a-f]*)\|([0-9a-f]{16})")
_STANZAS = "{urn:ietf:params:xml:ns:xmpp-stanzas}"


def unanswered(log: Log, error: Exception) -> ET.Element:
    """Logs a request of the XMPP role that raised, and what the role takes for its reply.
    harness.prosody's Client.request raises AssertionError when no reply came within
    IQ_TIMEOUT: here, a serve killed before it answered (Prosody, which stays up, bounces
    what is sent once it knows the component is away), so it is counted as NO_REPLY, not by
    the exception's name ("xmpp iq AssertionError" and "xmpp publish error" read as crashes);
    anything else by its type."""
    failure = NO_REPLY if isinstance(error, AssertionError) else type(error).__name__
    log.write("E", "iq", failure, now())
    return ET.Element("iq", type=failure)


def condition(reply: ET.Element) -> str:
    """The stanza error's condition of an iq's reply, else its type (NO_REPLY: unanswered)."""
    found = reply.find(f".//{_STANZAS}*")
    return found.tag.rpartition("}")[2] if found is not None else reply.get("type", "?")


def tag_of(body: bytes | bytearray) -> str | None:
    """The tag of the first well-formed `tag|hex|digest` (chaos.body_for) in `body`, whatever
    a door wrapped it in: an XMPP publish's element, urn:xmpp:qos's <message/>, the
    component's <text/> around a body put by another door."""
    for m in _TAGGED.finditer(bytes(body)):
        head = m.group(1) + b"|" + m.group(2)
        if hashlib.sha256(head).hexdigest()[:16].encode() == m.group(3):
            return m.group(1).decode()
    return None


# chaos.py's consumer and checks read a body as body_for wrote it; an XMPP publish's is XML
# around it.
chaos.check_body = tag_of


def _cli(
    a: argparse.Namespace, log: Log, *args: str, body: bytes | None = None
) -> subprocess.CompletedProcess[bytes] | None:
    """The command's result; None, and an `H` line in `log` (a violation), if it did not end
    within 30 s: it reads and writes the root itself, no kill of serve holds it."""
    command = [PY, "-m", "boxmq", "--data", a.root, "--fsync", a.fsync, *args]
    try:
        return subprocess.run(command, input=body, capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:  # run() has killed it
        log.write("H", args[0], now())
        return None


def _tail(r: subprocess.CompletedProcess[bytes]) -> str:
    return r.stderr.decode(errors="replace")[-200:].replace("\n", "/").replace(" ", "_")


def role_cli(a: argparse.Namespace) -> None:
    """put, publish, or get (the queue, or one time in three the group) then ack, or not."""
    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    seq = 0
    idle_since = time.time()
    for _ in range(100_000):
        if time.time() > a.until:
            break
        draw = rng.random()
        if not a.drain and draw < 0.5:
            tag = f"{a.name}.{a.inc}.{seq}"
            seq += 1
            topic = draw < 0.15
            args = ("publish", "chaos/t3") if topic else ("put", QUEUE)
            r = _cli(a, log, *args, "-", body=body_for(tag, rng))
            if r is None:
                continue
            if r.returncode:
                log.write("E", args[0], r.returncode, now(), _tail(r))
            elif topic:
                log.write("T", tag, now())
            else:
                log.write("P", r.stdout.decode().strip(), tag, now(), 0)
            continue
        where = GROUP if rng.random() < 1 / 3 else QUEUE
        # The drain's CLI (clid) is another consumer than the chaos's (cli): as the role's
        # tags, its consumer names its incarnation, so that neither takes the other's locks.
        consumer = f"{a.name}{a.inc}"
        r = _cli(a, log, "--json", "get", where, "--lock", f"{LOCK:g}s", "--consumer", consumer)
        if r is None:
            continue
        if r.returncode == 3:  # nothing ready
            if a.drain and time.time() - idle_since > 4:
                break
            time.sleep(0.1)
            continue
        if r.returncode:
            log.write("E", "get", r.returncode, now(), _tail(r))
            continue
        idle_since = time.time()
        got = json.loads(r.stdout)
        mid = got["id"]
        queued = where == QUEUE
        tag = tag_of(got["body"].encode()) or "BAD"
        log.write("R" if queued else "G", mid, tag, now(), got["delivery"])
        if not a.drain and rng.random() < 0.1:
            log.write("L", mid, now())  # left locked: comes again after LOCK
            continue
        r = _cli(a, log, "ack", where, mid, "--consumer", consumer)
        if r is None:
            continue
        if r.returncode:
            log.write("E", "ack", r.returncode, now(), _tail(r))
        else:
            log.write("A" if queued else "Z", mid, now())


def role_xmpp(a: argparse.Namespace) -> None:
    asyncio.run(_xmpp(a))


async def _xmpp(a: argparse.Namespace) -> None:
    from harness.prosody import Client, Prosody

    from boxmq.xmpp import ns

    log = Log(a.log)
    rng = random.Random(f"{a.name}.{a.inc}")
    server = Prosody(a.c2s, 0, Path(a.root))
    alice, bob, carol = (Client(server, user, f"r{a.inc}") for user in ("alice", "bob", "carol"))
    for user in (alice, bob, carol):
        user.timeout = IQ_TIMEOUT
    await asyncio.gather(alice.start(), bob.start(), carol.start())
    settling: set[asyncio.Future[None]] = set()
    last_item = [time.time()]

    async def ask(user: Client, xml: str, to: str = SERVICE) -> ET.Element:
        try:
            return await user.request(xml, to=to)
        except Exception as e:  # AssertionError: no reply within IQ_TIMEOUT
            return unanswered(log, e)

    async def subscribe(user: Client, node: str, requests: int) -> None:
        options = (
            f"<options><x xmlns='jabber:x:data' type='submit'><field var='FORM_TYPE' "
            f"type='hidden'><value>{ns.SUBSCRIBE_OPTIONS}</value></field><field "
            f"var='pubsub#queue_requests'><value>{requests}</value></field></x></options>"
        )
        while time.time() < a.until:
            reply = await ask(
                user,
                f"<pubsub xmlns='{ns.PUBSUB}'><subscribe node='{node}' "
                f"jid='{user.boundjid.bare}'/>{options}</pubsub>",
            )
            await asyncio.sleep(2.0 if reply.get("type") == "result" else 0.5)

    async def settle(user: Client, node: str, item: str, ok: str) -> None:
        if not a.drain and node == QUEUE and rng.random() < 0.1:
            log.write("L", item, now())  # held: its lock runs out after LOCK
            return
        await asyncio.sleep(rng.uniform(0, 0.3))
        reply = await ask(
            user,
            f"<pubsub xmlns='{ns.PUBSUB}'><retract node='{node}'><item id='{item}'/>"
            f"</retract></pubsub>",
        )
        if reply.get("type") == "result":
            log.write(ok, item, now())
        else:
            log.write("E", "retract", item, condition(reply), now())

    async def take(user: Client, node: str, got: str, ok: str) -> None:
        while time.time() < a.until:
            try:
                event = await asyncio.wait_for(user.events.get(), 0.5)
            except TimeoutError:
                continue
            if event.what != "item":
                continue  # retract, unlock, subscription='none' after a restart
            last_item[0] = time.time()
            payload = ET.tostring(event.payload) if event.payload is not None else b""
            log.write(got, event.item, tag_of(payload) or "BAD", now(), 0)
            task = asyncio.ensure_future(settle(user, node, event.item, ok))
            settling.add(task)
            task.add_done_callback(settling.discard)

    async def produce() -> None:
        for seq in range(1_000_000):
            if a.drain or time.time() > a.until:
                return
            tag = f"{a.name}.{a.inc}.{seq}"
            body = body_for(tag, rng).decode()
            draw = rng.random()
            if draw < 0.6:  # a publish: to the topic node one time in three
                node = "chaos/t2" if draw < 0.2 else QUEUE
                reply = await ask(
                    alice,
                    f"<pubsub xmlns='{ns.PUBSUB}'><publish node='{node}'><item>"
                    f"<m xmlns='urn:example:mixed'>{body}</m></item></publish></pubsub>",
                )
                item = reply.find(f".//{{{ns.PUBSUB}}}item")
                if reply.get("type") != "result":
                    log.write("E", "publish", tag, condition(reply), now())
                elif node != QUEUE:
                    log.write("T", tag, now())
                else:
                    log.write("P", item.get("id") if item is not None else "?", tag, now(), 0)
            else:  # assured until `received`, then deliver until its result
                msg_id, to = f"{a.inc}-{seq}", f"{QUEUE}@{SERVICE}"
                message = f"<message xmlns='jabber:client'><body>{body}</body></message>"
                assured = f"<assured xmlns='{ns.QOS}' msgId='{msg_id}'>{message}</assured>"
                for _ in range(30):
                    if (await ask(alice, assured, to)).get("type") == "result":
                        break
                    await asyncio.sleep(0.3)
                else:
                    continue
                for _ in range(30):
                    reply = await ask(alice, f"<deliver xmlns='{ns.QOS}' msgId='{msg_id}'/>", to)
                    if reply.get("type") == "result":
                        log.write("Q", tag, now())
                        break
                    if condition(reply) == "item-not-found":  # lost, and told so
                        log.write("E", "deliver", tag, "item-not-found", now())
                        break
                    await asyncio.sleep(0.3)
            await asyncio.sleep(rng.uniform(0.02, 0.1))

    tasks = [
        asyncio.ensure_future(c)
        for c in (
            subscribe(bob, QUEUE, 3),
            subscribe(carol, "chaos/t1", 5),
            take(bob, QUEUE, "R", "A"),
            take(carol, "chaos/t1", "M", "Y"),
            produce(),
        )
    ]
    for _ in range(100_000):
        if time.time() > a.until or (a.drain and time.time() - last_item[0] > 6):
            break
        await asyncio.sleep(0.2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, *settling, return_exceptions=True)
    for user in (alice, bob, carol):
        user.disconnect(wait=0.5)
    await asyncio.sleep(0.3)


ROLES = {**chaos.ROLES, "cli": role_cli, "xmpp": role_xmpp}


class Proc(chaos.Proc):
    """A role run by this script, or `boxmq serve` with MQTT and the XMPP component."""

    script = HERE

    def start(self, until: float, drain: bool = False, idle_after: float = 0.0) -> None:
        with open(self.err, "ab") as err:  # each start's output after a line saying so
            err.write(f"--- start {self.inc + 1} at {now()}\n".encode())
        super().start(until, drain, idle_after)

    def command(self, until: float, drain: bool, idle_after: float) -> list[str]:
        r = self.run
        assert isinstance(r, Run)
        command = self.common_command(until, drain)
        if self.role == "serve":
            command += ["--xmpp-component", SERVICE]
            command += ["--xmpp-server", f"127.0.0.1:{r.component_port}"]
            return [*command, "--xmpp-lock-timeout", f"{LOCK:g}s"]
        return [*command, "--c2s", str(r.c2s_port)]


class Run(chaos.Run):
    c2s_port = component_port = 0


def run(a: argparse.Namespace) -> int:
    """The mixed run (chaos.py run --mixed): a Prosody of our own for its length."""
    from harness.prosody import SECRET, prosody_or_reason, run_prosody

    reason = prosody_or_reason()
    if reason is not None:
        print(f"--mixed needs Prosody: {reason}", file=sys.stderr)
        return 1
    r = Run(a)
    folder = Path(r.dir) / "prosody"
    with run_prosody(folder) as prosody:
        r.c2s_port, r.component_port = prosody.c2s_port, prosody.component_port
        # For serve's XMPP component: every process started from here on is given it.
        os.environ["BOXMQ_XMPP_SECRET"] = SECRET
        try:
            return _rounds(a, r)
        finally:
            shutil.copy(folder / "prosody.log", os.path.join(r.logs, "prosody.log"))


def _rounds(a: argparse.Namespace, r: Run) -> int:
    rng = random.Random(a.seed)
    serve = Proc("serve", "serve", r)
    producer, consumer = Proc("p0", "producer", r), Proc("c0", "consumer", r)
    others = [Proc(*p, r) for p in (("pub", "publisher"), ("cli", "cli"), ("xmpp", "xmpp"))]
    sub0 = Proc("sub0", "subscriber", r)
    procs = [serve, producer, consumer, sub0, *others]
    until = time.time() + a.kills * a.kill_max + 60  # the roles' own bound; all killed first
    kills: collections.Counter[str] = collections.Counter()
    kill_log = Log(os.path.join(r.logs, "kills.log"))
    stuck: list[str] = []  # what the run waited for in vain: violations, as check's
    print(f"mixed: seed {a.seed} fsync {r.fsync} kills {a.kills} dir {r.dir}", flush=True)
    started = time.time()
    try:
        serve.start(until)
        serve.listening()
        sub0.start(until)
        for _ in range(200):  # the group first: a publish before it has nobody to go to
            if any(f[0] == "S" for f in read_log(os.path.join(r.logs, "sub0.log"))):
                break
            time.sleep(0.05)
        for p in (producer, consumer, *others):
            p.start(until)
        for _ in range(a.kills):
            time.sleep(rng.uniform(a.kill_min, a.kill_max))
            victim = serve if rng.random() < 0.5 else consumer if rng.random() < 0.7 else producer
            victim.kill()
            kill_log.write("X", victim.name, now())
            kills[victim.name] += 1
            if died := sorted(chaos.exited_by_themselves(procs)):
                stuck.append(f"exited by itself, not killed: {died}")
            victim.start(until)
            if victim is serve:
                serve.listening()
        time.sleep(1.0)
    finally:
        for p in procs:
            if p is not serve:
                p.kill()
        kill_log.write("X", "all", now())
    print(f"chaos: {time.time() - started:.0f} s, kills {dict(kills)}", flush=True)
    # The drain, through the serve that runs: the XMPP locks of the killed roles run out first.
    time.sleep(LOCK + 0.5)
    drains = [Proc(*p, r) for p in (("c0d", "consumer"), ("clid", "cli"), ("xmppd", "xmpp"))]
    sub0.inc = 100
    try:
        for p in [*drains, sub0]:
            p.start(time.time() + 60, drain=True)
        for p in [*drains, sub0]:
            try:
                p.p.wait(70)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:  # its own bound is 60 s
                stuck.append(f"{p.name}: its drain did not end in 70 s")
        assert serve.p is not None
        if stop(serve.p, seconds=15):  # killed past them, and reaped
            stuck.append("serve did not stop on SIGTERM in 15 s")
    finally:
        for p in [*drains, sub0, serve]:
            p.kill()
    return check(r, stuck)


def refusal(name: str, f: list[str]) -> str:
    """What an `E` line of `name`'s log was refused, for the counts: a consumer's ack or
    unlock (E ID EXCEPTION), the CLI's command (E COMMAND CODE), XMPP's request (E iq
    EXCEPTION or NO_REPLY, every request's; E retract|publish|deliver ID CONDITION, of those
    the role logs, NO_REPLY among them too)."""
    if name.startswith("c0"):
        return f"{name} settle {f[2]}"
    if name.startswith("cli"):
        return f"{name} {f[1]} exit {f[2]}"
    what = f[2] if f[1] == "iq" else f[3]
    if what == NO_REPLY:
        what = f"no reply within {IQ_TIMEOUT:g} s (serve down)"
    return f"{name} {'iq (any request)' if f[1] == 'iq' else f[1]}: {what}"


def dead_letters(r: Run) -> set[str]:
    """The queue's messages in error/ for max_deliveries, each delivered MAX_DELIVERIES
    times (its name's count): the limit doing its work, not a loss. One there for another
    reason, or sooner, stays a stored put never acked."""
    from boxmq.model import DEAD_REASON, DELIVERY_COUNT
    from boxmq.store.names import decode, split_lock

    dead: set[str] = set()
    folder = os.path.join(r.root, QUEUE, "error")
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        envelope = decode(split_lock(name)[0])
        count = envelope.property_value(DELIVERY_COUNT)
        if envelope.property_value(DEAD_REASON) == "max-deliveries" and count == MAX_DELIVERIES:
            dead.add(envelope.message_id)
    return dead


def check(r: Run, stuck: list[str]) -> int:
    """The run's verdict from its logs and root; `stuck`, what it already found (a wait that
    ran out), counted among the violations."""
    problems = list(stuck)

    @functools.cache  # cli's and xmpp's logs are read by four of the checks below
    def log_of(name: str) -> list[list[str]]:
        return read_log(os.path.join(r.logs, f"{name}.log"))

    stored: dict[str, str] = {}  # id: tag
    assured: set[str] = set()
    for name in ("p0", "cli", "xmpp"):
        for f in log_of(name):
            if f[0] == "P":
                stored[f[1]] = f[2]
            elif f[0] == "Q":
                assured.add(f[1])
    events: list[tuple[int, str, str, str]] = []  # time, R/A/L, id, who
    tags: dict[str, str] = {}
    errors: collections.Counter[str] = collections.Counter()
    for name in ("c0", "cli", "xmpp", "c0d", "clid", "xmppd"):
        for f in log_of(name):
            if f[0] == "R":
                events.append((int(f[3]), "R", f[1], name))
                tags[f[1]] = f[2]
                if f[2] == "BAD":
                    problems.append(f"{f[1]} delivered to {name} with a damaged body")
            elif f[0] in "AL":
                events.append((int(f[2]), f[0], f[1], name))
            elif f[0] == "E":
                errors[refusal(name, f)] += 1
            elif f[0] == "H":
                problems.append(f"{name}'s `boxmq {f[1]}` did not end within 30 s")
    events.sort()
    acked: dict[str, str] = {}
    holder: dict[str, str] = {}
    # Each message's deliveries, in time order (events is sorted).
    delivered_at: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
    for t, kind, mid, who in events:
        if kind == "R":
            delivered_at[mid].append(t)
            holder[mid] = who
            if mid in acked:
                problems.append(f"{mid} delivered to {who} after its ack by {acked[mid]}")
        elif kind == "A":
            # Each role's own: a drain (c0d, clid, xmppd) acks only what it was given, its
            # consumer not the chaos's, so what the chaos's one held comes to it again first.
            if holder.get(mid, who) != who:
                problems.append(f"{mid} acked by {who}, last delivered to {holder[mid]}")
            acked.setdefault(mid, who)
    processed = chaos.ids_in(r, "processed")  # acks a kill cut short after their rename
    dead = dead_letters(r)
    lost = [m for m in stored if m not in acked and m not in processed and m not in dead]
    if lost:
        problems.append(f"{len(lost)} stored puts never acked: {lost[:5]}")
    # No door stores a message twice: the roles never send one again but an assured message,
    # sent again under its msgId after a kill (the exactly-once intake stores it once).
    if twice := [tag for tag, _ in chaos.stored_twice(tags)]:
        problems.append(f"{len(twice)} messages stored under more than one id: {twice[:5]}")
    acked_tags = {tags[m] for m in acked if m in tags}
    lost_assured = sorted(assured - acked_tags)
    if lost_assured:
        problems.append(
            f"{len(lost_assured)} assured and delivered, never acked: {lost_assured[:5]}"
        )
    # Left locked: delivered again (after LOCK, or sooner when serve was killed meanwhile).
    # The next delivery after a time is a bisect of the message's, where a scan of every
    # event for each one left locked grew as their product.
    again: list[float] = []
    for t, kind, mid, _who in events:
        if kind == "L":
            times = delivered_at.get(mid, [])
            later = bisect.bisect_right(times, t)
            if later == len(times):
                if mid not in dead:  # else that holder's was its last delivery: to error/
                    problems.append(f"{mid}, left locked, never delivered again")
            else:
                again.append((times[later] - t) / 1e9)
    # The topic: the group $share/g/# has every publish that was acknowledged.
    published = {f[1] for f in log_of("pub") if f[0] == "K"}
    published |= {f[1] for name in ("cli", "xmpp") for f in log_of(name) if f[0] == "T"}
    got: collections.Counter[str] = collections.Counter()
    for name in ("sub0", "cli", "clid"):
        for f in log_of(name):
            if f[0] in "MG":
                got[f[1] if name == "sub0" else f[2]] += 1
    if got["BAD"]:
        problems.append(f"{got['BAD']} group deliveries with a damaged payload")
    missing = sorted(published - set(got))
    if missing:
        problems.append(f"{len(missing)} acknowledged publishes not delivered: {missing[:5]}")
    # carol's topic node: an item she retracted is never sent again.
    node_events = sorted(
        (int(f[-1]) if f[0] == "Y" else int(f[3]), f[0], f[1])
        for name in ("xmpp", "xmppd")
        for f in log_of(name)
        if f[0] in "MY"
    )
    retracted: set[str] = set()
    for _t, kind, item in node_events:
        if kind == "Y":
            retracted.add(item)
        elif item in retracted:
            problems.append(f"topic node item {item} sent again after its retract")
    found, counts = chaos.scan(r)
    problems += found
    for folder, _dirs, files in os.walk(r.root):
        if os.path.basename(folder) == "processing" and files:
            problems.append(f"{len(files)} files left in {os.path.relpath(folder, r.root)}")
    log = Path(r.logs, "serve.err").read_text(errors="replace")
    for word in ("Traceback", " ERROR ", " CRITICAL "):
        if word in log:
            problems.append(f"{log.count(word)} x {word.strip()} in serve's log")
    doors = collections.Counter(tag.split(".")[0] for tag in stored.values())
    print(
        f"queue: {len(stored)} stored {dict(doors)} + {len(assured)} assured, {len(acked)} acked, "
        f"{sum(map(len, delivered_at.values()))} deliveries, "
        f"{sum(1 for times in delivered_at.values() if len(times) > 1)} delivered more than "
        f"once; {len(again)} left locked, again after "
        f"{min(again, default=0):.1f}-{max(again, default=0):.1f} s",
        flush=True,
    )
    print(
        f"topic: {len(published)} acknowledged publishes, {len(got)} distinct to the group; "
        f"carol: {sum(1 for e in node_events if e[1] == 'M')} items, {len(retracted)} retracted",
        flush=True,
    )
    print("refused, or unanswered while serve was down (no violation):", dict(errors), flush=True)
    print(
        f"{len(dead)} dead letters of max_deliveries ({MAX_DELIVERIES}), no violation", flush=True
    )
    print("files after the drain:", counts, flush=True)
    for problem in problems:
        print("VIOLATION:", problem)
    print(f"RESULT mixed seed={r.seed} fsync={r.fsync} violations={len(problems)}", flush=True)
    return 1 if problems else 0


def main() -> int:
    ap = argparse.ArgumentParser(description="the roles of chaos.py run --mixed")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = chaos.role_parser(sub, ROLES)
    r.add_argument("--c2s", type=int, default=0)
    a = ap.parse_args()
    # What chaos.py's roles read that the mixed run does not vary.
    a.queue, a.backlog, a.threads, a.idle_after = QUEUE, 0, False, 0.0
    ROLES[a.role](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
