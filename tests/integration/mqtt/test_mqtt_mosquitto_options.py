"""mosquitto's own clients (mosquitto_pub, mosquitto_sub, mosquitto_rr), option family by
option family, against a real mosquitto and against boxmq: a user who moves from mosquitto runs
the same commands and is to see the same output. Each case is a short shell script run against
both brokers in turn, its output (exit codes included) compared, and pinned to what mosquitto
2.0.11 printed, so a case that printed nothing on both cannot pass.

The scripts never race a live subscription: what a subscriber is to get is retained, or
queued for a persistent session that `mosquitto_sub -c ... -E` made first, or (mosquitto_rr)
published by a responder whose persistent session already holds the request; a SUBSCRIBE
waits for the retained writes under way (retained_window.py), so a retained message published
at QoS 0, as a user types it, is there for the next command. The differences MQTT allows (the
order of retained messages of several topics, Topic Aliases to a client, MQTT 3.1) are in
docs/mqtt.md, Coming from mosquitto: the cases sort retained messages of several topics and
print no alias; test_mqtt31_is_refused_as_the_docs_say pins MQTT 3.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.ports import free_port
from harness.stopping import stop
from tests.integration.mqtt.clients import boxmq_cli_ok, mosquitto_tools, serving_fresh
from tests.waiting import until

MOSQUITTO = "/usr/sbin/mosquitto"  # Debian's

# The commands of every script, each under a timeout (a case that hangs fails, it does not
# hang the run); $P: the broker's port, $T: the case's own topic prefix and client id prefix
# (the one mosquitto serves every case of the module).
PREAMBLE = """
pub() { timeout -k 2 10 mosquitto_pub -h 127.0.0.1 -p "$P" "$@"; }
sub() { timeout -k 2 10 mosquitto_sub -h 127.0.0.1 -p "$P" "$@"; }
rr() { timeout -k 2 10 mosquitto_rr -h 127.0.0.1 -p "$P" "$@"; }
"""


@dataclass(frozen=True)
class Case:
    script: str
    expected: str  # what mosquitto 2.0.11 printed
    sort: bool = False  # retained messages of several topics: MQTT sets no order


CASES = {
    # -V, -q, -r: a retained message of QoS 1 and 2 under each version, sent at the QoS of
    # each subscription (the lower of the two, MQTT-3.8.4-8)
    "versions-and-qos": Case(
        """
        for v in mqttv311 mqttv5; do for q in 1 2; do
          pub -V $v -q $q -r -t $T/$v/$q -m "$v-$q"
        done; done
        for v in mqttv311 mqttv5; do for q in 0 1 2; do
          sub -V $v -t "$T/#" -q $q -C 4 -F "$v sub $q: %t %p %q %r" --nodelay
        done; done
        """,
        """
        mqttv311 sub 0: T/mqttv311/1 mqttv311-1 0 1
        mqttv311 sub 0: T/mqttv311/2 mqttv311-2 0 1
        mqttv311 sub 0: T/mqttv5/1 mqttv5-1 0 1
        mqttv311 sub 0: T/mqttv5/2 mqttv5-2 0 1
        mqttv311 sub 1: T/mqttv311/1 mqttv311-1 1 1
        mqttv311 sub 1: T/mqttv311/2 mqttv311-2 1 1
        mqttv311 sub 1: T/mqttv5/1 mqttv5-1 1 1
        mqttv311 sub 1: T/mqttv5/2 mqttv5-2 1 1
        mqttv311 sub 2: T/mqttv311/1 mqttv311-1 1 1
        mqttv311 sub 2: T/mqttv311/2 mqttv311-2 2 1
        mqttv311 sub 2: T/mqttv5/1 mqttv5-1 1 1
        mqttv311 sub 2: T/mqttv5/2 mqttv5-2 2 1
        mqttv5 sub 0: T/mqttv311/1 mqttv311-1 0 1
        mqttv5 sub 0: T/mqttv311/2 mqttv311-2 0 1
        mqttv5 sub 0: T/mqttv5/1 mqttv5-1 0 1
        mqttv5 sub 0: T/mqttv5/2 mqttv5-2 0 1
        mqttv5 sub 1: T/mqttv311/1 mqttv311-1 1 1
        mqttv5 sub 1: T/mqttv311/2 mqttv311-2 1 1
        mqttv5 sub 1: T/mqttv5/1 mqttv5-1 1 1
        mqttv5 sub 1: T/mqttv5/2 mqttv5-2 1 1
        mqttv5 sub 2: T/mqttv311/1 mqttv311-1 1 1
        mqttv5 sub 2: T/mqttv311/2 mqttv311-2 2 1
        mqttv5 sub 2: T/mqttv5/1 mqttv5-1 1 1
        mqttv5 sub 2: T/mqttv5/2 mqttv5-2 2 1
        """,
        sort=True,
    ),
    # -r -n clears one retained message; -T filters a topic out, -R leaves out the retained
    # copies (here at a persistent session's return), --remove-retained clears what it got
    "retained": Case(
        """
        pub -r -t $T/a -m A; pub -r -t $T/b -m B; pub -r -t $T/c/d -m C
        pub -r -n -t $T/b
        sub -t "$T/#" -C 2 -v | sort
        sub -t "$T/#" -T "$T/c/#" -C 1 -v
        sub -c -i $T-r -q 1 -t "$T/#" -R -E; echo rc=$?
        pub -q 1 -t $T/live -m L
        sub -c -i $T-r -q 1 -t "$T/#" -R -C 1 -v
        sub -t "$T/c/#" --remove-retained -W 1 -v; echo rc=$?  # with -C 1 it never exits
        sub -t "$T/#" -C 1 -v; echo rc=$?
        """,
        """
        T/a A
        T/c/d C
        T/a A
        rc=0
        T/live L
        T/c/d C
        T/c/d (null)
        Timed out
        rc=27
        T/a A
        rc=0
        """,
    ),
    # a retained message published at QoS 0 (no acknowledgement: the command is done once it
    # sent it) and at once subscribed to by the next command: the new one, never the one it
    # replaced nor a cleared one live (4 of 8 rounds before the SUBSCRIBE waited for the
    # retained writes under way, docs/mqtt.md); the rounds bound the run to a few seconds
    "retained-at-once": Case(
        """
        for i in 1 2 3 4 5 6 7 8; do
          pub -r -t $T/k -m old$i; pub -r -t $T/k -m new$i; sub -t $T/k -C 1
        done
        for i in 1 2 3; do
          pub -r -t $T/c$i -m gone; pub -r -n -t $T/c$i; sub -t $T/c$i -W 1; echo rc=$?
        done
        """,
        """
        new1
        new2
        new3
        new4
        new5
        new6
        new7
        new8
        Timed out
        rc=27
        Timed out
        rc=27
        Timed out
        rc=27
        """,
    ),
    # -c -i (3.1.1 clean session 0) and -c -x (v5 Session Expiry): what comes while away is
    # kept; a DISCONNECT's Session Expiry 0 (-D disconnect) ends the session
    "sessions": Case(
        """
        sub -c -i $T-a -q 1 -t "$T/a/#" -E; echo rc=$?
        pub -q 1 -t $T/a/1 -m away311
        sub -c -i $T-a -q 1 -t "$T/a/#" -C 1 -F '%t %p %q %r'
        sub -V 5 -c -x 60 -i $T-b -q 2 -t "$T/b/#" -E
        pub -V 5 -q 2 -t $T/b/1 -m away5 -D publish user-property k v
        sub -V 5 -c -x 60 -i $T-b -q 2 -t "$T/b/#" -C 1 -F '%t %p %q %r %P'
        sub -V 5 -c -x 60 -i $T-c -q 1 -t "$T/c/#" -E -D disconnect session-expiry-interval 0
        pub -V 5 -q 1 -t $T/c/1 -m lost; pub -q 1 -r -t $T/c/2 -m marker
        sub -V 5 -c -x 60 -i $T-c -q 1 -t "$T/c/#" -C 1 -v
        """,
        """
        rc=0
        T/a/1 away311 1 0
        T/b/1 away5 2 0 k:v
        T/c/2 marker
        """,
    ),
    # -U: unsubscribed before the message comes, in a session kept between runs
    "unsubscribe": Case(
        """
        for v in mqttv311 mqttv5; do
          sub -V $v -c -x 60 -i $T-$v -q 1 -t "$T/$v/a/#" -t "$T/$v/b/#" -E
          sub -V $v -c -x 60 -i $T-$v -q 1 -U "$T/$v/a/#" -t "$T/$v/b/#" -E \\
            -D unsubscribe user-property u v
          pub -V $v -q 1 -t $T/$v/a/1 -m gone; pub -V $v -q 1 -t $T/$v/b/1 -m kept
          sub -V $v -c -x 60 -i $T-$v -q 1 -t "$T/$v/b/#" -C 1 -v
        done
        """,
        """
        T/mqttv311/b/1 kept
        T/mqttv5/b/1 kept
        """,
    ),
    # -D publish: every property a PUBLISH may carry, printed back by -F and as JSON
    "publish-properties": Case(
        """
        pub -V 5 -r -q 1 -t $T/p -m hello -D publish user-property k v \\
          -D publish user-property k v2 -D publish user-property a b \\
          -D publish content-type text/plain -D publish response-topic $T/back \\
          -D publish correlation-data cd -D publish payload-format-indicator 1 \\
          -D publish message-expiry-interval 3600 -D publish topic-alias 1
        sub -V 5 -t $T/p -C 1 -F '%t|%p|%q|%r|%l|%P|%C|%R|%D|%F|%x|%X'
        sub -V 5 -t $T/p -C 1 -F '%j' | sed 's/"tst":"[^"]*",//; s/l":3[56][0-9][0-9]}/l":E}/'
        sub -V 5 -t $T/p -C 1 -F '%E' | awk '{print ($1 > 3590 && $1 <= 3600)}'
        sub -V mqttv311 -t $T/p -C 1 -F '%t|%p|%P|%C|%R'
        """,
        """
        T/p|hello|0|1|5|k:v k:v2 a:b|text/plain|T/back|cd|1|68656c6c6f|68656C6C6F
        {"topic":"T/p","qos":0,"retain":1,"payloadlen":5,"properties":{"user-properties":{"k":"v","k":"v2","a":"b"},"content-type":"text/plain","response-topic":"T/back","correlation-data":"cd","payload-format-indicator":1,"message-expiry-interval":E},"payload":"hello"}
        1
        T/p|hello|||
        """,
    ),
    # a 60-byte topic leaves a retained message's name no room for its properties' side file
    # key: its file's header names the side file, and a new subscription gets them all
    "publish-properties-long-topic": Case(
        """
        for q in 0 1 2; do
          L=$T/$q-topic-of-sixty-bytes-that-leaves-a-name-no-room-for-a-key
          pub -V 5 -r -q $q -t $L -m hello$q -D publish user-property k v \\
            -D publish content-type text/plain -D publish response-topic $T/back \\
            -D publish correlation-data cd
          sub -V 5 -t $L -C 1 -F '%p|%r|%P|%C|%R|%D'
        done
        sub -V 5 -t "$T/+" -C 3 -F '%p|%r|%P|%C|%R|%D' | sort
        """,
        """
        hello0|1|k:v|text/plain|T/back|cd
        hello1|1|k:v|text/plain|T/back|cd
        hello2|1|k:v|text/plain|T/back|cd
        hello0|1|k:v|text/plain|T/back|cd
        hello1|1|k:v|text/plain|T/back|cd
        hello2|1|k:v|text/plain|T/back|cd
        """,
    ),
    # a retained message past its Message Expiry Interval is not sent
    "message-expiry": Case(
        """
        pub -V 5 -q 1 -r -t $T/a -m gone -D publish message-expiry-interval 1
        pub -V 5 -q 1 -r -t $T/b -m kept -D publish message-expiry-interval 60
        sleep 2.1
        sub -V 5 -t "$T/#" -C 1 -F '%t %p'
        """,
        """
        T/b kept
        """,
    ),
    # -D subscribe subscription-identifier (%S), -D connect: user properties, a Receive
    # Maximum of 1 (twenty queued messages still all come, in order), a Maximum Packet Size
    # that leaves a retained message out
    "subscribe-and-connect-properties": Case(
        """
        pub -q 1 -r -t $T/s/a -m S
        sub -V 5 -t "$T/s/#" -D subscribe subscription-identifier 7 -C 1 -F '%t %p %S'
        sub -V 5 -c -x 60 -i $T-rm -q 1 -t "$T/rm/#" -E
        seq 20 | pub -V 5 -q 1 -t $T/rm/x -l
        sub -V 5 -c -x 60 -i $T-rm -q 1 -t "$T/rm/#" -C 20 -F '%p' \\
          -D connect receive-maximum 1 -D connect user-property who me | tr '\\n' ' '; echo '<'
        pub -q 1 -r -t $T/mp/big -m "$(printf '%0200d' 0)"; pub -q 1 -r -t $T/mp/small -m s
        sub -V 5 -t "$T/mp/#" -D connect maximum-packet-size 100 -C 1 -F '%t %l'
        """,
        """
        T/s/a S 7
        1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 <
        T/mp/small 1
        """,
    ),
    # -m, -n, -f, -s, -l, --repeat; -N prints no newline after the payload
    "inputs": Case(
        """
        printf 'file\\nbody' > $T.txt
        pub -q 1 -r -t $T/f -f $T.txt; sub -t $T/f -C 1 -F '%l %x'
        printf 'x\\ny\\n' | pub -q 1 -r -t $T/s -s; sub -t $T/s -C 1 -F '%l %x'
        pub -q 1 -r -t $T/m -m "two words"; sub -t $T/m -C 1 -N; echo '<'
        sub -V 5 -c -x 60 -i $T-l -q 2 -t "$T/l/#" -E
        printf 'one\\n\\nthree\\n' | pub -q 2 -t $T/l/x -l
        pub -q 1 -t $T/l/y -n
        pub -q 1 -t $T/l/z -m again --repeat 2
        sub -V 5 -c -x 60 -i $T-l -q 2 -t "$T/l/#" -C 6 -F '%t [%p] %l'
        rm -f $T.txt
        """,
        """
        9 66696c650a626f6479
        4 780a790a
        two words<
        T/l/y [] 0
        T/l/z [again] 5
        T/l/z [again] 5
        T/l/x [one] 3
        T/l/x [] 0
        T/l/x [three] 5
        """,
    ),
    # --will-*: a client killed (no DISCONNECT) has its Will sent, with every -D will
    # property (a Will Delay Interval of 1 s under a Session Expiry of 30, -x)
    "wills": Case(
        """
        for v in mqttv311 mqttv5; do
          sub -V $v -c -x 60 -i $T-w$v -q 2 -t "$T/$v/gone" -E
          pub -q 1 -r -t $T/$v/ready -m up
          coproc VICTIM { exec mosquitto_sub -h 127.0.0.1 -p "$P" -V $v -k 5 -t $T/$v/ready \\
            --will-topic $T/$v/gone --will-payload bye --will-qos 2 \\
            $([ $v = mqttv5 ] && echo -x 30 -D will content-type text/x \\
              -D will user-property a b -D will response-topic $T/r -D will correlation-data c \\
              -D will message-expiry-interval 100 -D will payload-format-indicator 1 \\
              -D will will-delay-interval 1); }
          read -r line <&"${VICTIM[0]}"; echo "victim got $line"
          kill -9 "$VICTIM_PID"; wait "$VICTIM_PID" 2>/dev/null
          sub -V $v -c -x 60 -i $T-w$v -q 2 -t "$T/$v/gone" -C 1 \\
            -F '%t %p %q %r [%C] [%P] [%R] [%D] [%F] [%E]'
        done
        """,
        """
        victim got up
        T/mqttv311/gone bye 2 0 [] [] [] [] [] []
        victim got up
        T/mqttv5/gone bye 2 0 [text/x] [a:b] [T/r] [c] [1] [100]
        """,
    ),
    # mosquitto_rr (-t, -e): a request answered by a responder whose persistent session held
    # it, v5 (its Response Topic and Correlation Data) and 3.1.1; -W when no one answers
    "request-response": Case(
        """
        sub -V 5 -c -x 60 -i $T-svc -q 1 -t $T/req -E
        ( sub -V 5 -c -x 60 -i $T-svc -q 1 -t $T/req -C 1 -F '%R %D %p' | {
            read -r topic data payload
            pub -V 5 -q 1 -t "$topic" -m "answer to $payload" -D publish correlation-data "$data"
          } ) &
        rr -t $T/req -e $T/resp/me -m question -q 1 -D publish correlation-data c42 -F '%t|%p|%D'
        echo rc=$?; wait
        sub -c -i $T-svc3 -q 1 -t $T/req3 -E
        ( sub -c -i $T-svc3 -q 1 -t $T/req3 -C 1 -F '%p' | {
            read -r payload; pub -q 1 -t $T/resp3 -m "answer to $payload"
          } ) &
        rr -V mqttv311 -q 1 -t $T/req3 -e $T/resp3 -m q311 -v; echo rc=$?; wait
        rr -t $T/nobody -e $T/resp4 -m q -W 1; echo rc=$?
        """,
        """
        T/resp/me|answer to question|c42
        rc=0
        T/resp3 answer to q311
        rc=0
        Timed out
        rc=27
        """,
    ),
    # -C, -W, -E, -k and their exit codes
    "exits": Case(
        """
        pub -q 1 -r -t $T/a -m A
        sub -t $T/a -C 1; echo rc=$?
        sub -t $T/a -W 1 -C 2; echo rc=$?
        sub -t $T/none -E; echo rc=$?
        sub -t $T/a -k 5 -C 1; echo rc=$?
        """,
        """
        A
        rc=0
        A
        Timed out
        rc=27
        rc=0
        A
        rc=0
        """,
    ),
}


def _script(case: Case, port: int, prefix: str) -> str:
    """What `case` printed against the broker on `port` (stdout and stderr as they came),
    its topics and client ids under `prefix`, which the output shows as T."""
    result = subprocess.run(
        ["bash", "-c", PREAMBLE + case.script],
        env={**os.environ, "P": str(port), "T": prefix},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    return _lines(result.stdout.replace(prefix, "T"), case)


def _expected(case: Case) -> str:
    return _lines(case.expected, case)


def _lines(text: str, case: Case) -> str:
    """`text`'s lines stripped, the blank ones left out; sorted if the case's are."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(sorted(lines) if case.sort else lines)


def _needs_mosquitto() -> None:
    """Skip without mosquitto and its clients, unless CI=true, where that is a failure."""
    mosquitto_tools()
    if Path(MOSQUITTO).exists() and shutil.which("mosquitto_rr"):
        return
    message = f"{MOSQUITTO} or mosquitto_rr is not installed (make test installs them)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Returns once mosquitto accepts connections on `port`; fails if it exits first."""

    def accepts() -> bool:
        assert process.poll() is None, f"mosquitto exited at start: {log.read_text()}"
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        return False

    until(accepts, "mosquitto did not listen within 30 s", within=30)


@contextmanager
def _mosquitto_running(folder: Path, *lines: str) -> Iterator[int]:
    """A mosquitto on 127.0.0.1 (a free port), in memory, with the config `lines`; its port."""
    _needs_mosquitto()
    port = free_port()
    config = folder / "mosquitto.conf"
    settings = (f"listener {port} 127.0.0.1", "persistence false", "log_dest stderr", *lines)
    config.write_text("\n".join(settings) + "\n")
    log = folder / "mosquitto.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [MOSQUITTO, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        _listening(process, port, log)
        yield port
    finally:
        stop(process, seconds=20)


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The mosquitto of the module's cases: anonymous clients; its port."""
    with _mosquitto_running(tmp_path_factory.mktemp("mosquitto"), "allow_anonymous true") as port:
        yield port


@pytest.fixture(scope="module")
def boxmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A `boxmq serve` on 127.0.0.1 (a free port), as a user moving from mosquitto runs it;
    its port. One for the module, as the mosquitto is: each case has topics and ids of its
    own."""
    with serving_fresh(tmp_path_factory.mktemp("boxmq")) as served:
        yield served.port


@pytest.mark.parametrize("name", sorted(CASES))
def test_boxmq_prints_what_mosquitto_prints(mosquitto: int, boxmq: int, name: str) -> None:
    case = CASES[name]
    # short: a longer topic leaves a retained message's v5 properties no room in a file name
    # (docs/file-format.md), which the case of the properties is not about
    prefix = f"q{sorted(CASES).index(name)}z"
    theirs = _script(case, mosquitto, prefix)
    assert theirs == _expected(case), "mosquitto itself printed something else"
    assert _script(case, boxmq, prefix) == theirs


def test_mqtt31_is_refused_as_the_docs_say(mosquitto: int, boxmq: int) -> None:
    """`-V mqttv31` (protocol name MQIsdp, level 3): mosquitto takes it, boxmq, a 3.1.1 and
    5.0 server, answers CONNACK 0x01 (MQTT-3.1.2-2 lets a server refuse a level it does not
    speak), which mosquitto_sub reports in words (docs/mqtt.md, Coming from mosquitto)."""
    case = Case("pub -V mqttv31 -q 1 -r -t $T/a -m A; echo rc=$?; sub -V mqttv31 -t $T/a -C 1", "")
    assert _script(case, mosquitto, "v31z") == "rc=0\nA"
    refused = "Connection error: Connection Refused: unacceptable protocol version."
    assert _script(case, boxmq, "v31z").splitlines() == [
        refused,
        "Error: The connection was refused.",
        "rc=1",
        refused,
    ]


def test_a_refused_user_is_told_so_in_other_words(tmp_path: Path) -> None:
    """-u/-P against a password file: the right password connects on both; a wrong one or an
    unknown user gets "bad user name or password" from boxmq (3.1.1 return code 4, v5
    0x86, as MQTT names the case) where mosquitto says "not authorised" (5, 0x87), and no user
    name gets "not authorised" from both (docs/mqtt.md, Coming from mosquitto)."""
    boxmq_cli_ok(
        tmp_path / "data", "passwd", str(tmp_path / "passwd"), "alice", "--password", "secret"
    )
    (tmp_path / "mosquitto").mkdir()
    words = tmp_path / "mosquitto" / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(words), "alice", "secret"], check=True)
    (tmp_path / "boxmq.toml").write_text(f'[security]\npassword_file = "{tmp_path / "passwd"}"\n')
    script = Case(
        """
        for v in mqttv311 mqttv5; do
          for who in "-u alice -P secret" "-u alice -P wrong" "-u bob -P secret" ""; do
            sub -V $v $who -t $T -E; echo "$v [$who] rc=$?"
          done
        done
        """,
        "",
    )
    # "user root": mosquitto run as root reads its files as the user mosquitto otherwise,
    # whom the test's folders keep out
    with _mosquitto_running(
        tmp_path / "mosquitto", "allow_anonymous false", f"password_file {words}", "user root"
    ) as port:
        theirs = _script(script, port, "pwz")
    with serving_fresh(tmp_path, "--config", str(tmp_path / "boxmq.toml")) as served:
        ours = _script(script, served.port, "pwz")
    refused = {
        5: "Connection error: Connection Refused: not authorised.",
        4: "Connection error: Connection Refused: bad user name or password.",
        135: "Connection error: Not authorized",
        134: "Connection error: Bad User Name or Password",
    }

    def said(codes: list[tuple[str, str, int]]) -> str:
        """What the script prints when each (version, who) gets its CONNACK code."""
        lines = [
            ([refused[code]] if code else []) + [f"{v} [{who}] rc={code}"] for v, who, code in codes
        ]
        return "\n".join(line for pair in lines for line in pair)

    right, wrong, unknown, nobody = (
        "-u alice -P secret",
        "-u alice -P wrong",
        "-u bob -P secret",
        "",
    )
    assert theirs == said(
        [
            (v, who, 0 if who == right else denied)
            for v, denied in (("mqttv311", 5), ("mqttv5", 135))
            for who in (right, wrong, unknown, nobody)
        ]
    )
    assert ours == said(
        [
            (v, who, 0 if who == right else denied if who == nobody else bad)
            for v, denied, bad in (("mqttv311", 5, 4), ("mqttv5", 135, 134))
            for who in (right, wrong, unknown, nobody)
        ]
    )
