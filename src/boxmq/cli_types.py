"""The types of the command line's arguments: each turns what was typed into a value, or into
argparse's usage error (exit 2) saying what to fix, before any root is opened."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from contextlib import contextmanager

from boxmq.cli_args import (
    FOREVER,
    SHORTEST_INTERVAL,
    parse_duration,
    parse_integer,
    parse_property,
)
from boxmq.client import mqtt_fields
from boxmq.core.durations import in_unit_of
from boxmq.core.topics import utf8_size
from boxmq.errors import InvalidArgument
from boxmq.host_names import HOST_NAME_RULE, is_host_name
from boxmq.model import RESERVED_PREFIX, Property, check_reply_to, reserved_name
from boxmq.store.names import check_priority


@contextmanager
def _usage_error() -> Iterator[None]:
    """An InvalidArgument raised inside turned into argparse's usage error, in its words."""
    try:
        yield
    except InvalidArgument as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def duration(text: str) -> float:
    with _usage_error():
        return parse_duration(text)


def positive_duration(text: str) -> float:
    seconds = duration(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: it must be more than zero")
    return seconds


def duration_or_zero(text: str) -> float:
    seconds = duration(text)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: it must be 0 or more")
    return seconds


def loop_interval(text: str) -> float:
    """How often a loop of `serve` runs: positive, and no shorter than the config file allows."""
    return _not_too_short(text, positive_duration(text))


def loop_interval_or_zero(text: str) -> float:
    """As `loop_interval`, or 0 for a loop that never runs."""
    seconds = duration_or_zero(text)
    return _not_too_short(text, seconds) if seconds else seconds


def _not_too_short(text: str, seconds: float) -> float:
    if seconds < SHORTEST_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"bad duration {text!r}: at least {in_unit_of(SHORTEST_INTERVAL, 'ms')};"
            " a loop that often keeps a core busy"
        )
    return seconds


def retention(text: str) -> float:
    """A positive duration, or "forever" (math.inf: a time that never ends)."""
    if text == FOREVER:
        return math.inf
    try:
        return positive_duration(text)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{error} (or {FOREVER!r})") from None


def queue_name(text: str) -> str:
    """A QUEUE: an empty one (a script's `boxmq get "$QUEUE"`, the variable unset) said
    "destination name '' is empty or contains NUL", exit 1, in words no command uses."""
    if not text:
        raise argparse.ArgumentTypeError(
            "the queue name is empty: give a queue's name, as `boxmq ls` lists it (a script's "
            "variable left empty?)"
        )
    return text


def message_id(text: str) -> str:
    """A settle's id: an empty one (a script's `boxmq ack q "$ID"` after a `get` that found
    nothing) was looked for, then "boxmq ack: : no such message"."""
    if not text:
        raise argparse.ArgumentTypeError(
            "the message id is empty: give the id `get` printed (a script's variable that a "
            "`get` finding nothing left empty?)"
        )
    return text


def integer(text: str) -> int:
    with _usage_error():
        return parse_integer(text)


def priority(text: str) -> int:
    """A priority a message's name can carry: `--priority 99999999999` was an error of the
    run (exit 1), said once the root was made."""
    try:
        return check_priority(integer(text))
    except InvalidArgument:
        raise argparse.ArgumentTypeError(
            f"bad priority {text!r}: it must be from -2147483648 to 2147483647 (an int32)"
        ) from None


def positive_int(text: str) -> int:
    number = integer(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"bad number {text!r}: it must be at least 1")
    return number


def max_deliveries(text: str) -> int:
    """A delivery limit, 0 for none (as the config file's key)."""
    try:
        number = integer(text)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{error} (0 for no limit)") from None
    if number < 0:
        raise argparse.ArgumentTypeError(
            f"bad number {text!r}: give the deliveries a message may have, 0 for no limit"
        )
    return number


def stanza_size_limit(text: str) -> int:
    from boxmq.xmpp.settings import stanza_size_refusal  # serve's alone, as settings_from

    limit = integer(text)
    if (refused := stanza_size_refusal(limit)) is not None:
        raise argparse.ArgumentTypeError(refused)
    return limit


def address(text: str, *, port_example: int = 1883, no_host: str = "0.0.0.0") -> tuple[str, int]:
    """An MQTT listener's HOST:PORT; `port_example`: the port its errors' examples name,
    `no_host`: the host of `:PORT` (a listener's: every address of this machine)."""
    host, colon, port = text.rpartition(":")
    unbracketed = ":" in host and not (host.startswith("[") and host.endswith("]"))
    if unbracketed and (error := _unbracketed(text, host, port_example)):
        # `::1` was read as host ':' and port 1, which then did not resolve.
        raise argparse.ArgumentTypeError(error)
    # isascii: isdigit() also takes other scripts' digits, and superscripts int() refuses
    if colon and port.startswith("-") and port[1:].isascii() and port[1:].isdigit():
        # The form was right, the number not: told as one too big is.
        raise argparse.ArgumentTypeError(f"{text!r}: port {port} is out of range: use 0 to 65535")
    if not colon or not (port.isascii() and port.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: use HOST:PORT, e.g. 127.0.0.1:{port_example}")
    if int(port) > 65535:  # as the file's port says, rather than a format that was right
        raise argparse.ArgumentTypeError(f"{text!r}: port {port} is out of range: use 0 to 65535")
    if utf8_size(host) is None:  # a lone surrogate, which asyncio's resolver raised on
        raise argparse.ArgumentTypeError(
            f"{text!r}: the host is not valid Unicode: use HOST:PORT, e.g. 127.0.0.1:{port_example}"
        )
    if not is_host_name(host.strip("[]")):  # the XMPP component logged a traceback per retry
        raise argparse.ArgumentTypeError(f"{text!r}: the host is no host name: {HOST_NAME_RULE}")
    return host.strip("[]") or no_host, int(port)


def xmpp_server(text: str) -> tuple[str, int]:
    """--xmpp-server: an `address` whose examples name XEP-0114's port. They named MQTT's,
    1883, where serve's own listener may be: a component sent there connects, and no XMPP
    stream ever answers it. `:5347` is this machine's, as the flag's default: it connected
    to 0.0.0.0, a listener's every address, which no connection is meant for (Linux takes
    it for this machine, other systems refuse it)."""
    return address(text, port_example=5347, no_host="127.0.0.1")


def _unbracketed(text: str, host: str, port_example: int) -> str:
    """The error for an IPv6 address without brackets whose part before the last colon is
    no address (`::1` is host ':' and port 1; `::1:1883` is [::1]:1883, as it always was),
    with what to write instead, "" when there is none."""
    import ipaddress  # here, on an unbracketed IPv6 address, not on every command's start

    def ipv6(text: str) -> bool:
        try:
            return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
        except ValueError:
            return False

    if ipv6(host):
        return ""
    if ipv6(text):
        instead = f"[{text}]:PORT, e.g. [{text}]:{port_example}"
    else:
        instead = f"[IPV6]:PORT, e.g. [::1]:{port_example}"
    return f"{text!r}: an IPv6 address goes in brackets before the port: write {instead}"


def named_property(text: str) -> tuple[str, Property]:
    """One -p option, read as argparse reads the others: a value the user typed that is no
    property (`n:int=x`, `mqtt.payload-format=2`) is a usage error (exit 2), said before the
    body is read or the root made, as a bad --priority is; it was an error of the run (1)."""
    with _usage_error():
        name, value = parse_property(text)
        if name.startswith(RESERVED_PREFIX):  # refused by put and publish too, root made
            raise InvalidArgument(reserved_name(name))
        mqtt_fields.check({name: value})  # an `mqtt.*` value MQTT v5 cannot carry
    return name, value


def reply_to(text: str) -> str:
    """A --reply-to: a queue or topic to answer on (docs/cli.md), so none with a wildcard,
    which makes a filter, never a name to publish to (model.check_reply_to, which `put` and
    `publish` of the API call too). "" is no value, as the API takes it (docs/python.md)."""
    with _usage_error():
        check_reply_to(text)
    return text
