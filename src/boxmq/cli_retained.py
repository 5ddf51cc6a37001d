"""`boxmq retained [FILTER]`: the retained messages a subscription to FILTER would get, listed
without subscribing (nothing is made, sent or changed): an operator's look at what a new
subscriber, a dashboard's first connect, would be handed."""

from __future__ import annotations

import argparse
import math
from typing import Any

from boxmq import cli_output as output
from boxmq.client import Box
from boxmq.client.message import qos_of
from boxmq.core.topics import parse_filter
from boxmq.errors import InvalidArgument
from boxmq.model import QOS, Envelope
from boxmq.store.v5_properties import correlation_id_shown, properties_shown, reply_to_shown

__all__ = ["retained"]


def retained(args: argparse.Namespace, box: Box) -> int:
    if parse_filter(args.filter).shared:  # its InvalidTopic says what is wrong with a filter
        # MQTT-234 B: a share group is sent no retained message; an empty list would read
        # as a topic that has none.
        raise InvalidArgument(
            f"{args.filter!r} is a share group's filter, which gets no retained messages: "
            "give the filter alone"
        )
    now = box.now()
    rows = []
    # Each file's header and size, never its body (a 4 MB one was read whole for its size).
    for envelope, size in box.topics.retained_sizes(args.filter):
        if envelope.expired(now):
            continue  # never sent any more (MQTT 5.0 §3.3.2.3.3); the next sweep deletes it
        rows.append(_row(box, envelope, size, now=now, as_json=args.json))
    rows.sort(key=lambda row: row["topic"] or "")  # the files' order is their hashes'
    if args.json:
        output.out(output.to_json(rows))
    elif not rows:
        matched = output.cell(args.filter)
        output.out(output.said(f"no retained messages match {matched} under {box.root}"))
    else:
        output.table(rows)
    return 0


def _row(box: Box, envelope: Envelope, size: int, *, now: float, as_json: bool) -> dict[str, Any]:
    """One retained message: what its subscriber would get, as `peek` shows a message."""
    row: dict[str, Any] = {
        "topic": envelope.topic,  # bytes that are not UTF-8 shown as \\xNN, as by `peek`
        "bytes": size,
        "qos": qos_of(envelope.property_value(QOS)),
    }
    # What a subscriber's Message Expiry Interval would say now (MQTT 5.0 §3.3.2.3.3: what is
    # left of it), whole seconds rounded up as the broker sends it; never: none.
    left = None
    if envelope.expiration:
        left = max(1, math.ceil(envelope.expiration / 1000 - now))
    if as_json:
        row["expires-in"] = left
        if envelope.expiration:
            row["expires"] = output.expires(envelope.expiration)
    else:
        row["expires-in"] = "never" if left is None else f"{left}s"
    properties = properties_shown(box.v5, envelope)  # an MQTT v5 message's decoded too
    row["properties"] = properties if as_json else output.listed(properties)
    if (correlation_id := correlation_id_shown(box.v5, envelope)) is not None:
        row["correlation-id"] = correlation_id
    if (reply_to := reply_to_shown(box.v5, envelope)) is not None:
        row["reply-to"] = reply_to
    return row
