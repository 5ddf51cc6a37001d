"""The listings a requester asks for: its subscriptions (XEP-0060 §5.6) and its affiliations
(§5.7), each one result within the stanza size limit.

XEP-0059 paging is not served, so a listing that would pass the limit cannot be cut: it is
refused resource-constraint at the first element that would take it past, the rest never
made, and the requester asks of one node instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from boxmq.client.box import Box
from boxmq.xmpp import ns, render
from boxmq.xmpp.conditions import ANSWER_TOO_BIG
from boxmq.xmpp.errors import StanzaError
from boxmq.xmpp.payloads import NOT_XML
from boxmq.xmpp.requests import Iq, RetrieveAffiliations, RetrieveSubscriptions, bare
from boxmq.xmpp.subscribing import subscription_element
from boxmq.xmpp.subscriptions import Subscriptions

__all__ = ["Listings"]

log = logging.getLogger("boxmq.xmpp")

_attr = render.attr  # not a function of its own: one call per attribute, not two


class Listings:
    """The service's listings, over its subscriptions and the box's queues. `size_line` is
    its answers' (answers.py): whether a line is due about an answer past the stanza size
    limit."""

    def __init__(
        self,
        box: Box,
        subscriptions: Subscriptions,
        *,
        stanza_size_limit: int,
        size_line: Callable[[str, str], str | None],
    ) -> None:
        self._box = box
        self._subscriptions = subscriptions
        self._stanza_size_limit = stanza_size_limit
        self._size_line = size_line

    def subscriptions_of(self, iq: Iq, request: RetrieveSubscriptions) -> str:
        """XEP-0060 §5.6: the requester's subscriptions (its full JID's: each resource
        subscribes on its own), those to one node if it names one."""
        mine = sorted(
            (s for s in self._subscriptions.of_jid(iq.sender) if request.node in (None, s.node)),
            key=lambda s: s.node,
        )
        listed = (subscription_element(s, "subscribed") for s in mine)
        return self._listing(iq, "subscriptions", request.node, listed)

    def affiliations_of(
        self, iq: Iq, request: RetrieveAffiliations, owner_of: Callable[[str], str | None]
    ) -> str:
        """XEP-0060 §5.7: the nodes the requester's bare JID owns (docs/xmpp.md, Owners),
        that one if it names one. Anyone may publish to and subscribe to every node, so no
        other affiliation is kept, nor listed."""
        names = sorted(self._box.queues()) if request.node is None else [request.node]
        me = bare(iq.sender)
        # In order, each owner read as it is listed: a listing refused for its size reads
        # no owner past the one that made it too big.
        owned = (n for n in names if not NOT_XML.search(n) and owner_of(n) == me)
        listed = (f"<affiliation node={_attr(n)} affiliation='owner'/>" for n in owned)
        return self._listing(iq, "affiliations", request.node, listed)

    def _listing(self, iq: Iq, what: str, node: str | None, elements: Iterable[str]) -> str:
        """The result listing `elements` in a pubsub `<what/>` (of `node`, if named). Refused
        (resource-constraint, as answers.py's `send_answer` refuses any result past the
        stanza size limit) at the first element that would take it past the limit, the rest
        never made (sized whole, it was refused only once every queue's owner had been read).
        XEP-0059 paging is not served, so it cannot be cut: a client asks of one node
        instead."""
        named = "" if node is None else f" node={_attr(node)}"
        opened, closed = f"<pubsub xmlns='{ns.PUBSUB}'><{what}{named}>", f"</{what}></pubsub>"
        room = self._stanza_size_limit - len(render.result(iq, opened + closed).encode())
        listed: list[str] = []
        for element in elements:
            room -= len(element.encode())
            if room < 0:
                raise self._listing_too_big(iq, what, len(listed))
            listed.append(element)
        return render.result(iq, opened + "".join(listed) + closed)

    def _listing_too_big(self, iq: Iq, what: str, fit: int) -> StanzaError:
        """The refusal of a listing of `what` whose first `fit` elements fit, logged as
        answers.py's `send_answer` logs a result past the limit."""
        if (more := self._size_line("cut", iq.sender)) is not None:
            log.info(
                "the answer to iq %.80s from %s would pass the stanza size limit (%d) after "
                "%d %s: sent as %s without the result%s",
                iq.id,
                iq.sender,
                self._stanza_size_limit,
                fit,
                what,
                ANSWER_TOO_BIG.name,
                more,
            )
        return StanzaError(
            ANSWER_TOO_BIG,
            f"the {what} would pass the {self._stanza_size_limit} bytes a stanza from this "
            f"service may carry after the first {fit}, and XEP-0059 paging is not served: "
            "ask for those of one node",
        )
