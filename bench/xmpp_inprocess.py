"""bench/xmpp_inprocess: the XMPP door's CPU per queued item, with no server and no sockets.

    python bench/xmpp_inprocess.py [--items 4000] [--batch 10] [--dir /dev/shm]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python bench/xmpp_inprocess.py --items N

Drives a QueueService the way the component does (src/boxmq/xmpp/component.py), with
bench/xmpp.py's flow per item: carol publishes, alice and bob (queue_requests 50 each) get
one event each item goes to one of them, and the one that got it retracts it (publish +
result, event, retract + result, retract notification: 6 stanzas). Stanzas come in as text
through one ElementTree pull parser (as slixmpp reads its stream) and go to
`QueueService.iq` as parsed elements; stanzas go out as text, joined and encoded once per
round as the component writes them. A round is one batch of stanzas: the retracts of what
the last round delivered, then `--batch` publishes, then the component's `_poll` (the
batch's commit, one look per touched subscription). The root is a fresh folder under `--dir`
(tmpfs by default), fsync `never`, retracted items deleted (serve's default).

Prints wall-clock µs and CPU (user + system) µs per item. To compare commits, count
instructions, which the load of a shared machine does not move: run it under callgrind with
two item counts and divide the difference of the "Collected" totals by the difference of the
items (docs/benchmarks.md, XMPP); that also cancels the start-up cost.
"""

from __future__ import annotations

import argparse
import re
import resource
import tempfile
import time
from collections.abc import Iterator
from typing import cast
from xml.etree.ElementTree import Element, XMLPullParser

import boxmq
from boxmq.xmpp import ns
from boxmq.xmpp.service import QueueService

SERVICE = "queue.localhost"
ALICE = "alice@localhost/a"
BOB = "bob@localhost/b"
CAROL = "carol@localhost/c"
PS = ns.PUBSUB
# What a subscriber reads from an event: whom it went to and the item's id. A regular
# expression over the text, so that the subscribers' side costs next to nothing here.
_EVENT_ITEM = re.compile(
    r"<message id='[^']*' to='([^']*)'[^>]*><event [^>]*><items [^>]*><item id='([^']*)'"
)


class Stream:
    """The component's inbound stream: text in, parsed stanzas out (as slixmpp's reader)."""

    def __init__(self) -> None:
        self._parser: XMLPullParser[Element] = XMLPullParser(events=("start", "end"))
        self._parser.feed(f"<stream:stream xmlns='{ns.COMPONENT}' xmlns:stream='s'>")
        self._depth = 0
        list(self._read())

    def feed(self, data: bytes) -> list[Element]:
        self._parser.feed(data)
        return list(self._read())

    def _read(self) -> Iterator[Element]:
        # only start and end events were asked for: each carries an element
        events = cast("Iterator[tuple[str, Element]]", self._parser.read_events())
        for event, element in events:
            if event == "start":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 1:
                    yield element


def publish(n: int) -> str:
    return (
        f"<iq type='set' id='p{n}' from='{CAROL}' to='{SERVICE}'><pubsub xmlns='{PS}'>"
        f"<publish node='jobs'><item><job xmlns='urn:example'>{n:08d}</job></item></publish>"
        "</pubsub></iq>"
    )


def retract(n: int, jid: str, item: str) -> str:
    return (
        f"<iq type='set' id='r{n}' from='{jid}' to='{SERVICE}'><pubsub xmlns='{PS}'>"
        f"<retract node='jobs'><item id='{item}'/></retract></pubsub></iq>"
    )


def subscribe(jid: str, queue_requests: int) -> str:
    bare = jid.split("/")[0]
    return (
        f"<iq type='set' id='s-{bare}' from='{jid}' to='{SERVICE}'><pubsub xmlns='{PS}'>"
        f"<subscribe node='jobs' jid='{bare}'/><options><x xmlns='jabber:x:data' type='submit'>"
        f"<field var='FORM_TYPE' type='hidden'><value>{ns.SUBSCRIBE_OPTIONS}</value></field>"
        f"<field var='pubsub#queue_requests'><value>{queue_requests}</value></field>"
        "</x></options></pubsub></iq>"
    )


def run(root: str, items: int, batch: int, queue_requests: int) -> tuple[float, float]:
    """Seconds of wall clock and of CPU for `items` items through the flow above."""
    with boxmq.open(root, fsync="never", keep_processed=False) as box:
        box.queue("jobs")
        sent: list[str] = []
        service = QueueService(box, domain=SERVICE, send=sent.append)
        stream = Stream()
        written = 0  # bytes the component would have written

        def round_trip(text: str) -> list[tuple[str, str]]:
            """One batch of stanzas in; the events it caused out, as (to, item id)."""
            nonlocal written
            for stanza in stream.feed(text.encode()):
                service.iq(stanza)
            service.flush()
            service.poll_touched()
            data = "".join(sent)
            sent.clear()
            written += len(data.encode())
            return _EVENT_ITEM.findall(data)

        round_trip(subscribe(ALICE, queue_requests) + subscribe(BOB, queue_requests))
        cpu0, t0 = _cpu(), time.perf_counter()
        published = retracted = 0
        delivered: list[tuple[str, str]] = []
        while retracted < items:
            stanzas = [retract(retracted + i, jid, item) for i, (jid, item) in enumerate(delivered)]
            retracted += len(delivered)
            more = min(batch, items - published)
            stanzas += [publish(published + i) for i in range(more)]
            published += more
            if not stanzas:
                service.poll()  # the component's 50 ms round
            delivered = round_trip("".join(stanzas))
        seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
        assert box.queue("jobs").peek(limit=1) == [], "items left in the queue"
        assert written > 0
        service.close()
        return seconds, cpu


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=10, help="publishes per batch of stanzas")
    parser.add_argument("--queue-requests", type=int, default=50)
    parser.add_argument("--dir", default="/dev/shm", help="where the root goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-xmpp-inprocess-", dir=args.dir) as root:
        seconds, cpu = run(root, args.items, args.batch, args.queue_requests)
    print(
        f"{args.items} items, batches of {args.batch} publishes, queue_requests "
        f"{args.queue_requests}, root in {args.dir}: {seconds / args.items * 1e6:.1f} µs "
        f"and {cpu / args.items * 1e6:.1f} µs of CPU per item"
    )


if __name__ == "__main__":
    main()
