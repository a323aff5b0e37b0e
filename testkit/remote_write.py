"""A Prometheus remote-write request body, written by hand: what a forger would send, for the store tests.

Why by hand: the body is a snappy-compressed protobuf ``WriteRequest``, and neither a protobuf runtime nor a
snappy library is a satbench dependency. Both encodings are small where only the writing side is needed:

- protobuf (``prometheus/prompb/remote.proto``, ``types.proto``): ``WriteRequest{repeated TimeSeries
  timeseries = 1}``, ``TimeSeries{repeated Label labels = 1; repeated Sample samples = 2}``, ``Label{string
  name = 1; string value = 2}``, ``Sample{double value = 1; int64 timestamp = 2}`` (milliseconds); labels
  sorted by name, as the receiver expects;
- snappy's block format: the uncompressed length as a varint, then literal elements only (a tag byte whose low
  two bits are 0; lengths over 60 bytes follow the tag in 1 to 4 little-endian bytes). Every decoder reads a
  stream of literals; it is just not compressed.

The tests send the same body with and without credentials: with them it lands (so it is a valid write),
without them it is refused. ``HEADERS`` are the ones the receiver requires.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

__all__ = ["HEADERS", "write_request"]

HEADERS = {
    "Content-Type": "application/x-protobuf",
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _timeseries(labels: Mapping[str, str], samples: Iterable[tuple[float, int]]) -> bytes:
    body = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in sorted(labels.items()))
    for value, stamp_ms in samples:
        sample = _varint(1 << 3 | 1) + struct.pack("<d", value) + _varint(2 << 3 | 0) + _varint(stamp_ms)
        body += _field(2, sample)
    return body


def _snappy_literal(data: bytes) -> bytes:
    out = bytearray(_varint(len(data)))
    chunk = 1 << 16
    for start in range(0, len(data), chunk):
        part = data[start:start + chunk]
        n = len(part) - 1
        if n < 60:
            out.append(n << 2)
        else:
            size = (n.bit_length() + 7) // 8
            out.append((59 + size) << 2)
            out += n.to_bytes(size, "little")
        out += part
    return bytes(out)


def write_request(series: Iterable[tuple[Mapping[str, str], Iterable[tuple[float, int]]]]) -> bytes:
    """The body of one remote write of ``series``: each a label set (``__name__`` among them) and its samples
    ``(value, timestamp in milliseconds)``."""
    return _snappy_literal(b"".join(_field(1, _timeseries(labels, samples)) for labels, samples in series))
