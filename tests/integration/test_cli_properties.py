"""`-p NAME:TYPE=VALUE` of `put` and `publish`: a value too big for its type is a usage error
(exit 2), said before the root is made, for a float as for the other types."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.test_cli import boxmq_cli, ok


@pytest.mark.parametrize(
    ("command", "written", "says"),
    [
        # Past Java's Float.MAX_VALUE (3.4028235e38), a double still: put and publish refused
        # it once the root was made, as an error of the run (exit 1).
        ("put", "f:float=1e39", "1e39 does not fit a float in property 'f:float=1e39'"),
        ("publish", "f:float=-4e38", "-4e38 does not fit a float in property 'f:float=-4e38'"),
        # Past a double too: it said "does not fit a double" of a float.
        ("put", "f:float=1e999", "1e999 does not fit a float in property 'f:float=1e999'"),
        ("put", "d:double=1e309", "1e309 does not fit a double in property 'd:double=1e309'"),
    ],
)
def test_a_value_too_big_for_its_type_is_a_usage_error(
    tmp_path: Path, command: str, written: str, says: str
) -> None:
    root = tmp_path / "data"
    where = "jobs" if command == "put" else "t"
    done = boxmq_cli(root, command, where, "x", "-p", written)
    assert done.returncode == 2, done
    assert done.stderr.splitlines()[-1] == f"boxmq {command}: error: argument --property/-p: {says}"
    assert not root.exists()


@pytest.mark.parametrize(
    "written", ["f:float=3.4028234e38", "f:float=3.4028235e38", "f:float=-3.4e38", "f:float=inf"]
)
def test_a_float_within_its_range_is_sent(tmp_path: Path, written: str) -> None:
    done = boxmq_cli(tmp_path, "put", "jobs", "x", "-p", written)
    assert done.returncode == 0, done


def test_get_and_peek_spell_values_as_the_file_name_does(tmp_path: Path) -> None:
    # They printed Python's spelling (d=1e+20,b=True,n=nan) while the file name, the Spark
    # source and MQTT v5 User Properties say Java's: one value read two ways.
    typed = ["d:double=1e20", "b:bool=true", "n:double=nan", "x:double=-inf", "i:int=3"]
    ok(tmp_path, "put", "jobs", "x", *(arg for value in typed for arg in ("-p", value)))
    java = "d=1.0E20,b=true,n=NaN,x=-Infinity,i=3"
    peeked = ok(tmp_path, "peek", "jobs").splitlines()
    assert peeked[1].split()[-1] == java, peeked
    got = ok(tmp_path, "get", "jobs").splitlines()
    assert f"properties      {java}" in got, got


@pytest.mark.parametrize("command", ["put", "publish"])
@pytest.mark.parametrize(
    ("option", "property"),
    [
        (("--reply-to", "x/y"), "mqtt.response-topic=z/w"),
        (("--correlation-id", "cid"), "mqtt.correlation-data=YWJj"),
    ],
)
def test_a_v5_field_given_both_as_its_option_and_as_a_property_is_a_usage_error(
    tmp_path: Path, command: str, option: tuple[str, str], property: str
) -> None:
    """`publish t x --reply-to x/y -p mqtt.response-topic=z/w` was sent, and an MQTT v5
    subscriber got x/y alone as its Response Topic (the option wins, file-format.md) while
    `get` showed both: the -p was dropped without a word, where a name given twice is
    refused. Found with a paho subscriber beside `boxmq serve`."""
    root = tmp_path / "data"
    done = boxmq_cli(root, command, "t", "x", *option, "-p", property)
    assert done.returncode == 2, done
    name = property.split("=")[0]
    assert done.stderr.splitlines()[-1] == (
        f"boxmq {command}: error: {option[0]} and -p {name} are the same MQTT v5 field "
        f"({'Response Topic' if name == 'mqtt.response-topic' else 'Correlation Data'}): "
        "give one of them"
    )
    assert not root.exists()
