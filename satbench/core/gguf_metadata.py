"""The metadata of a GGUF file (its header's key/value pairs), read without the ``gguf`` package.

Why here and by hand: the memory a llama.cpp candidate needs follows from a handful of keys (the block count,
the KV heads, the head sizes, the trained context), and the tune must read them before it starts anything.
The ``gguf`` package is only a dev/llamacpp extra and maps the whole file with numpy; the header is a short,
stable format (``ggml/docs/gguf.md``, versions 1 to 3), so it is read here with the standard library alone,
and ``core`` (which imports nothing of the repository) lets every floor use it.

Layout (little-endian; a big-endian file is told by its version word and read as such)::

    "GGUF"  u32 version  (u32 | u64) tensor_count  (u32 | u64) kv_count   -- u32 counts in version 1
    kv_count x { string key, u32 value_type, value }
    string = (u32 | u64) length, UTF-8 bytes;  array = u32 element type, (u32 | u64) count, elements

Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64.
Arrays of up to ``ARRAY_LIMIT`` elements are kept (per-layer KV head counts are such arrays); longer ones
(a tokenizer's vocabulary) are skipped and kept as their length, so a 150k-token vocabulary costs a pass
over its strings, not a list of them. Tensor descriptions after the pairs are not read. A file that is not a
GGUF, is cut short, or says something impossible raises ``GgufError`` with a one-line reason.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["ARRAY_LIMIT", "GgufError", "GgufMetadata", "SkippedArray", "read_gguf_metadata"]

ARRAY_LIMIT = 4096
_MAGIC = b"GGUF"
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_STRING = 1 << 30


class GgufError(ValueError):
    """The file is not a GGUF this reader understands; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class SkippedArray:
    """An array longer than ``ARRAY_LIMIT``: its element type and length, not its elements."""

    element_type: int
    length: int


@dataclass(frozen=True, slots=True)
class GgufMetadata:
    """A GGUF header: its version, tensor count and key/value pairs (``values``)."""

    version: int
    tensor_count: int
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str | None:
        arch = self.values.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_value(self, name: str) -> Any:
        """``<architecture>.<name>`` (e.g. ``block_count``), or None where the file does not say it."""
        arch = self.architecture
        return None if arch is None else self.values.get(f"{arch}.{name}")


class _Reader:
    def __init__(self, stream: IO[bytes], path: str, endian: str, wide: bool) -> None:
        self.stream, self.path, self.endian, self.wide = stream, path, endian, wide

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) != n:
            raise GgufError(f"{self.path}: GGUF header cut short")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(self.endian + fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self) -> int:
        return int(self.unpack("Q" if self.wide else "I"))

    def string(self) -> str:
        n = self.count()
        if n > _MAX_STRING:
            raise GgufError(f"{self.path}: a GGUF string claims {n} bytes")
        return self.take(n).decode("utf-8", errors="replace")

    def skip_strings(self, n: int) -> None:
        for _ in range(n):
            length = self.count()
            if length > _MAX_STRING:
                raise GgufError(f"{self.path}: a GGUF string claims {length} bytes")
            self.stream.seek(length, os.SEEK_CUR)

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element = int(self.unpack("I"))
            n = self.count()
            if element == _ARRAY:
                raise GgufError(f"{self.path}: nested GGUF arrays are not read")
            if element not in _SCALARS and element != _STRING:
                raise GgufError(f"{self.path}: unknown GGUF array element type {element}")
            if n > ARRAY_LIMIT:
                if element == _STRING:
                    self.skip_strings(n)
                else:
                    self.stream.seek(n * struct.calcsize(_SCALARS[element]), os.SEEK_CUR)
                return SkippedArray(element, n)
            return [self.value(element) for _ in range(n)]
        raise GgufError(f"{self.path}: unknown GGUF value type {kind}")


def read_gguf_metadata(path: str | os.PathLike[str]) -> GgufMetadata:
    """The header of the GGUF at ``path`` (module docstring); ``GgufError`` or ``OSError`` where it cannot be."""
    name = os.fspath(path)
    with open(name, "rb") as raw:
        if raw.read(4) != _MAGIC:
            raise GgufError(f"{name}: not a GGUF file (no GGUF magic)")
        word = raw.read(4)
        if len(word) != 4:
            raise GgufError(f"{name}: GGUF header cut short")
        endian = "<"
        version = struct.unpack("<I", word)[0]
        if version > 0xFFFF:  # a big-endian file reads its small version as a huge little-endian word
            endian, version = ">", struct.unpack(">I", word)[0]
        if not 1 <= version <= 3:
            raise GgufError(f"{name}: GGUF version {version} is not one this reader knows (1 to 3)")
        reader = _Reader(raw, name, endian, wide=version >= 2)
        tensors, pairs = reader.count(), reader.count()
        values: dict[str, Any] = {}
        for _ in range(pairs):
            key = reader.string()
            values[key] = reader.value(int(reader.unpack("I")))
    return GgufMetadata(version=version, tensor_count=tensors, values=values)
