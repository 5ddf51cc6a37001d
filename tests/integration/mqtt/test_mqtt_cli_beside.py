"""The CLI on a root a running `boxmq serve` serves, its MQTT clients connected or away: what
a command tells of their sessions' subscriptions must be what the CLI will do with them."""

from __future__ import annotations

from pathlib import Path

from tests.integration.mqtt.clients import (
    boxmq_cli,
    boxmq_cli_ok,
    paho,
    persistent_paho,
    serving_fresh,
)


def test_delete_of_an_mqtt_session_s_filter_does_not_offer_the_unsubscribe_it_refuses(
    tmp_path: Path,
) -> None:
    """`boxmq delete 'a/#'` of a filter an MQTT session subscribed to told the user to run
    `boxmq unsubscribe 'a/#' --name p1`, which is refused (the subscription is its client's):
    it now offers unsubscribe only for the subscription the CLI kept, and says how the
    session's ends (its client unsubscribes, or connects once with a clean start)."""
    with serving_fresh(tmp_path) as served:
        root = served.root
        client = persistent_paho(served, "p1", v5=True)
        member = paho(served, "m1", clean=False, expiry=300)
        try:
            client.subscribe("a/#", 1)
            member.subscribe("$share/g/a/#", 1)
            boxmq_cli_ok(root, "subscribe", "a/#", "--name", "kept", "--keep", "--idle", "0")
            for name, session in (("a/#", "p1"), ("$share/g/a/#", "m1")):
                refused = boxmq_cli(root, "delete", name)
                assert refused.returncode == 1, refused
                [line] = refused.stderr.splitlines()
                assert f"--name {session}" not in line, line
                assert "connects once with a clean start" in line, line
                assert boxmq_cli(root, "unsubscribe", name, "--name", session).returncode == 1
            [line] = boxmq_cli(root, "delete", "a/#").stderr.splitlines()
            assert "`boxmq unsubscribe 'a/#' --name kept` ends it" in line, line
            assert "p1" in line, line
        finally:
            client.stop()
            member.stop()


def test_a_client_id_given_as_subscriber_is_told_its_name_on_disk(tmp_path: Path) -> None:
    """`boxmq session ls` lists the client `site/7` and `boxmq ls` its subscription as
    `site%2F7` (docs/mqtt.md: a client id over 40 bytes by its shortened name): `boxmq peek
    'a/#' --subscriber site/7`, the id copied from session ls, said `no subscription of
    'site/7'` alone. It now gives the name on disk to give instead."""
    long_id = "device-" + "0123456789" * 5
    with serving_fresh(tmp_path) as served:
        root = served.root
        clients = [persistent_paho(served, client_id, v5=True) for client_id in ("site/7", long_id)]
        try:
            for client in clients:
                client.subscribe("a/#", 1)
                client.stop()  # away: what comes waits in its subscription's target/
            waiting = boxmq_cli_ok(root, "publish", "a/1", "waiting").strip()
            session_ids = [
                line.split()[0] for line in boxmq_cli_ok(root, "session", "ls").splitlines()[1:]
            ]
            assert sorted(session_ids) == sorted(["site/7", long_id])
            for client_id in session_ids:
                refused = boxmq_cli(root, "peek", "a/#", "--subscriber", client_id)
                assert refused.returncode == 1, refused
                [line] = refused.stderr.splitlines()
                on_disk = line.split("`")[-2].split()[-1]  # give `--subscriber N`
                assert line.endswith(
                    f"; {client_id!r} is the id of an MQTT client, whose subscriptions go by "
                    f"{on_disk!r} on disk (`boxmq ls`): give `--subscriber {on_disk}`"
                ), line
                assert waiting in boxmq_cli_ok(root, "peek", "a/#", "--subscriber", on_disk)
        finally:
            for client in clients:
                client.stop()


def test_unsubscribe_under_a_client_id_is_refused_as_under_its_name_on_disk(
    tmp_path: Path,
) -> None:
    """`boxmq unsubscribe 'a/#' --name site/7`, the client id `session ls` lists, said `no
    subscription of 'site/7'` alone, where `--name site%2F7` is refused (the subscription is
    its session's) and `peek --subscriber site/7` tells the name on disk. It is now refused
    as the session's, and the refusal names the client by its id under either name; a
    subscription the CLI kept under the name on disk, not the session's, is told with the
    `--name` that ends it."""
    with serving_fresh(tmp_path) as served:
        root = served.root
        boxmq_cli_ok(root, "subscribe", "b/#", "--name", "site%2F7", "--keep", "--idle", "0")
        client = persistent_paho(served, "site/7", v5=True)
        try:
            client.subscribe("a/#", 1)
            for name in ("site/7", "site%2F7"):
                line = _refused_line(root, "unsubscribe", "a/#", "--name", name)
                assert line.startswith(
                    "boxmq unsubscribe: site/7 is the client id of an MQTT session (its client "
                    "connected to boxmq serve"
                ), line
            line = _refused_line(root, "unsubscribe", "b/#", "--name", "site/7")
            assert line.endswith(
                "; 'site/7' is the id of an MQTT client, whose subscriptions go by 'site%2F7' "
                "on disk (`boxmq ls`): give `--name site%2F7`"
            ), line
            boxmq_cli_ok(root, "unsubscribe", "b/#", "--name", "site%2F7")
            boxmq_cli_ok(root, "publish", "a/1", "still-subscribed")
            assert client.next().payload == b"still-subscribed"
        finally:
            client.stop()


def test_unsubscribe_refuses_a_connected_non_persistent_client_s_membership(
    tmp_path: Path,
) -> None:
    """`boxmq unsubscribe '$share/h/r/#' --name np` of a connected client with no persistent
    session (no record on disk) removed its membership while the server still sent to it: once
    the other member left, the group was deleted, np still subscribed got nothing, and
    `boxmq publish` said published. It is now refused as a persistent session's is, saying its
    client unsubscribes or disconnects; delete does not offer it; a plain subscription of such
    a client is in memory only (docs/mqtt.md), and no unsubscribe finds it."""
    with serving_fresh(tmp_path) as served:
        root = served.root
        np = paho(served, "np", v5=True)  # clean start, no Session Expiry: not persistent
        try:
            np.subscribe("$share/h/r/#", 1)
            np.subscribe("a/#", 1)
            boxmq_cli_ok(
                root, "subscribe", "$share/h/r/#", "--name", "kept", "--keep", "--idle", "0"
            )
            refused = boxmq_cli(root, "unsubscribe", "$share/h/r/#", "--name", "np")
            assert refused.returncode == 1, refused
            [line] = refused.stderr.splitlines()
            assert line.startswith(
                "boxmq unsubscribe: np is the client id of an MQTT client connected to boxmq "
                "serve, process "
            ), line
            assert "That client unsubscribes (UNSUBSCRIBE), or disconnects" in line, line
            [line] = boxmq_cli(root, "delete", "$share/h/r/#").stderr.splitlines()
            assert "--name np" not in line, line
            assert "`boxmq unsubscribe '$share/h/r/#' --name kept` ends it" in line, line
            assert (
                "MQTT client np, connected with a session that is not persistent, ends when it "
                "unsubscribes (UNSUBSCRIBE) or disconnects" in line
            ), line
            boxmq_cli_ok(root, "unsubscribe", "$share/h/r/#", "--name", "kept")
            assert "np" in boxmq_cli_ok(root, "ls")
            boxmq_cli_ok(root, "publish", "r/1", "to-np")
            assert np.next().payload == b"to-np"
            refused = boxmq_cli(root, "unsubscribe", "a/#", "--name", "np")
            assert refused.returncode == 1, refused
            assert "no subscription of 'np' to 'a/#'" in refused.stderr, refused.stderr
        finally:
            np.stop()


def _refused_line(root: Path, *args: str) -> str:
    """The one line a refused command says on stderr (exit 1, no traceback)."""
    refused = boxmq_cli(root, *args)
    assert refused.returncode == 1, refused
    [line] = refused.stderr.splitlines()
    return line
