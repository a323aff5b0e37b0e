"""A model's files as the fingerprint names them (``core.fingerprint``): every split of llama.cpp's
``<name>-00001-of-00003.gguf``, sized, told apart at once by a sampled hash, and hashed whole in the
background.

Why two hashes. A multi-GB sha256 takes seconds to minutes, and the session asks for the fingerprint the
moment its walk begins: a model swapped in place with the same size would be compared by name and size
until the full hash lands, and that answer would be "valid" forever. ``sample_sha256`` (sha256 over the
file's size, its first MiB, which holds the GGUF header and the start of its tensor index, 16 evenly spaced
64 KiB blocks of the tensor data and the last 64 KiB: about 2 MiB read) tells two different files of one
size apart, since two models' weights differ everywhere; it is ready in milliseconds. The full ``sha256``
follows and is what the evidence names.

Why the cache key is not (path, size, mtime). ``cp -p``, ``rsync -a`` and image layers keep the mtime of
the file they replace. The key is (real path, device, inode, size, mtime, ctime): a replacement by rename
(rsync, an image layer, most deploy tools) has another inode, and one written in place (``cp -p`` over the
old file) another ctime, which no user call sets back.

What is read, and when. Only files under a configured models root, or among the runtime's own open and
mapped files (``permitted``; the exporter passes ``/proc/PID/fd`` and ``/proc/PID/maps``): a hostile
runtime's ``model_path`` must not make the exporter stat or hash any readable file and publish the result.
A split count above :data:`MAX_SPLITS` is refused rather than statted per scrape (``-00001-of-99999``).
Hashing runs on one background thread (:class:`ModelHasher`) at the lowest CPU and I/O priority the OS
gives a thread (``setpriority`` nice 19, ``ioprio_set`` idle class on Linux), samples before full hashes,
and pauses while its ``busy`` gate says a measurement may be running (the exporter closes it while the
runtime has a busy slot): a hash must not compete with the c=1 baseline it is the fingerprint of.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import os
import platform
import queue
import re
import stat
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MAX_SPLITS", "FileKey", "ModelHasher", "file_key", "model_file_facts", "permitted",
           "sample_sha256", "split_paths"]

MAX_SPLITS = 1024  # a 1 TB model in 1 GB splits; more is a hostile name, not a model
_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
_HASH_CHUNK = 4 << 20
_HEAD = 1 << 20
_BLOCK = 64 << 10
_BLOCKS = 16

FileKey = tuple[str, int, int, int, int, int]  # real path, device, inode, size, mtime_ns, ctime_ns


# -- model files ------------------------------------------------------------------------------------------


def split_paths(path: str | os.PathLike[str]) -> list[Path]:
    """Every file of a model: the file itself, or each split of llama.cpp's ``<name>-00001-of-00003.gguf``
    (whichever split the path names). ``ValueError`` for a split count above :data:`MAX_SPLITS`."""
    p = Path(path)
    m = _SPLIT.match(p.name)
    if m is None:
        return [p]
    count = int(m["count"])
    if count < 1 or not 1 <= int(m["index"]) <= count:
        return [p]
    if count > MAX_SPLITS:
        raise ValueError(f"{p.name} names {count} splits, more than the {MAX_SPLITS} a model is read with")
    return [p.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def file_key(path: Path) -> tuple[FileKey, int]:
    """The cache key of ``path`` (module docstring) and its size; raises ``OSError`` like ``os.stat``."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise IsADirectoryError(21, "not a regular file", str(path))
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), st.st_size


def permitted(candidate: Path, roots: Sequence[Path], open_files: Collection[str]) -> str | None:
    """None when ``candidate`` may be read: its real path lies under one of ``roots`` or is one of the
    runtime's own open files (``open_files``, real paths as the runtime sees them); else why not."""
    real = os.path.realpath(candidate)
    if real in open_files:
        return None
    for root in roots:
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
            return None
    where = ", ".join(map(str, roots)) or "none configured"
    return (f"{candidate} is neither under a models root ({where}) nor a file the runtime has open: "
            "it is not read")


def _read_blocks(path: Path, size: int, pause: Callable[[], None]) -> bytes:
    """The bytes ``sample_sha256`` covers, in order."""
    offsets = [0]
    if size > _HEAD + 2 * _BLOCK:
        span = size - _HEAD - _BLOCK
        offsets += [_HEAD + span * i // _BLOCKS for i in range(_BLOCKS)] + [size - _BLOCK]
    out = bytearray()
    with path.open("rb") as f:
        for i, offset in enumerate(offsets):
            pause()
            f.seek(offset)
            out += f.read(_HEAD if i == 0 else _BLOCK)
    return bytes(out)


def sample_sha256(path: Path, pause: Callable[[], None] = lambda: None) -> str:
    """sha256 over the file's size and its sampled blocks (module docstring); a file of at most 1 MiB and
    two blocks is read whole."""
    size = path.stat().st_size
    h = hashlib.sha256(f"satbench-sample-v1:{size}:".encode())
    h.update(_read_blocks(path, size, pause))
    return h.hexdigest()


def _hash_file(path: Path, pause: Callable[[], None] = lambda: None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while True:
            pause()
            chunk = f.read(_HASH_CHUNK)
            if not chunk:
                break
            h.update(chunk)  # hashlib releases the GIL on large buffers: a scrape thread keeps running
    return h.hexdigest()


# -- the background hasher -------------------------------------------------------------------------------

_Job = tuple[str, FileKey, Path]  # kind ("sample" | "sha256"), key, path
_PRIORITY = {"sample": 0, "sha256": 1}
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}  # syscall numbers (linux/unistd.h)
_IOPRIO_CLASS_IDLE = 3


def _lower_priority() -> None:
    """This thread at nice 19 and, on Linux, in the idle I/O class: it reads only when nothing else does."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # per thread on Linux
    number = _IOPRIO_SET.get(platform.machine())
    if number is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(number, 1, 0, _IOPRIO_CLASS_IDLE << 13)  # IOPRIO_WHO_PROCESS, this thread
    except (OSError, AttributeError):
        pass


class _Cache:
    """Digests by (kind, key), process-wide: every hasher of one process shares them."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, FileKey], str] = {}
        self._lock = threading.Lock()

    def get(self, kind: str, key: FileKey) -> str | None:
        with self._lock:
            return self._done.get((kind, key))

    def put(self, kind: str, key: FileKey, sha: str) -> None:
        with self._lock:
            self._done[(kind, key)] = sha


_CACHE = _Cache()


class ModelHasher:
    """Hashes files on one low-priority background thread, so that a scrape never waits for a read.

    :meth:`sample` and :meth:`sha256` answer at once: the digest when done (cached by :func:`file_key`), else
    ``None`` and a reason (``hashing``, ``waiting: the runtime is busy``, or why it failed) and the file is
    queued, samples first. ``busy`` (a callable) pauses reading while it returns True. ``hashed`` counts the
    files read whole, so a test can prove a file is hashed once.
    """

    def __init__(self, cache: _Cache | None = None, busy: Callable[[], bool] | None = None,
                 poll_s: float = 0.2) -> None:
        self._cache = cache if cache is not None else _Cache()
        self._busy = busy or (lambda: False)
        self._poll_s = poll_s
        self._queue: queue.PriorityQueue[tuple[int, int, _Job | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._pending: set[tuple[str, FileKey]] = set()
        self._failed: dict[tuple[str, FileKey], str] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.hashed = 0
        self.waited = False  # some read was held back while busy

    def set_busy(self, busy: Callable[[], bool]) -> None:
        self._busy = busy

    def sample(self, path: Path, key: FileKey) -> tuple[str | None, str | None]:
        return self._ask("sample", path, key)

    def sha256(self, path: Path, key: FileKey) -> tuple[str | None, str | None]:
        return self._ask("sha256", path, key)

    def _ask(self, kind: str, path: Path, key: FileKey) -> tuple[str | None, str | None]:
        done = self._cache.get(kind, key)
        if done is not None:
            return done, None
        with self._lock:
            done = self._cache.get(kind, key)  # again under the lock: a digest put since the first look is
            if done is not None:  # not queued again (the hasher puts it and drops the pending job under this lock)
                return done, None
            if (kind, key) in self._failed:
                return None, self._failed[(kind, key)]
            if self._closed.is_set():
                return None, "not hashed (the exporter is stopping)"
            if (kind, key) not in self._pending:
                self._pending.add((kind, key))
                self._queue.put((_PRIORITY[kind], next(self._order), (kind, key, path)))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="model-hasher", daemon=True)
                    self._thread.start()
        return None, "waiting: the runtime is busy (no hashing during a measurement)" if self._busy() else "hashing"

    def _pause(self) -> None:
        while self._busy() and not self._closed.is_set():
            self.waited = True
            self._closed.wait(self._poll_s)
        if self._closed.is_set():
            raise InterruptedError("the hasher is closing")

    def _run(self) -> None:
        _lower_priority()
        while True:
            _, _, job = self._queue.get()
            if job is None:
                return
            kind, key, path = job
            error: str | None = None
            sha = ""
            try:
                sha = sample_sha256(path, self._pause) if kind == "sample" else _hash_file(path, self._pause)
                after, _ = file_key(path)
                if after != key:
                    error = "the file changed while it was hashed"
            except InterruptedError:
                return
            except OSError as exc:
                error = f"cannot read {path}: {exc.strerror or exc}"
            with self._lock:
                if kind == "sha256":
                    self.hashed += 1
                if error is None:
                    self._cache.put(kind, key, sha)
                elif error.startswith("cannot read"):
                    self._failed[(kind, key)] = error
                self._pending.discard((kind, key))  # a changed file is queued again under its new key
                self._idle.notify_all()

    def wait(self, timeout_s: float = 30.0, *, samples_only: bool = False) -> bool:
        """Until nothing (no sample, with ``samples_only``) is queued or being hashed (True), or ``timeout_s``
        passes (False)."""
        def done() -> bool:
            return not any(kind == "sample" for kind, _ in self._pending) if samples_only else not self._pending

        with self._lock:
            return self._idle.wait_for(done, timeout=timeout_s)

    def close(self) -> None:
        """Stops at the next block read (a file half hashed is dropped, not waited for)."""
        self._closed.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._queue.put((-1, -1, None))
            thread.join(timeout=2.0)


def model_file_facts(path: str | os.PathLike[str], *, hasher: ModelHasher | None = None) -> list[dict[str, Any]]:
    """``[{"name", "size", "sample_sha256", "sha256"}]`` of the model at ``path`` and its splits, in order.

    Without ``hasher`` each file is hashed here (once per :func:`file_key`, process-wide). With one, a digest
    not ready yet is ``None`` and ``unknown`` maps ``sample_sha256``/``sha256`` to the reason, which
    :func:`core.fingerprint.node_fingerprint` moves into the fingerprint's ``unknown``. Raises ``OSError``
    (a split missing, no permission) like ``os.stat``, ``ValueError`` for too many splits.
    """
    files = split_paths(path)
    keyed = [(file, *file_key(file)) for file in files]  # every split stats before anything is hashed
    out: list[dict[str, Any]] = []
    for file, key, size in keyed:
        entry: dict[str, Any] = {"name": file.name, "size": size}
        unknown: dict[str, str] = {}
        for kind, compute in (("sample_sha256", sample_sha256), ("sha256", _hash_file)):
            cache_kind = "sample" if kind == "sample_sha256" else "sha256"
            if hasher is None:
                sha = _CACHE.get(cache_kind, key)
                if sha is None:
                    sha = compute(file)
                    _CACHE.put(cache_kind, key, sha)
                reason = None
            else:
                sha, reason = hasher.sample(file, key) if cache_kind == "sample" else hasher.sha256(file, key)
            entry[kind] = sha
            if sha is None:
                unknown[kind] = reason or "not hashed"
        if unknown:
            entry["unknown"] = unknown
        out.append(entry)
    return out
