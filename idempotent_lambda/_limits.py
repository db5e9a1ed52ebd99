"""Bounded decompression: a small hostile input (or a tampered record) never inflates without end.

A few hundred bytes of gzip or zlib can expand to gigabytes. Everything the library decompresses
goes through `bounded_gunzip` or `bounded_inflate`, which stop as soon as the output passes the
limit and raise `DecompressionLimitError`.

Limits, read from the environment at call time (bytes, a positive integer):

- ``IDEMPOTENCY_MAX_GZIP_BYTES``: the ``powertools_base64_gzip`` JMESPath built-in; default 10 MiB.
- ``IDEMPOTENCY_MAX_STORED_RESULT_BYTES``: a stored result (the zlib form of ``data``, or an
  offloaded S3 object); default 32 MiB, so that a 128 MB function still has room to decode and
  parse a result that large once the library and a boto3 client are loaded.

The output grows `INFLATE_CHUNK_BYTES` at a time: refusing a bomb holds at most the limit plus
one chunk.
"""

from __future__ import annotations

import os
import zlib

from idempotent_lambda.exceptions import IdempotencyConfigError

DEFAULT_MAX_GZIP_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_STORED_RESULT_BYTES = 32 * 1024 * 1024
#: The most one decompression step produces.
INFLATE_CHUNK_BYTES = 256 * 1024


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
    """Decompress ``data`` member by member (gzip allows several), never past ``limit``.

    The pieces are kept apart until the end (a growing buffer would over-allocate past it).
    """
    pieces: list[bytes] = []
    size = 0
    pending = bytes(data)
    while True:
        stream = zlib.decompressobj(wbits)
        tail = pending
        while not stream.eof and size <= limit:
            piece = stream.decompress(tail, min(INFLATE_CHUNK_BYTES, limit - size + 1))
            tail = stream.unconsumed_tail
            if not piece and not tail:
                break  # no input left and nothing more to give: a truncated stream
            pieces.append(piece)
            size += len(piece)
        if size > limit:
            raise DecompressionLimitError(f"data decompresses to more than {limit} bytes")
        if not stream.eof:
            raise zlib.error("incomplete or truncated stream")
        pending = stream.unused_data
        if not (members and pending):
            if pending and not members:
                raise zlib.error("trailing data after the compressed stream")
            return b"".join(pieces)
