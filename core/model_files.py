"""A model's files as the fingerprint names them (``core.fingerprint``): every split of llama.cpp's
``<name>-00001-of-00003.gguf``, sized, and hashed once per (path, size, mtime).

Hashing a multi-GB file takes seconds, so the exporter does it on a background thread (``ModelHasher``):
until it is done the sha256 is ``None`` with reason ``hashing``. This is the only module of the fingerprint
that reads files.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
from pathlib import Path
from typing import Any

__all__ = ["ModelHasher", "model_file_facts", "split_paths"]

_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
_HASH_CHUNK = 8 << 20


# -- model files ------------------------------------------------------------------------------------------


def split_paths(path: str | os.PathLike[str]) -> list[Path]:
    """Every file of a model: the file itself, or each split of llama.cpp's ``<name>-00001-of-00003.gguf``
    (whichever split the path names)."""
    p = Path(path)
    m = _SPLIT.match(p.name)
    if m is None:
        return [p]
    count = int(m["count"])
    if count < 1 or not 1 <= int(m["index"]) <= count:
        return [p]
    return [p.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)  # hashlib releases the GIL on large buffers: a scrape thread keeps running
    return h.hexdigest()


_Key = tuple[str, int, int]


class _HashCache:
    """sha256 by (real path, size, mtime_ns): a file rewritten in place gets a new key."""

    def __init__(self) -> None:
        self._done: dict[_Key, str] = {}
        self._lock = threading.Lock()

    def get(self, key: _Key) -> str | None:
        with self._lock:
            return self._done.get(key)

    def put(self, key: _Key, sha: str) -> None:
        with self._lock:
            self._done[key] = sha


_CACHE = _HashCache()


def _key(path: Path) -> tuple[_Key, int]:
    st = path.stat()
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns), st.st_size


class ModelHasher:
    """Hashes model files on one background thread, so that a scrape never waits for a multi-GB read.

    :meth:`sha256` answers at once: the digest when done (cached by path, size and mtime), else ``None``
    and a reason (``hashing``, or why it failed) and the file is queued. ``hashed`` counts the files
    actually read, so a test can prove a file is hashed once.
    """

    def __init__(self, cache: _HashCache | None = None) -> None:
        self._cache = cache if cache is not None else _HashCache()
        self._queue: queue.Queue[tuple[_Key, Path] | None] = queue.Queue()
        self._pending: set[_Key] = set()
        self._failed: dict[_Key, str] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.hashed = 0

    def sha256(self, path: Path, key: _Key) -> tuple[str | None, str | None]:
        done = self._cache.get(key)
        if done is not None:
            return done, None
        with self._lock:
            if key in self._failed:
                return None, self._failed[key]
            if self._closed:
                return None, "not hashed (the exporter is stopping)"
            if key not in self._pending:
                self._pending.add(key)
                self._queue.put((key, path))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="model-hasher", daemon=True)
                    self._thread.start()
        return None, "hashing"

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            key, path = item
            error: str | None = None
            try:
                sha = _hash_file(path)
                after, _ = _key(path)
                if after != key:
                    error = "the file changed while it was hashed"
            except OSError as exc:
                error = f"cannot read {path}: {exc.strerror or exc}"
            with self._lock:
                self.hashed += 1
                if error is None:
                    self._cache.put(key, sha)
                elif error.startswith("cannot read"):
                    self._failed[key] = error
                self._pending.discard(key)  # a changed file is queued again under its new key
                self._idle.notify_all()

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Until nothing is queued or being hashed (True), or ``timeout_s`` passes (False)."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending, timeout=timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=1.0)  # a file half hashed is left to the daemon thread


def model_file_facts(path: str | os.PathLike[str], *, hasher: ModelHasher | None = None) -> list[dict[str, Any]]:
    """``[{"name", "size", "sha256"}]`` of the model at ``path`` and its splits, in split order.

    Without ``hasher`` each file is hashed here (once per path, size and mtime, process-wide). With one,
    an entry not hashed yet has ``sha256`` None and ``unknown`` giving the reason (``hashing``), which
    :func:`node_fingerprint` moves into the fingerprint's ``unknown``. Raises ``OSError`` (a split missing,
    no permission) like ``os.stat``.
    """
    files = split_paths(path)
    keyed = [(file, *_key(file)) for file in files]  # every split stats before anything is hashed
    out: list[dict[str, Any]] = []
    for file, key, size in keyed:
        entry: dict[str, Any] = {"name": file.name, "size": size}
        if hasher is None:
            sha = _CACHE.get(key)
            if sha is None:
                sha = _hash_file(file)
                _CACHE.put(key, sha)
            entry["sha256"] = sha
        else:
            sha, reason = hasher.sha256(file, key)
            entry["sha256"] = sha
            if sha is None:
                entry["unknown"] = reason or "not hashed"
        out.append(entry)
    return out
