"""A name's numbers and booleans read as DropboxMQ's Java reads them (Integer.parseInt,
Long.parseLong, Byte.parseByte, Short.parseShort, Boolean.valueOf, Double.parseDouble), checked
against the `java` on PATH over a corpus of texts a script may write; where boxmq reads one
otherwise on purpose, DIFFERENCES says why (and docs/file-format.md tells the user)."""

from __future__ import annotations

import struct
from pathlib import Path
from urllib.parse import quote

from tests.unit.store.java import run_java

from boxmq.errors import MalformedName
from boxmq.store.names import decode

_JAVA = """
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;

public class ReadAsJava {
    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
            String hex = line.substring(2);
            byte[] bytes = new byte[hex.length() / 2];
            for (int i = 0; i < bytes.length; i++) {
                bytes[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
            }
            String text = new String(bytes, StandardCharsets.UTF_8);
            String read;
            try {
                switch (line.charAt(0)) {
                    case 'B': read = String.valueOf(Boolean.valueOf(text)); break;
                    case 'Y': read = String.valueOf(Byte.parseByte(text)); break;
                    case 'H': read = String.valueOf(Short.parseShort(text)); break;
                    case 'I': read = String.valueOf(Integer.parseInt(text)); break;
                    case 'L': read = String.valueOf(Long.parseLong(text)); break;
                    case 'D': read = Long.toHexString(
                        Double.doubleToRawLongBits(Double.parseDouble(text))); break;
                    default: throw new IllegalArgumentException(line);
                }
            } catch (NumberFormatException e) {
                read = "ERR";
            }
            System.out.println(read);
        }
    }
}
"""

# Where a text goes: the priority field (P, parseInt), the expiration field (E, parseLong), or
# a property of that type letter.
_JAVA_PARSER = {"P": "I", "E": "L"}

INTEGERS = [
    *("4", "+4", "-4", "0", "-0", "+0", "007", "-007", "0" * 25 + "1", " ", " 4", "4 ", "\t4"),
    *("+", "-", "+-4", "--4", "4_000", "0x10", "1e3", "1.0", "NaN", "Infinity", "Ⅳ", "²"),
    *(
        "٣",
        "١٢",
        "\uff10",
        "४२",
        "\U0001d7d1",
    ),  # Arabic-Indic, fullwidth, Devanagari, one outside the BMP
    *("127", "128", "-128", "-129", "32767", "32768", "-32768", "-32769"),
    *("2147483647", "2147483648", "-2147483648", "-2147483649"),
    *("9223372036854775807", "9223372036854775808", "-9223372036854775808"),
    "99999999999999999999999",
]
BOOLEANS = [
    *("true", "false", "TRUE", "True", "FALSE", "yes", "no", "1", "0", "", " true", "true "),
    *("t", "\uff54\uff52\uff55\uff45", "null"),
]
DOUBLES = [
    *("1.5", "+1.5", "-1.5", " 1.5", "1.5 ", "\t1.5", "1.", ".5", ".", "1e3", "1E3", "1e+3"),
    *("1e-3", "1.5f", "1.5d", "1.5F", "1.5D", "0x1p3", "0X1.8P1", "0x10", "NaN", "+NaN", "-NaN"),
    *("nan", "Infinity", "+Infinity", "-Infinity", "inf", "-inf", "infinity", "INFINITY", ""),
    *("1e400", "1e-400", "٣", "1_0", "00012", "1e", "e3", "+", "-0", "1e99999"),
    *("-0x0p0", "0x.8p1", "0x1.p1", "0xp1", "0x1p", "0x1P3D", "0x1f", " 0x1p3f ", "0x1.8p"),
    *("0x1p-1074", "0x1p-1075", "0x1.8p-1075", "0x1.fffffffffffff8p1023", "-0x1p1024"),
    *("0x1.00000000000008p0", "0x1.000000000000081p0", "0x1p99999999999", "0x1p-99999999999"),
    *("0x1p+3", "0x-1p3", "0x1_0p0", "x1p3", "1p3"),
    *("1e999999", "-1e999999", "1e-999999", "1e0000003", "1.5e+000000000000000000001"),
    *("0" * 40 + "1.5", "1." + "0" * 40 + "1", "12345678901234567890123e-20", "1e2147483648"),
]
CORPUS = [
    *((where, text) for where in "PE" for text in [*INTEGERS, ""]),
    *((kind, text) for kind in "YHIL" for text in INTEGERS),
    *(("B", text) for text in BOOLEANS),
    *(("D", text) for text in DOUBLES),
]

# Every text boxmq reads otherwise than Java, and why. The test fails on a difference not
# listed here, and on one listed that is no longer one.
_EMPTY_FIELD = "an empty field is the default (DropboxMQ's document), not a number"
_NEGATIVE_EXPIRATION = (
    "an expiration is a time since 1970: one before it could not be written back (a release, "
    "a dead letter), and the message is delivered, not dropped as long expired"
)
_PYTHON_SPELLING = "an older boxmq wrote Python's spelling: names on disk read as they did"
DIFFERENCES = {
    ("P", ""): _EMPTY_FIELD,
    ("E", ""): _EMPTY_FIELD,
    **{("E", text): _NEGATIVE_EXPIRATION for text in ("-4", "-007", "-128", "-129", "-32768")},
    **{("E", text): _NEGATIVE_EXPIRATION for text in ("-32769", "-2147483648", "-2147483649")},
    ("E", "-9223372036854775808"): _NEGATIVE_EXPIRATION,
    **{("D", text): _PYTHON_SPELLING for text in ("nan", "inf", "-inf")},
}


def _boxmq_reads(where: str, text: str) -> str:
    """What boxmq reads `text` as, where it goes, spelled as the Java program prints it."""
    escaped = quote(text, safe="").replace(".", "%2E")  # every character as it is
    name = {"P": f"{escaped}.id.B", "E": f"4.id.B.{escaped}"}.get(where)
    try:
        envelope = decode(name or f"4.id.B.....v{where}={escaped}")
    except MalformedName:
        return "ERR"
    if where in "PE":
        return str(envelope.priority if where == "P" else envelope.expiration)
    [prop] = envelope.properties
    if isinstance(prop.value, bool):
        return str(prop.value).lower()
    if isinstance(prop.value, float):
        return format(struct.unpack("<Q", struct.pack("<d", prop.value))[0], "x")
    return str(prop.value)


def _java_reads(tmp_path: Path) -> list[str]:
    lines = [f"{_JAVA_PARSER.get(where, where)} {text.encode().hex()}" for where, text in CORPUS]
    (tmp_path / "corpus.txt").write_text("\n".join(lines) + "\n")
    return run_java(tmp_path, "ReadAsJava", _JAVA, "corpus.txt").splitlines()


def test_every_text_reads_as_java_reads_it_or_its_difference_is_explained(
    tmp_path: Path,
) -> None:
    java = _java_reads(tmp_path)
    assert len(java) == len(CORPUS)
    differences = {
        (where, text): (theirs, ours)
        for (where, text), theirs in zip(CORPUS, java, strict=True)
        if (ours := _boxmq_reads(where, text)) != theirs
    }
    unexplained = {key: read for key, read in differences.items() if key not in DIFFERENCES}
    assert not unexplained, "(java, boxmq) for texts read otherwise than Java reads them"
    assert set(DIFFERENCES) <= set(differences), "listed, yet read as Java reads them"
