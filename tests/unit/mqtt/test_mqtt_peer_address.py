"""A client's address is kept as host and port from its socket on, and written once: an IPv6
host in brackets, whose port a reader can tell from its last group."""

from __future__ import annotations

import asyncio
import socket

import pytest

from boxmq.mqtt.peer_address import PeerAddress, peer_address


@pytest.mark.parametrize(("host", "shown"), [("127.0.0.1", "127.0.0.1:{}"), ("::1", "[::1]:{}")])
def test_the_address_of_a_real_socket_keeps_its_host_and_port(host: str, shown: str) -> None:
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")

    async def main() -> tuple[PeerAddress, int]:
        seen: asyncio.Future[PeerAddress] = asyncio.get_running_loop().create_future()

        def accepted(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(peer_address(writer.transport))
            writer.close()

        server = await asyncio.start_server(accepted, host, 0)
        _, writer = await asyncio.open_connection(host, server.sockets[0].getsockname()[1])
        port = writer.get_extra_info("sockname")[1]
        address = await asyncio.wait_for(seen, 10)
        writer.close()
        server.close()
        await server.wait_closed()
        return address, port

    address, port = asyncio.run(main())
    assert address == PeerAddress(host, port)
    assert str(address) == shown.format(port)


def test_an_address_without_a_port_is_its_host_alone() -> None:
    assert str(PeerAddress("?")) == "?"
