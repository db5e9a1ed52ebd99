"""Bounded decompression: a small hostile input (or a tampered record) never inflates without end.

A few hundred bytes of gzip or zlib can expand to gigabytes. Everything the library decompresses
goes through `bounded_gunzip` or `bounded_inflate`, which stop as soon as the output passes the
limit and raise `DecompressionLimitError`.

Limits, read from the environment at call time (bytes, a positive integer):

- ``IDEMPOTENCY_MAX_GZIP_BYTES``: the ``powertools_base64_gzip`` JMESPath built-in; default 10 MiB.
- ``IDEMPOTENCY_MAX_STORED_RESULT_BYTES``: a stored result (the zlib form of ``data``, or an
  offloaded S3 object); default 64 MiB.
"""

from __future__ import annotations

import os
import zlib

from idempotent_lambda.exceptions import IdempotencyConfigError

DEFAULT_MAX_GZIP_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_STORED_RESULT_BYTES = 64 * 1024 * 1024


class DecompressionLimitError(zlib.error):
    """The data decompresses to more than the limit allows; nothing past the limit was produced.

    A `zlib.error`, so code that already treats undecompressable data as corrupt treats this too.
    """


def bounded_gunzip(data: bytes, limit: int | None = None) -> bytes:
    """Gunzip ``data``; `DecompressionLimitError` past ``limit`` (default: the gzip limit)."""
    cap = gzip_limit() if limit is None else limit
    return _inflate(data, cap, wbits=zlib.MAX_WBITS | 16, members=True)


def bounded_inflate(data: bytes, limit: int | None = None) -> bytes:
    """Inflate zlib ``data``; `DecompressionLimitError` past ``limit`` (default: the stored one)."""
    cap = stored_result_limit() if limit is None else limit
    return _inflate(data, cap, wbits=zlib.MAX_WBITS, members=False)


def gzip_limit() -> int:
    """Return the ``powertools_base64_gzip`` limit (``IDEMPOTENCY_MAX_GZIP_BYTES``)."""
    return _limit("IDEMPOTENCY_MAX_GZIP_BYTES", DEFAULT_MAX_GZIP_BYTES)


def stored_result_limit() -> int:
    """Return the stored-result limit (``IDEMPOTENCY_MAX_STORED_RESULT_BYTES``)."""
    return _limit("IDEMPOTENCY_MAX_STORED_RESULT_BYTES", DEFAULT_MAX_STORED_RESULT_BYTES)


def _limit(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise IdempotencyConfigError(f"{name} must be a positive number of bytes")
    return int(text)


def _inflate(data: bytes, limit: int, *, wbits: int, members: bool) -> bytes:
    """Decompress ``data`` member by member (gzip allows several), never past ``limit``."""
    out = bytearray()
    pending = bytes(data)
    while True:
        stream = zlib.decompressobj(wbits)
        chunk = stream.decompress(pending, limit - len(out) + 1)
        out += chunk
        while len(out) <= limit and stream.unconsumed_tail:
            out += stream.decompress(stream.unconsumed_tail, limit - len(out) + 1)
        if len(out) > limit:
            raise DecompressionLimitError(f"data decompresses to more than {limit} bytes")
        if not stream.eof:
            raise zlib.error("incomplete or truncated stream")
        pending = stream.unused_data
        if not (members and pending):
            if pending and not members:
                raise zlib.error("trailing data after the compressed stream")
            return bytes(out)
