"""A listener's close (MqttServer.close at shutdown) with connections just accepted."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

from boxmq.mqtt import server


def test_a_socket_accepted_just_before_close_is_closed_with_it() -> None:
    """Accepted, its wrapping into a transport is a task; cancelled by close before it
    started, the task never took the socket, which was left open: a ResourceWarning at
    shutdown, the client's connection open until the socket was collected."""

    async def main() -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        listening = server._Listening(
            listener, "mqtt://test", asyncio.Protocol, server._Descriptors()
        )
        with socket.create_connection(listener.getsockname()[:2]) as client:
            listening._accept()  # as its reader would, the connection in the kernel's queue
            listening.close()  # in the same turn of the loop: its task not started
            await asyncio.sleep(0)  # the task's cancellation, and its callbacks
            await asyncio.sleep(0)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gc.collect()
            assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
            client.settimeout(5.0)
            assert client.recv(1) == b""  # closed

    asyncio.run(main())
