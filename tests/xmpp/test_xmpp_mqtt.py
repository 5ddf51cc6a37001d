"""One broker, two protocols: an MQTT publish reaches the XMPP subscribers of the node of that
name, and an XMPP publish to a topic node reaches MQTT subscribers (mosquitto's clients)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from harness.prosody import TIMEOUT, Prosody, clients
from tests.xmpp.clients import component

import boxmq
from boxmq.mqtt.server import MqttServer
from boxmq.mqtt.settings import Listener, MqttSettings
from boxmq.xmpp.payloads import BOXMQ_NS

pytestmark = pytest.mark.skipif(
    shutil.which("mosquitto_pub") is None, reason="mosquitto-clients is not installed"
)


def test_mqtt_to_xmpp_and_back(prosody: Prosody, tmp_path: Path) -> None:
    box = boxmq.open(tmp_path / "data", fsync="never")

    async def scenario() -> None:
        stop = asyncio.Event()
        mqtt = MqttServer(box, MqttSettings(listeners=(Listener("127.0.0.1", 0),)))
        [(host, port)] = await mqtt.start()
        serving = asyncio.create_task(mqtt.run(stop))
        try:
            async with component(prosody, box), clients(prosody, "alice", "carol") as users:
                alice, carol = users
                assert (await alice.subscribe(1, node="sensors/1")).get("type") == "result"
                mqtt_pub = ["mosquitto_pub", "-h", host, "-p", str(port), "-q", "1"]
                await asyncio.to_thread(
                    subprocess.run,
                    [*mqtt_pub, "-t", "sensors/1", "-m", "21.5"],
                    check=True,
                    timeout=TIMEOUT,
                )
                event = await alice.next_event()
                assert event.what == "item"
                assert event.payload is not None
                assert event.payload.tag == f"{{{BOXMQ_NS}}}text"
                assert event.payload.text == "21.5"

                # XMPP -> MQTT: a persistent MQTT session is a durable subscription on disk
                listen = await asyncio.create_subprocess_exec(
                    *["mosquitto_sub", "-h", host, "-p", str(port), "-q", "1", "-c"],
                    *["-i", "dashboard", "-t", "sensors/2", "-C", "1", "-W", str(int(TIMEOUT))],
                    stdout=asyncio.subprocess.PIPE,
                )
                try:
                    for _ in range(int(TIMEOUT / 0.2)):  # until it has subscribed and got one
                        await carol.publish("<r xmlns='urn:example'>7</r>", node="sensors/2")
                        if listen.returncode is not None:
                            break
                        await asyncio.sleep(0.2)
                    output, _ = await asyncio.wait_for(listen.communicate(), TIMEOUT)
                finally:
                    if listen.returncode is None:
                        listen.kill()
                        await asyncio.wait_for(listen.wait(), TIMEOUT)
                assert listen.returncode == 0
                assert output.decode().strip() == '<r xmlns="urn:example">7</r>'
        finally:
            stop.set()
            await serving

    asyncio.run(asyncio.wait_for(scenario(), 60))
    box.close()
