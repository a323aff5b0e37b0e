"""``satbench sim`` as a drop-in ``llama-server``: its command line mapped onto the profile and the server.

``satbench sim`` accepts every flag of llama-server's command line (``simulator.llama_flags``). The ones
that shape serving are honoured:

| llama-server flag | simulator |
|---|---|
| ``-np/--parallel N`` | ``[server] slots``; ``-1`` (llama-server's default, "auto") is 4 slots over a unified cache |
| ``-c/--ctx-size N`` | ``[server] ctx_tokens``; each slot gets ``N / parallel`` unless the cache is unified |
| ``-kvu/--kv-unified``, ``-no-kvu`` | one KV cache shared by the slots (each may use all of ``-c``) |
| ``-b/--batch-size``, ``-ub/--ubatch-size`` | ``[server] batch``, ``ubatch`` (``ubatch <= batch``) |
| ``--context-shift`` | generation goes on past a full context |
| ``-cram/--cache-ram MiB`` | host-memory prompt cache, ``[server] cache_ram_tokens`` (MiB / KV bytes a token) |
| ``-a/--alias A[,B]``, ``--tags``, ``-m``, ``-hf``, ``-hff`` | the model's id, aliases, tags and path |
| ``--api-key K[,K2]``, ``--api-key-file`` | every endpoint but ``/health``, ``/models`` and the UI wants the key |
| ``--metrics``, ``--slots/--no-slots``, ``--ui/--no-ui`` | those endpoints (llama-server's defaults: off, on, on) |
| ``-n/--n-predict N`` | default and cap of a request's ``n_predict`` |
| ``-s/--seed S``, ``--temp T`` | the default sampling seed and temperature (reproducible text per prompt) |
| ``--cors-origins``, ``--tools``, ``--ui-mcp-proxy``, ``--media-path``, ``-v``, ``--embedding`` | as llama-server |
| ``--host H[,H2]``, ``--port P`` | the listening addresses |
| ``--models-dir``, ``--models-preset``, ``--models-max``, ``--[no-]models-autoload`` | router mode (below) |

Router mode (``simulator.router``): with no model source (``-m``, ``-hf``, ``--model-url``, ``-dr``) and
either a router flag above or satbench's own ``--router`` (or with ``-hf`` naming a preset repo of the HF
cache, one with a ``preset.ini``), the server is llama-server's router: each model
of the HF cache, ``--models-dir`` and ``--models-preset`` is a separate simulated engine, loaded on demand
in ``--model-load-s`` seconds (satbench's flag, default 0.3). Without ``--router`` a command line with no
model keeps serving the profile's model, as ``satbench sim`` always has.

The KV layout follows llama-server's own rule (``core.llama_argv.server_layout``, the one the exporter
reads a command line with, so the two cannot disagree): ``-np`` left out or ``-1`` is "auto", 4 slots over
one unified cache whatever ``-kvu`` says; an explicit count splits the cache unless ``-kvu``. The
``LLAMA_ARG_*`` environment variables of those flags (``LLAMA_ARG_N_PARALLEL``, ``LLAMA_ARG_CTX_SIZE``,
``LLAMA_ARG_BATCH``, ``LLAMA_ARG_UBATCH``, ``LLAMA_ARG_KV_UNIFIED``) are read as llama-server reads them,
the command line winning. ``/props`` says the layout it serves (``simulator.kv_unified``).

``--cache-ram`` left out keeps the prompt cache one prompt per slot (llama-server's own default is 8192 MiB:
pass it to serve as a recent llama-server does); ``-1`` is no limit, ``0`` off.

Every other flag is accepted and named once at start-up as ignored. Given any llama-server flag that
``satbench sim`` does not share (``--host``, ``--port``, ``--seed`` and ``--slots N`` are shared), the
server takes llama-server's defaults (``/metrics`` off until ``--metrics``, the web UI on, sampling
seeded only by ``--seed``); without one it keeps the simulator's (every endpoint on).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satbench.core.llama_argv import ARGV_FLAGS, environment_settings, server_layout
from satbench.simulator.llama_flags import LLAMA_SERVER_FLAGS
from satbench.simulator.model_cache import cached_preset, hf_cache_dir
from satbench.simulator.profile import Profile, ProfileError

__all__ = ["LLAMA_DEST", "ServerOptions", "add_llama_flags", "apply_llama_flags"]

LLAMA_DEST = "llama_flags"
# satbench sim's own flags that share a name with llama-server's: handled by simulator.cli
_SHARED = {"-h", "--help", "--usage", "--host", "--port", "-s", "--seed", "--slots", "--no-slots"}
# flags whose effect is simply what the simulator does anyway (not reported as ignored)
_NO_OP = {"--cont-batching", "--offline"}
# a model source: without one (and with a router flag or satbench's --router) llama-server is a router
_MODEL_SOURCES = {"--model", "--hf-repo", "--model-url", "--docker-repo"}
_ROUTER_FLAGS = {"--models-dir", "--models-preset", "--models-max", "--models-autoload"}


@dataclass(frozen=True)
class ServerOptions:
    """What the HTTP layer serves beyond the profile: endpoints, identity, keys and request defaults."""

    drop_in: bool = False
    model_path: str | None = None
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()
    metrics: bool = True
    slots: bool = True
    ui: bool = False
    n_predict: int = -1
    seed: int | None = None  # default sampling seed; None = a fresh one per request (llama-server's -1)
    temperature: float = 0.8
    cors_origins: tuple[str, ...] | None = None  # None: every origin
    ui_mcp_proxy: bool = False
    media_path: str | None = None
    verbose: bool = False
    embeddings: bool = False
    ignored: tuple[str, ...] = ()
    # router mode (simulator.router): llama-server with no model, serving the models it finds
    router: bool = False
    models_dir: str | None = None
    models_preset: str | None = None
    models_max: int = 4
    models_autoload: bool = True
    model_load_s: float = 0.3

    def model_id(self, profile: Profile) -> str:
        if self.aliases:
            return sorted(self.aliases)[0]
        return self.model_path or profile.model.name


class _LlamaFlag(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        seen = list(getattr(namespace, LLAMA_DEST, None) or [])
        seen.append((self.dest, option_string or self.dest, values if self.nargs != 0 else None))
        setattr(namespace, LLAMA_DEST, seen)


def _canonical(names: Sequence[str]) -> str:
    longs = [n for n in names if n.startswith("--") and not n.startswith("--no-")]
    return (longs or [n for n in names if n.startswith("--")] or list(names))[0]


def add_llama_flags(parser: argparse.ArgumentParser) -> None:
    """Registers llama-server's flags (all but the shared ones) under one list, ``args.llama_flags``."""
    parser.set_defaults(**{LLAMA_DEST: []})
    group = parser.add_argument_group("llama-server flags (drop-in; see simulator/dropin.py)")
    group.add_argument("--no-slots", dest="slots_endpoint", action="store_false", default=None,
                       help="answer /slots with 501, as llama-server --no-slots")
    for names, takes_value in LLAMA_SERVER_FLAGS:
        usable = [n for n in names if n not in _SHARED]
        if not usable:
            continue
        canon = _canonical(names)
        for name in usable:  # one action per spelling, so that the --no- forms can be told apart
            group.add_argument(name, dest=canon, action=_LlamaFlag, nargs=None if takes_value else 0,
                               metavar="V", help=argparse.SUPPRESS)


def _int(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ProfileError(f"{flag}: expected an integer, got {value!r}") from None


def _float(flag: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ProfileError(f"{flag}: expected a number, got {value!r}") from None


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


# the settings a drop-in simulator honours from the environment, as (canonical flag, spelling) of the command
# line they stand for
_FROM_ENV = {"slots": "--parallel", "ctx_size": "--ctx-size", "batch": "--batch-size", "ubatch": "--ubatch-size",
             "kv_unified": "--kv-unified"}


def _environment_flags(environ: Mapping[str, str], given: Sequence[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """The ``LLAMA_ARG_*`` variables of the honoured flags as flags, for each the command line does not give
    (llama-server reads the environment first and lets the command line win)."""
    on_argv = {dest for dest, _, _ in given}
    out: list[tuple[str, str, Any]] = []
    for setting, value in environment_settings(environ).items():
        dest = _FROM_ENV.get(setting)
        if dest is None or dest in on_argv:
            continue
        name = ARGV_FLAGS[setting].env[0]
        if setting == "kv_unified":
            out.append((dest, name if value == "1" else name.replace("LLAMA_ARG_", "LLAMA_ARG_NO_"), None))
        else:
            out.append((dest, name, value))
    return out


def apply_llama_flags(profile: Profile, args: argparse.Namespace,
                      environ: Mapping[str, str] | None = None) -> tuple[Profile, ServerOptions]:
    """The profile and server options after satbench's own flags (already applied), llama-server's, and the
    ``LLAMA_ARG_*`` variables of ``environ`` (default: this process's environment)."""
    given: list[tuple[str, str, Any]] = list(getattr(args, LLAMA_DEST, None) or [])
    given = _environment_flags(os.environ if environ is None else environ, given) + given
    slots_flag = bool(getattr(args, "slots_flag", False))
    drop_in = bool(given) or getattr(args, "slots_endpoint", None) is not None or slots_flag
    sampling_seed = args.seed if drop_in and args.seed is not None else None
    opts: dict[str, Any] = {"drop_in": drop_in}
    if drop_in:
        opts.update(metrics=False, ui=True)
    if getattr(args, "slots_endpoint", None) is not None:
        opts["slots"] = bool(args.slots_endpoint)
    if slots_flag:
        opts["slots"] = True
    server: dict[str, Any] = {}
    ctx: int | None = None
    parallel: int | None = args.slots
    kv_unified: bool | None = None
    ignored: list[str] = []
    api_keys: list[str] = []
    router_flags: list[tuple[str, str, Any, bool]] = []
    for dest, spelled, value in given:
        off = spelled.startswith(("--no-", "-no-", "LLAMA_ARG_NO_"))
        if dest == "--ctx-size":
            ctx = _int(spelled, value)
        elif dest == "--parallel":
            parallel = _int(spelled, value)
        elif dest == "--batch-size":
            server["batch"] = _int(spelled, value)
        elif dest == "--ubatch-size":
            server["ubatch"] = _int(spelled, value)
        elif dest == "--kv-unified":
            kv_unified = not off
        elif dest == "--context-shift":
            server["context_shift"] = not off
        elif dest == "--cache-ram":  # MiB of host memory for prompts the slots give up; -1 no limit, 0 off
            mib = _int(spelled, value)
            per_token = max(1, profile.memory.kv_bytes_per_token)
            server["cache_ram_tokens"] = 0 if mib == 0 else 1 << 40 if mib < 0 else mib * (1 << 20) // per_token
        elif dest == "--alias":
            opts["aliases"] = _split(value)
        elif dest == "--tags":
            opts["tags"] = _split(value)
        elif dest == "--model":
            opts["model_path"] = value
        elif dest == "--hf-repo":
            opts.setdefault("model_path", value.replace("/", "_").replace(":", "_") + ".gguf")
        elif dest == "--hf-file":
            opts["model_path"] = Path(value).name
        elif dest == "--model-url":
            opts.setdefault("model_path", value.rsplit("/", 1)[-1])
        elif dest == "--api-key":
            api_keys += _split(value)
        elif dest == "--api-key-file":
            try:
                api_keys += [ln.strip() for ln in Path(value).read_text().splitlines() if ln.strip()]
            except OSError as exc:
                raise ProfileError(f"--api-key-file: cannot read {value}: {exc.strerror}") from exc
        elif dest == "--metrics":
            opts["metrics"] = True
        elif dest == "--ui":
            opts["ui"] = not off
        elif dest in ("--predict", "--n-predict"):
            opts["n_predict"] = _int(spelled, value)
        elif dest == "--temp":
            opts["temperature"] = _float(spelled, value)
        elif dest == "--cors-origins":
            opts["cors_origins"] = _split(value)
        elif dest == "--tools":
            opts.setdefault("cors_origins", ("localhost",))
        elif dest == "--ui-mcp-proxy":
            opts["ui_mcp_proxy"] = not off
        elif dest == "--media-path":
            opts["media_path"] = value
        elif dest == "--verbose":
            opts["verbose"] = True
        elif dest == "--embedding":
            opts["embeddings"] = True
        elif dest in _ROUTER_FLAGS:
            router_flags.append((dest, spelled, value, off))
        elif dest not in _NO_OP:
            ignored.append(spelled if value is None else f"{spelled} {value}")
    has_model = any(dest in _MODEL_SOURCES for dest, _, _ in given)
    hf_repo = next((value for dest, _, value in given if dest == "--hf-repo"), None)
    if hf_repo is not None and not any(dest in _MODEL_SOURCES - {"--hf-repo"} for dest, _, _ in given):
        preset = cached_preset(hf_repo, hf_cache_dir())
        if preset is not None:  # a preset repo: llama-server runs as a router over its preset.ini
            has_model = False
            router_flags.append(("--models-preset", "--models-preset", str(preset), False))
            opts.pop("model_path", None)
    router = not has_model and (bool(getattr(args, "router", False)) or bool(router_flags))
    for dest, spelled, value, off in router_flags:
        if not router:
            ignored.append(spelled if value is None else f"{spelled} {value}")
        elif dest == "--models-dir":
            opts["models_dir"] = value
        elif dest == "--models-preset":
            opts["models_preset"] = value
        elif dest == "--models-max":
            opts["models_max"] = _int(spelled, value)
        else:
            opts["models_autoload"] = not off
    if router:
        opts["router"] = True
        load_s = getattr(args, "model_load_s", None)
        if load_s is not None:
            if load_s < 0:
                raise ProfileError("--model-load-s: must be >= 0")
            opts["model_load_s"] = float(load_s)
    if api_keys:
        opts["api_keys"] = tuple(api_keys)
    if sampling_seed is not None and sampling_seed >= 0:
        opts["seed"] = sampling_seed
    s = profile.server
    if parallel is not None and (parallel == 0 or parallel < -1):
        raise ProfileError(f"--parallel: expected a slot count or -1 (auto), got {parallel}")
    if ctx is not None and ctx > 0:
        server["ctx_tokens"] = ctx
    if drop_in:  # llama-server's defaults and its rule: -np auto is 4 slots over one unified cache
        slots, unified = server_layout(parallel, kv_unified)
        total = server.get("ctx_tokens", s.ctx_tokens)
        server["slots"] = slots
        server["slot_ctx_tokens"] = 0 if unified else max(total // slots, 1)
    elif parallel is not None:
        server["slots"] = parallel
    if "batch" in server or "ubatch" in server:
        batch = server.get("batch", s.batch)
        server["ubatch"] = min(server.get("ubatch", s.ubatch), batch)
    if server:
        fields = {f.name for f in dataclasses.fields(s)}
        profile = profile.with_overrides(**{k: v for k, v in server.items() if k in fields})
    opts["ignored"] = tuple(ignored)
    return profile, ServerOptions(**opts)
