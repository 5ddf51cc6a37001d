"""`[mqtt.limits]` read from a real config file: the highest values the file accepts still
make a server that v5 and 3.1.1 clients can use (the values go to v5 clients in CONNACK)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.mqtt.clients import paho, start_server

from boxmq.config import LIMITS_HIGHEST, load_config


@pytest.mark.parametrize("v5", [pytest.param(True, id="v5"), pytest.param(False, id="v311")])
def test_limits_at_the_highest_values_the_file_accepts(tmp_path: Path, v5: bool) -> None:
    path = tmp_path / "boxmq.toml"
    path.write_text("[mqtt.limits]\n" + "".join(f"{k} = {v}\n" for k, v in LIMITS_HIGHEST.items()))
    config = load_config(path)
    running = start_server(tmp_path / "root", config.mqtt)
    try:
        sub = paho(running, "sub", v5=v5)
        pub = paho(running, "pub", v5=v5)
        sub.subscribe("limits/#", 1)
        pub.publish("limits/a", b"at the maximum", 1)
        assert sub.next().payload == b"at the maximum"
        sub.stop()
        pub.stop()
    finally:
        running.shutdown()
