"""The TLS side of a listener: an `ssl.SSLContext` from PEM files, or an error saying what to fix.

TLS 1.2 is the floor (MQTT 5.0 §5.4.9 leaves the version to the deployment; 1.0/1.1 are
deprecated by RFC 8996). With a CA file, clients must show a certificate signed by it;
`require_client_cert=False` with a CA asks for one but lets a client without one in.
Every problem is checked here, at start, so a broker never listens with a half-made context.
A certificate out of its dates (expired, or not valid yet) is logged as a warning, not
refused: the broker serves clients that do not check it, and its operator may be renewing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import ssl
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from boxmq.errors import InvalidArgument

__all__ = ["TlsFileError", "certificate_dates", "server_context"]

log = logging.getLogger("boxmq.mqtt")

_PEM_BEGIN: Final = "-----BEGIN CERTIFICATE-----"
_PEM_KEY_BEGIN: Final = "-----BEGIN PRIVATE KEY-----"


class TlsFileError(InvalidArgument):
    """A TLS file that cannot serve; `setting` names the argument at fault: "cert", "key"
    or "ca" (a config file reports it under that key)."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


@contextlib.contextmanager
def _reading(path: Path, what: str, setting: str) -> Iterator[None]:
    """An error of the system while reading a TLS file (a name too long, a failing disk) as
    one that names the file and its setting: OpenSSL's says neither ("Input/output error")."""
    try:
        yield
    except ssl.SSLError:
        raise  # OpenSSL's word on what the file holds, which the caller puts in its own
    except OSError as error:
        raise TlsFileError(
            setting, f"cannot read TLS {what} file {path}: {error.strerror or error}"
        ) from None


def _readable(path: Path, what: str, setting: str) -> Path:
    if not path.is_file():
        # A folder (a `cert` naming the tls/ folder itself) or a device is there: "does not
        # exist" would send the operator looking for a file that is plainly in its place.
        problem = (
            "is a folder, not a file"
            if path.is_dir()
            else "is not a regular file"
            if path.exists()
            else "does not exist"
        )
        raise TlsFileError(setting, f"TLS {what} file {path} {problem}: fix `{setting}`")
    if not os.access(path, os.R_OK):
        raise TlsFileError(setting, f"TLS {what} file {path} is not readable by this user")
    return path


def _refuse_encrypted_key() -> str:
    # Never prompt on a terminal: the broker may run under a service manager.
    raise TlsFileError("key", "the TLS key is encrypted with a passphrase: give an unencrypted key")


def _check_certificate(path: Path) -> None:
    """OpenSSL's own errors do not say which file is wrong; a scratch context does."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=path)
    except ssl.SSLError:
        raise TlsFileError("cert", _no_pem_certificate(path, "certificate")) from None


def _no_pem_certificate(path: Path, what: str) -> str:
    """Why `path` gives no certificate. One in DER, the binary form a Windows `.cer` export or
    a `.der` holds, is told so with the openssl line that makes the PEM file read here:
    "holds no PEM certificate" left its operator to guess that it was one all the same."""
    if _is_der_certificate(path):
        return (
            f"TLS {what} file {path} holds a certificate in DER (binary) form, where PEM is "
            f"read: {_converted(path, 'x509')}"
        )
    return f"TLS {what} file {path} holds no PEM certificate (expected a {_PEM_BEGIN} block)"


def _converted(path: Path, command: str) -> str:
    """The openssl line that writes `path`'s DER as PEM beside it (`command`: x509 for a
    certificate, pkey for a key), as an error says it."""
    pem = path.with_suffix(".pem")
    # A name already taken is no output: a Windows export's server.cer and server.key are told
    # in turn, and the key's line, given server.pem once the certificate was converted there,
    # wrote the key over that certificate.
    if pem == path or pem.exists():
        pem = Path(f"{path}.pem")
    return (
        f"convert it with `openssl {command} -inform der -in {shlex.quote(str(path))} "
        f"-out {shlex.quote(str(pem))}` and give the new file"
    )


def _is_der_certificate(path: Path) -> bool:
    """Whether `path` holds one certificate in DER, as OpenSSL reads it from bytes."""
    data = path.read_bytes()
    if not data.startswith(b"\x30"):  # a SEQUENCE, as every certificate begins
        return False
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cadata=data)
    except (ssl.SSLError, ValueError):
        return False
    return True


def certificate_dates(path: Path) -> tuple[datetime, datetime] | None:
    """The first certificate's notBefore and notAfter in `path` (RFC 5280 §4.1.2.5), in UTC,
    read from its DER; None if they cannot be read (the handshake is the judge anyway)."""
    text = path.read_text(encoding="ascii", errors="replace")
    begin = text.find(_PEM_BEGIN)
    end = text.find("-----END CERTIFICATE-----", begin)
    if begin < 0 or end < 0:
        return None
    try:
        der = ssl.PEM_cert_to_DER_cert(text[begin : end + len("-----END CERTIFICATE-----")])
        _, at, _ = _der_item(der, 0)  # Certificate ::= SEQUENCE { tbsCertificate, ... }
        tag, at, _ = _der_item(der, at)  # TBSCertificate ::= SEQUENCE
        tag, start, after = _der_item(der, at)
        if tag == 0xA0:  # [0] version, absent in a v1 certificate
            tag, start, after = _der_item(der, after)  # then serialNumber
        for _ in range(2):  # signature, issuer
            tag, start, after = _der_item(der, after)
        _, first, _ = _der_item(der, after)  # validity ::= SEQUENCE { notBefore, notAfter }
        tag, start, after = _der_item(der, first)
        not_before = _der_time(tag, der[start:after])
        tag, start, after = _der_item(der, after)
        return not_before, _der_time(tag, der[start:after])
    except (ValueError, IndexError):
        return None


def _der_item(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER item at `at`: its tag, where its content starts and where it ends."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:  # the long form: the next (length & 0x7F) bytes hold the length
        count = length & 0x7F
        length = int.from_bytes(der[at : at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("a DER item runs past the end")
    return tag, at, at + length


def _der_time(tag: int, content: bytes) -> datetime:
    """A UTCTime (YYMMDDHHMMSSZ, 19YY from 50) or GeneralizedTime (YYYYMMDDHHMMSSZ)."""
    text = content.decode("ascii")
    if tag == 0x17:
        century = "19" if int(text[:2]) >= 50 else "20"  # RFC 5280 §4.1.2.5.1
        text = century + text
    elif tag != 0x18:
        raise ValueError(f"tag {tag:#x} is no time")
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC)


def _warn_if_out_of_date(path: Path, now: float) -> None:
    dates = certificate_dates(path)
    if dates is None:
        return
    not_before, not_after = dates
    if now > not_after.timestamp():
        log.warning(
            "TLS certificate %s expired on %s: clients that check it refuse to connect (renew it)",
            path,
            f"{not_after:%Y-%m-%d %H:%M:%S} UTC",
        )
    elif now < not_before.timestamp():
        log.warning(
            "TLS certificate %s is not valid before %s: clients that check it refuse to "
            "connect until then (is this machine's clock right?)",
            path,
            f"{not_before:%Y-%m-%d %H:%M:%S} UTC",
        )


def _check_key(path: Path, setting: str) -> None:
    text = path.read_text(encoding="ascii", errors="replace")
    if "ENCRYPTED" in text:
        raise TlsFileError(
            setting,
            f"TLS key {path} is encrypted with a passphrase: the broker starts unattended, "
            "so give it an unencrypted key (openssl pkey -in KEY -out NEW_KEY)",
        )
    if "PRIVATE KEY-----" not in text and setting == "cert":
        # No `key` given: the key was looked for in the certificate's file, which the
        # operator never named as a key file ("TLS key file server.crt" would puzzle).
        raise TlsFileError(
            "key",
            f"no TLS key: set `key` to the file of the certificate's private key "
            f"({path} holds none, where a key given with its certificate would be)",
        )
    if "PRIVATE KEY-----" not in text:
        raise TlsFileError(setting, _no_pem_key(path))


def _no_pem_key(path: Path) -> str:
    """Why `path` gives no private key. One that looks like a key in DER (binary: a SEQUENCE
    that opens with a version number, as PKCS#1, PKCS#8 and SEC 1 keys do) is told the
    openssl line that makes the PEM file read here, as a DER certificate is."""
    data = path.read_bytes()
    if _opens_as_der_key(data):
        return (
            f"TLS key file {path} holds no PEM private key, and looks like one in DER (binary) "
            f"form: {_converted(path, 'pkey')}"
        )
    return f"TLS key file {path} holds no PEM private key (expected a {_PEM_KEY_BEGIN} block)"


def _opens_as_der_key(data: bytes) -> bool:
    """Whether `data` opens as a DER private key: SEQUENCE, its length (short or long form),
    then INTEGER 0 or 1 (the key's version)."""
    if len(data) < 8 or data[0] != 0x30:
        return False
    length_bytes = data[1] - 0x80 if data[1] > 0x80 else 0
    version = data[2 + length_bytes : 5 + length_bytes]
    return version in (b"\x02\x01\x00", b"\x02\x01\x01")


def server_context(
    cert: str | os.PathLike[str],
    key: str | os.PathLike[str] | None = None,
    *,
    ca: str | os.PathLike[str] | None = None,
    require_client_cert: bool = True,
) -> ssl.SSLContext:
    """A server context for `cert` (PEM, the leaf first, then its chain) and its private `key`
    (PEM, unencrypted; None when it is in the cert file). `ca`: PEM CA certificates that sign
    client certificates."""
    cert_path = Path(cert)
    with _reading(cert_path, "certificate", "cert"):
        _readable(cert_path, "certificate", "cert")
        _check_certificate(cert_path)
        _warn_if_out_of_date(cert_path, time.time())
    key_path = Path(key) if key is not None else cert_path
    key_setting = "key" if key is not None else "cert"  # None: the key is in the cert file
    with _reading(key_path, "key", key_setting):
        _readable(key_path, "key", key_setting)
        _check_key(key_path, key_setting)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path, password=_refuse_encrypted_key)
    except ssl.SSLError as error:
        if error.reason is None:
            # OpenSSL's "PEM lib", with no reason: the key's block is there (_check_key) but
            # does not decode (a line damaged by a copy, a truncated file), which is no
            # mismatch: the operator would look for another key when this one needs a copy.
            raise TlsFileError(
                key_setting,
                f"TLS key file {key_path} holds a private key that cannot be read "
                "(damaged or cut short?): copy it again",
            ) from None
        # KEY_VALUES_MISMATCH (same key type) or NO_CERTIFICATE_ASSIGNED (another type).
        raise TlsFileError(
            key_setting,
            f"TLS key {key_path} does not belong to the certificate {cert_path} "
            f"(OpenSSL: {error.reason or error})",
        ) from None
    if ca is not None:
        ca_path = Path(ca)
        try:
            with _reading(ca_path, "CA", "ca"):
                _readable(ca_path, "CA", "ca")
                context.load_verify_locations(cafile=ca_path)
        except ssl.SSLError:
            with _reading(ca_path, "CA", "ca"):
                problem = _no_pem_certificate(ca_path, "CA")
            raise TlsFileError("ca", problem) from None
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context
