"""Every answer the service sends to an iq or a message, within the stanza size limit.

A stanza past the server's limit for the component ends the component's stream, everyone's
notifications in flight with it, and what a client sends may grow on its way back (a `'` it
writes as one byte is `&apos;` in an echo). So each answer is sized where it is sent: an iq
whose answer could not fit is not served, an error too big goes without its echo, a result
too big as resource-constraint, a refused message's error too big not at all; each logged,
at most a line a minute per bare JID.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from boxmq.core.refusal_lines import RefusalLines, passed_over_said
from boxmq.xmpp import render
from boxmq.xmpp.conditions import ANSWER_TOO_BIG, Condition
from boxmq.xmpp.requests import Iq, Unacknowledged, bare
from boxmq.xmpp.settings import ENVELOPE

__all__ = ["Answers"]

log = logging.getLogger("boxmq.xmpp")

# Characters of an error's text kept when even the error without its echo would not fit: at
# most 6 bytes each escaped, well within the room ENVELOPE leaves beside the iq's envelope.
_TEXT_KEPT: Final = 1000
# Messages whose refusal is not answered: a headline asks no reply (RFC 6121 §5.2.2), and a
# groupchat comes from a room, which would hand an error to every occupant, or send it back.
_UNANSWERED: Final = frozenset({"headline", "groupchat"})


class Answers:
    """The answers of one service, sent through its `send`, sized against its
    `stanza_size_limit`; `now` dates the lines that say an answer was cut or not sent."""

    def __init__(
        self, *, send: Callable[[str], None], stanza_size_limit: int, now: Callable[[], float]
    ) -> None:
        self._send = send
        self._stanza_size_limit = stanza_size_limit
        self._now = now
        # Answers past the stanza size limit, by what was done and bare JID (size_line)
        self._size_lines: RefusalLines[tuple[str, str]] = RefusalLines()
        # characters: 4 bytes each at most in UTF-8
        self._stanza_surely_fits = stanza_size_limit // 4
        # An iq whose envelope alone (id, addresses: 6 bytes a character at most, `&quot;`)
        # could leave less than ENVELOPE for an answer's error is measured before it is
        # served (the service's iq); any other is answered within the limit (send_answer).
        self._surely_answerable = (stanza_size_limit - ENVELOPE) // 6

    def unanswerable(self, iq: Iq) -> bool:
        """Whether `iq` leaves no room for an answer: its id (and addresses), which every
        answer carries back (RFC 6120 §8.1.3), written in an empty result come near the
        stanza size limit. Such an iq is not served, and is logged: its result or error
        would pass the limit and end the component's stream (a `>` a client writes as one
        byte in an attribute is `&gt;` in the answer), and served unanswered, a publish
        would be stored for a publisher told nothing. Measured only for an envelope long
        enough to come near it."""
        if len(iq.id) + len(iq.sender) + len(iq.to) <= self._surely_answerable:
            return False
        size = len(render.result(iq).encode())
        if size <= self._stanza_size_limit - ENVELOPE:
            return False
        if (more := self.size_line("not served", iq.sender)) is not None:
            log.warning(
                "an iq from %s with an id of %d characters not served: its answer would be "
                "%d bytes at least, over the %d a stanza from this component may carry%s",
                iq.sender,
                len(iq.id),
                size,
                self._stanza_size_limit,
                more,
            )
        return True

    def size_line(self, done: str, sender: str) -> str | None:
        """Whether a line is due about an answer past the stanza size limit (`done`: what
        was done instead) to `sender`: None if it is counted, not told (told of less than a
        minute ago); else what the line adds of those passed over since the last one. Its
        first at once, then at most one line a minute per bare JID (core/refusal_lines.py):
        a peer sending such stanzas in a loop wrote a line each."""
        passed_over = self._size_lines.refused((done, bare(sender)), now=self._now())
        return None if passed_over is None else passed_over_said(passed_over)

    def over_limit(self, stanza: str) -> int:
        """The size in bytes of `stanza` if it would pass the stanza size limit, else 0."""
        if len(stanza) <= self._stanza_surely_fits:
            return 0
        size = len(stanza.encode())
        return size if size > self._stanza_size_limit else 0

    def send_error(
        self, iq: Iq, condition: Condition, *, text: str = "", inner: str | None = None
    ) -> None:
        """Refuse `iq`: the error echoes the request (or carries `inner`), within the limit."""
        error = render.error(iq, condition, text=text, inner=inner)
        self.send_answer(iq, error, refused=(condition, text))

    def send_answer(
        self, iq: Iq, answer: str, *, refused: tuple[Condition, str] | None = None
    ) -> None:
        """Send `answer` to `iq`: the one size check of every iq answer, where it is built.
        A stanza past the server's limit for the component ends the component's stream,
        everyone's notifications in flight with it; what a client sends may grow on the way
        back (a `'` it writes as one byte is `&apos;` in an echo). An error over the limit
        (`refused`: its condition and text) goes without its echo of the request, a MAY
        (RFC 6120 §8.3.1), its text cut if even then it would not fit; a result over it,
        which cannot be cut without saying something else, as resource-constraint."""
        size = self.over_limit(answer)
        if not size:
            self._send(answer)
            return
        condition, text = refused or (
            ANSWER_TOO_BIG,
            f"the answer would be {size} bytes, over the {self._stanza_size_limit} a stanza "
            "from this service may carry",
        )
        smaller = render.error(iq, condition, text=text, inner="")
        if len(smaller.encode()) > self._stanza_size_limit:
            smaller = render.error(iq, condition, text=text[:_TEXT_KEPT] + "...", inner="")
        if (more := self.size_line("cut", iq.sender)) is not None:
            log.info(
                "the answer to iq %.80s from %s would be %d bytes, over the stanza size limit "
                "(%d): sent as %s without %s%s",
                iq.id,
                iq.sender,
                size,
                self._stanza_size_limit,
                condition.name,
                "the request echoed" if refused else "the result",
                more,
            )
        self._send(smaller)

    def refuse_message(self, message: Unacknowledged, condition: Condition, text: str) -> None:
        """Answer a message refused, unless its type asks no answer or its error would not
        fit in a stanza."""
        if message.type in _UNANSWERED:
            log.debug(
                "%s message from %s to %s refused: %s",
                message.type,
                message.sender,
                message.to,
                text,
            )
            return
        error = render.message_error(message.id, message.sender, message.to, condition, text=text)
        if size := self.over_limit(error):  # its id mirrored (RFC 6120 §8.3), or the text
            if (more := self.size_line("not answered", message.sender)) is not None:
                log.warning(
                    "a message from %s refused (%s) not answered: its error would be %d "
                    "bytes, over the %d a stanza from this component may carry%s",
                    message.sender,
                    condition.name,
                    size,
                    self._stanza_size_limit,
                    more,
                )
            return
        self._send(error)
