"""Request / response with `[mqtt] response_information` (MQTT 5.0 §4.10): a real `boxmq serve`
and paho clients. A client that asks is told the basis of its response topics, filled in for
it, and a request sent with a Response Topic under it gets its answer back."""

from __future__ import annotations

from pathlib import Path

from tests.integration.mqtt.clients import paho, paho_properties, serving_fresh, start_server

from boxmq.mqtt.settings import MqttSettings


def test_a_client_that_asks_learns_its_response_topic_and_gets_its_answer(
    tmp_path: Path,
) -> None:
    from paho.mqtt.packettypes import PacketTypes

    config = tmp_path / "boxmq.toml"
    config.write_text('[mqtt]\nresponse_information = "reply/%c/"\n')
    with serving_fresh(tmp_path, "--config", str(config)) as running:
        asker = paho(running, "asker", connect_properties={"RequestResponseInformation": 1})
        basis = asker.connack_properties.ResponseInformation
        assert basis == "reply/asker/"
        quiet = paho(running, "quiet")  # did not ask: told nothing (§3.1.2.11.7)
        assert not hasattr(quiet.connack_properties, "ResponseInformation")
        responder = paho(running, "clock")
        responder.subscribe("svc/time", 1)
        asker.subscribe(basis + "#", 1)
        request = paho_properties(
            PacketTypes.PUBLISH, ResponseTopic=basis + "time", CorrelationData=b"req-1"
        )
        asker.publish("svc/time", b"what time is it?", 1, properties=request)
        got = responder.next()
        answer = paho_properties(
            PacketTypes.PUBLISH, CorrelationData=got.properties.CorrelationData
        )
        responder.publish(got.properties.ResponseTopic, b"noon", 1, properties=answer)
        reply = asker.next()
        assert (reply.topic, reply.payload) == ("reply/asker/time", b"noon")
        assert reply.properties.CorrelationData == b"req-1"
        for client in (asker, quiet, responder):
            client.stop()


def test_start_server_keeps_every_setting_it_is_given(tmp_path: Path) -> None:
    # start_server copied MqttSettings field by field but response_information, so a test
    # that gave it one met a server that told its clients nothing.
    settings = MqttSettings(response_information="reply/%c/")
    with start_server(tmp_path / "root", settings) as running:
        asker = paho(running, "asker", connect_properties={"RequestResponseInformation": 1})
        assert asker.connack_properties.ResponseInformation == "reply/asker/"
        asker.stop()
