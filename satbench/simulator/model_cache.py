"""The model cache llama.cpp reads (the Hugging Face hub layout), as llama-server's router lists it.

``hf_cache_dir`` finds the folder from the environment (``LLAMA_CACHE``, the HF variables, then the user's
cache); ``cache_models`` lists each cached GGUF model as ``ORG/REPO:TAG`` in llama.cpp's order of discovery
(first shards only, no multimodal projector or draft sidecars); ``cached_preset`` finds a cached repo's
``preset.ini`` (such a repo makes llama-server a router over its presets); ``models_dir_models`` names the
models of ``--models-dir`` and ``read_preset`` reads a ``--models-preset`` INI, as llama.cpp does. Cache
files are only listed, never read beyond the ``refs`` that name the snapshot. Used by the drop-in command
line (``simulator.dropin``) and by router mode (``simulator.router``).
"""

from __future__ import annotations

import configparser
import os
import re
from pathlib import Path

__all__ = ["cache_models", "cached_preset", "hf_cache_dir", "models_dir_models", "read_preset"]

_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")
_SIDECARS = ("mmproj", "mtp-", "eagle3-", "dflash-", "dspark-")
_DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")


def hf_cache_dir(env: dict[str, str] | None = None) -> Path | None:
    """The HF cache folder llama.cpp reads, from the environment (None when none can be told)."""
    env = dict(os.environ) if env is None else env
    for var, sub in (("LLAMA_CACHE", ""), ("HF_HUB_CACHE", ""), ("HUGGINGFACE_HUB_CACHE", ""), ("HF_HOME", "hub"),
                     ("XDG_CACHE_HOME", "huggingface/hub"), ("HOME", ".cache/huggingface/hub")):  # fmt: skip
        if env.get(var):
            return Path(env[var]) / sub if sub else Path(env[var])
    return None


def _gguf_tag(rel: str) -> tuple[str, str, int] | None:
    """(prefix, TAG, shard index) of a GGUF path, as llama.cpp's split info; None when not a GGUF."""
    if not rel.endswith(".gguf"):
        return None
    prefix, index = rel[: -len(".gguf")], 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, index = m.group(1), int(m.group(2))
    t = _TAG.search(prefix)
    return prefix, (t.group(1).upper() if t else ""), index


def cache_models(cache: Path | None) -> list[tuple[str, str]]:
    """(``ORG/REPO:TAG``, repo) for each model of an HF cache folder, in llama.cpp's order of discovery."""
    out: list[tuple[str, str]] = []
    if cache is None or not cache.is_dir():
        return out
    seen: set[str] = set()
    for repo_dir in sorted(cache.iterdir()):
        if not repo_dir.is_dir() or not repo_dir.name.startswith("models--"):
            continue
        repo = repo_dir.name[len("models--"):].replace("--", "/")
        if repo.count("/") != 1:
            continue
        commit = _cached_ref(repo_dir / "refs")
        snap = repo_dir / "snapshots" / commit if commit else None
        if snap is None or not snap.is_dir():
            continue
        for f in sorted(snap.rglob("*")):
            if not (f.is_file() or f.is_symlink()):
                continue
            info = _gguf_tag(f.relative_to(snap).as_posix())
            if info is None:
                continue
            prefix, tag, index = info
            if index != 1 or not tag or any(s in prefix for s in _SIDECARS):
                continue
            name = f"{repo}:{tag}"
            if name not in seen:
                seen.add(name)
                out.append((name, repo))
    return out


def cached_preset(hf_repo: str, cache: Path | None) -> Path | None:
    """The ``preset.ini`` at the root of a cached HF repo (a preset repo: llama-server is then a router)."""
    repo = hf_repo.partition(":")[0]
    if cache is None or repo.count("/") != 1:
        return None
    folder = cache / ("models--" + repo.replace("/", "--"))
    commit = _cached_ref(folder / "refs")
    path = folder / "snapshots" / commit / "preset.ini" if commit else None
    return path if path is not None and path.is_file() else None


def _cached_ref(refs: Path) -> str:
    if not refs.is_dir():
        return ""
    fallback = ""
    for entry in sorted(refs.iterdir()):
        if not entry.is_file():
            continue
        lines = entry.read_text(encoding="utf-8", errors="replace").splitlines()
        commit = lines[0].strip() if lines else ""
        if not _COMMIT.match(commit):
            continue
        if entry.name == "main":
            return commit
        fallback = fallback or commit
    return fallback


def models_dir_models(folder: str) -> list[tuple[str, str]]:
    """(name, path) of each model under ``--models-dir``, as llama.cpp names them."""
    d = Path(folder)
    if not d.is_dir():
        raise ValueError(f"error: '{folder}' does not exist or is not a directory")
    out = []
    for entry in sorted(d.iterdir()):
        if entry.is_dir():
            files = [f for f in sorted(entry.iterdir()) if f.is_file() and f.name.endswith(".gguf")
                     and "mmproj" not in f.name and not f.name.startswith(_DRAFT_PREFIXES)]  # fmt: skip
            shards = [f for f in files if "-00001-of-" in f.name]
            chosen = shards or [f for f in files if "-of-" not in f.name]
            if chosen:
                out.append((entry.name, str(chosen[-1])))
        elif entry.is_file() and entry.name.endswith(".gguf"):
            if "mmproj" in entry.name or entry.name.startswith(_DRAFT_PREFIXES):
                continue
            out.append((entry.name.replace(".gguf", ""), str(entry)))
    return out


def read_preset(path: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(the ``[*]`` defaults, each section's keys) of a preset INI file."""
    parser = configparser.ConfigParser(interpolation=None, strict=False, allow_no_value=True,
                                       default_section="\x00none")  # fmt: skip
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        with open(path, encoding="utf-8") as fh:
            parser.read_file(fh)
    except (OSError, configparser.Error) as exc:
        raise ValueError(f"--models-preset {path}: {exc}") from exc
    sections = {name: {_key(k): (v or "") for k, v in parser.items(name)} for name in parser.sections()}
    return sections.pop("*", {}), sections


def _key(k: str) -> str:
    return k.strip().lstrip("-").lower()
