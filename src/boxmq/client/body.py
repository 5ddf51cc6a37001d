"""A message body as the API takes it: bytes (or a bytearray, a memoryview), or text."""

from __future__ import annotations

from boxmq.errors import InvalidArgument

__all__ = ["body_bytes"]


def body_bytes(body: object) -> bytes:
    """The bytes to store: `body` itself, or a str encoded as UTF-8. Anything else is refused,
    an int above all (`bytes(5)` would store five NUL bytes)."""
    if isinstance(body, str):
        try:
            return body.encode()
        except UnicodeEncodeError as error:  # a lone surrogate: not text UTF-8 can hold
            raise InvalidArgument(
                f"a str body must be text UTF-8 can encode: {error.reason} at index {error.start}"
            ) from None
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise InvalidArgument(f"a message body is bytes or str, not {type(body).__name__}")
