"""core.model_files: splits and their bound, the facts of a split model, the sampled hash, a cache an in-place
replacement cannot fool, the hasher's priority, its pause while the runtime is busy, and what it may read."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from satbench.core import model_files
from satbench.core.model_files import MAX_SPLITS, ModelHasher, model_file_facts, sample_sha256, split_paths
from testkit.fingerprints import full

# -- model files ------------------------------------------------------------------------------------------


def test_split_detection_and_its_bound() -> None:
    assert split_paths("/m/model.gguf") == [Path("/m/model.gguf")]
    names = [p.name for p in split_paths("/m/qwen-q4-00002-of-00003.gguf")]
    assert names == ["qwen-q4-00001-of-00003.gguf", "qwen-q4-00002-of-00003.gguf", "qwen-q4-00003-of-00003.gguf"]
    assert split_paths("/m/x-00004-of-00003.gguf") == [Path("/m/x-00004-of-00003.gguf")]  # not a split set
    assert len(split_paths(f"/m/x-00001-of-{MAX_SPLITS:05d}.gguf")) == MAX_SPLITS
    with pytest.raises(ValueError, match="99999 splits"):
        split_paths("/m/x-00001-of-99999.gguf")  # never 99,999 stats per scrape


def test_model_file_facts_of_splits(tmp_path: Path) -> None:
    datas = [b"first split", b"second", b"third and last"]
    for i, data in enumerate(datas, 1):
        (tmp_path / f"m-{i:05d}-of-00003.gguf").write_bytes(data)
    facts = model_file_facts(tmp_path / "m-00001-of-00003.gguf")
    assert facts == [{"name": f"m-{i:05d}-of-00003.gguf", "size": len(d),
                      "sample_sha256": sample_sha256(tmp_path / f"m-{i:05d}-of-00003.gguf"),
                      "sha256": hashlib.sha256(d).hexdigest()} for i, d in enumerate(datas, 1)]
    (tmp_path / "m-00002-of-00003.gguf").unlink()
    with pytest.raises(FileNotFoundError):
        model_file_facts(tmp_path / "m-00001-of-00003.gguf")


def test_the_sampled_hash_tells_two_files_of_one_size_apart_reading_a_little(tmp_path: Path) -> None:
    size = 64 << 20
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    with a.open("wb") as f:
        f.truncate(size)
    with b.open("wb") as f:
        f.truncate(size)
        f.seek(size // 2)
        f.write(b"\x01" * (1 << 20))  # another model's weights differ everywhere: a MiB is plenty
    reads: list[int] = []
    real = model_files._read_blocks

    def counting(path: Path, size_: int, pause: Any) -> bytes:
        got = real(path, size_, pause)
        reads.append(len(got))
        return got

    model_files._read_blocks = counting  # type: ignore[assignment]
    try:
        assert sample_sha256(a) != sample_sha256(b)
    finally:
        model_files._read_blocks = real
    assert max(reads) <= 3 << 20  # about 2 MiB of 64 MiB read


def test_a_file_is_hashed_once_per_key_and_again_when_replaced_in_place(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    real = model_files._hash_file

    def counting(path: Path, pause: Any = None) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(model_files, "_hash_file", counting)
    model = tmp_path / "one.gguf"
    model.write_bytes(b"x" * 1000)
    first = model_file_facts(model)
    assert model_file_facts(model) == first and len(calls) == 1
    before = model.stat()
    model.write_bytes(b"y" * 1000)  # cp -p over it: the same size, the same inode, the mtime put back
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert model.stat().st_mtime_ns == before.st_mtime_ns and model.stat().st_size == before.st_size
    again = model_file_facts(model)  # its ctime moved: a new key, so a new hash
    assert len(calls) == 2 and again[0]["sha256"] == hashlib.sha256(b"y" * 1000).hexdigest()
    assert again[0]["sample_sha256"] != first[0]["sample_sha256"]


def test_the_background_hasher_says_hashing_until_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    calls: list[Path] = []
    real = model_files._hash_file

    def slow(path: Path, pause: Any = None) -> str:
        calls.append(path)
        assert gate.wait(10)
        return real(path)

    monkeypatch.setattr(model_files, "_hash_file", slow)
    model = tmp_path / "big.gguf"
    model.write_bytes(b"z" * 4096)
    hasher = ModelHasher()
    try:
        assert hasher.wait(10, samples_only=True) is True
        for _ in range(3):  # asked on every scrape while it runs: queued once
            facts = model_file_facts(model, hasher=hasher)
            assert facts[0]["sha256"] is None and facts[0]["unknown"]["sha256"] == "hashing"
        assert hasher.wait(10, samples_only=True)  # the sample comes first, whatever the full hash does
        facts = model_file_facts(model, hasher=hasher)
        assert facts[0]["sample_sha256"] == sample_sha256(model)
        fp = full(model_files=facts)
        assert fp["unknown"] == {"model.files[0].sha256": "hashing"}
        gate.set()
        assert hasher.wait(10)
        done = model_file_facts(model, hasher=hasher)
        assert done == [{"name": "big.gguf", "size": 4096, "sample_sha256": sample_sha256(model),
                         "sha256": hashlib.sha256(b"z" * 4096).hexdigest()}]
        assert len(calls) == 1 and hasher.hashed == 1
    finally:
        gate.set()
        hasher.close()


def test_the_hasher_waits_while_the_runtime_is_busy(tmp_path: Path) -> None:
    busy = threading.Event()
    busy.set()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"w" * 10_000)
    hasher = ModelHasher(busy=busy.is_set, poll_s=0.01)
    try:
        facts = model_file_facts(model, hasher=hasher)
        assert facts[0]["unknown"]["sample_sha256"].startswith("waiting: the runtime is busy")
        assert hasher.wait(0.3) is False and hasher.hashed == 0  # nothing read during a measurement
        assert hasher.waited
        busy.clear()
        assert hasher.wait(10)
        assert model_file_facts(model, hasher=hasher)[0]["sha256"] == hashlib.sha256(b"w" * 10_000).hexdigest()
    finally:
        hasher.close()


def test_only_files_under_a_models_root_or_held_by_the_runtime_are_read(tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    inside, outside = root / "m.gguf", tmp_path / "secret"
    inside.write_bytes(b"m")
    outside.write_bytes(b"s")
    (root / "escape").symlink_to(outside)
    assert model_files.permitted(inside, [root], set()) is None
    assert model_files.permitted(outside, [root], set()) is not None
    assert model_files.permitted(root / "escape", [root], set()) is not None  # a link out of the root
    assert model_files.permitted(outside, [], {str(outside)}) is None  # the runtime holds it open


def test_the_background_hasher_reports_an_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path, pause: Any = None) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(model_files, "_hash_file", refuse)
    model = tmp_path / "locked.gguf"
    model.write_bytes(b"q")
    hasher = ModelHasher()
    try:
        model_file_facts(model, hasher=hasher)
        assert hasher.wait(10)
        facts = model_file_facts(model, hasher=hasher)
        assert facts[0]["sha256"] is None and "Permission denied" in facts[0]["unknown"]["sha256"]
    finally:
        hasher.close()
