"""Fixtures for the MQTT integration tests (helpers live in clients.py)."""

from __future__ import annotations

from tests.integration.mqtt.clients import server, two_servers

__all__ = ["server", "two_servers"]
