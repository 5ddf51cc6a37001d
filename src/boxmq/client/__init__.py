"""The embedded API: queues on the files of a root, from any process, with no server."""

from __future__ import annotations

from boxmq.client.box import Box, open
from boxmq.client.consumer import Consumer
from boxmq.client.message import Message
from boxmq.client.queue import Outgoing, Peeked, Queue, QueueCounts

__all__ = ["Box", "Consumer", "Message", "Outgoing", "Peeked", "Queue", "QueueCounts", "open"]
