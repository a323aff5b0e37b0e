"""``satbench sim`` as a drop-in ``llama-server``: its command line mapped onto the profile and the server.

``satbench sim`` accepts every flag of llama-server's command line (``core.llama_flags``, the one table of its
spellings that ``core.llama_argv`` reads a runtime's command line with too). The ones
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satbench.core.llama_argv import ARGV_FLAGS, environment_settings, server_layout
from satbench.core.llama_flags import LLAMA_SERVER_FLAGS
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


def add_llama_flags(parser: argparse.ArgumentParser) -> None:
    """Registers llama-server's flags (all but the shared ones) under one list, ``args.llama_flags``, each under
    its option's canonical name (``ServerFlag.canonical``)."""
    parser.set_defaults(**{LLAMA_DEST: []})
    group = parser.add_argument_group("llama-server flags (drop-in; see simulator/dropin.py)")
    group.add_argument("--no-slots", dest="slots_endpoint", action="store_false", default=None,
                       help="answer /slots with 501, as llama-server --no-slots")
    for flag in LLAMA_SERVER_FLAGS:
        for name in (n for n in flag.names if n not in _SHARED):  # one action per spelling, so that the
            # --no- forms can be told apart
            group.add_argument(name, dest=flag.canonical, action=_LlamaFlag, nargs=None if flag.takes_value else 0,
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


# the settings a drop-in simulator honours from the environment, as the canonical flag of the command line they
# stand for
_FROM_ENV = {setting: ARGV_FLAGS[setting].option.canonical
             for setting in ("slots", "ctx_size", "batch", "ubatch", "kv_unified")}


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


@dataclass
class _Reading:
    """What llama-server's flags have said so far, read one by one (the last one of a flag counts)."""

    profile: Profile
    parallel: int | None
    opts: dict[str, Any]
    server: dict[str, Any] = field(default_factory=dict)  # the profile's [server] overrides
    ctx: int | None = None
    kv_unified: bool | None = None
    api_keys: list[str] = field(default_factory=list)
    router_flags: list[tuple[str, str, Any, bool]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


# (spelling as given, its value or None, whether it is an "off" form) -> what it means
_Read = Callable[[str, Any, bool], Any]
_Setter = Callable[[_Reading, str, Any, bool], None]


def _ON(spelled: str, value: Any, off: bool) -> bool:
    return not off


def _TRUE(spelled: str, value: Any, off: bool) -> bool:
    return True


def _TEXT(spelled: str, value: Any, off: bool) -> Any:
    return value


def _LIST(spelled: str, value: Any, off: bool) -> tuple[str, ...]:
    return _split(value)


def _INT(spelled: str, value: Any, off: bool) -> int:
    return _int(spelled, value)


def _option(key: str, read: _Read, *, unless_set: bool = False) -> _Setter:
    """A setter of the server option ``key`` (``unless_set``: only where no flag set it yet)."""
    def setter(r: _Reading, spelled: str, value: Any, off: bool) -> None:
        if not (unless_set and key in r.opts):
            r.opts[key] = read(spelled, value, off)
    return setter


def _serving(key: str, read: _Read) -> _Setter:
    """A setter of the profile's ``[server]`` setting ``key``."""
    def setter(r: _Reading, spelled: str, value: Any, off: bool) -> None:
        r.server[key] = read(spelled, value, off)
    return setter


def _cache_ram(r: _Reading, spelled: str, value: Any, off: bool) -> None:
    """MiB of host memory for prompts the slots give up, in tokens of the model's KV; -1 no limit, 0 off."""
    mib = _int(spelled, value)
    per_token = max(1, r.profile.memory.kv_bytes_per_token)
    r.server["cache_ram_tokens"] = 0 if mib == 0 else 1 << 40 if mib < 0 else mib * (1 << 20) // per_token


def _api_key_file(r: _Reading, spelled: str, value: Any, off: bool) -> None:
    try:
        r.api_keys += [ln.strip() for ln in Path(value).read_text().splitlines() if ln.strip()]
    except OSError as exc:
        raise ProfileError(f"--api-key-file: cannot read {value}: {exc.strerror}") from exc


def _set(name: str, read: _Read) -> _Setter:
    """A setter of the reading's own ``name`` (the context, the slots, the KV layout)."""
    def setter(r: _Reading, spelled: str, value: Any, off: bool) -> None:
        setattr(r, name, read(spelled, value, off))
    return setter


# canonical flag -> what it does to the simulator (the table of the module docstring); a flag of llama-server
# not here is accepted and named as ignored, a router flag waits for the router decision (below)
_SETTERS: dict[str, _Setter] = {
    "--ctx-size": _set("ctx", _INT),
    "--parallel": _set("parallel", _INT),
    "--kv-unified": _set("kv_unified", _ON),
    "--batch-size": _serving("batch", _INT),
    "--ubatch-size": _serving("ubatch", _INT),
    "--context-shift": _serving("context_shift", _ON),
    "--cache-ram": _cache_ram,
    "--alias": _option("aliases", _LIST),
    "--tags": _option("tags", _LIST),
    "--model": _option("model_path", _TEXT),
    "--hf-repo": _option("model_path", lambda spelled, value, off: value.replace("/", "_").replace(":", "_")
                         + ".gguf", unless_set=True),
    "--hf-file": _option("model_path", lambda spelled, value, off: Path(value).name),
    "--model-url": _option("model_path", lambda spelled, value, off: value.rsplit("/", 1)[-1], unless_set=True),
    "--api-key": lambda r, spelled, value, off: r.api_keys.extend(_split(value)),
    "--api-key-file": _api_key_file,
    "--metrics": _option("metrics", _TRUE),
    "--ui": _option("ui", _ON),
    "--predict": _option("n_predict", _INT),
    "--temp": _option("temperature", lambda spelled, value, off: _float(spelled, value)),
    "--cors-origins": _option("cors_origins", _LIST),
    "--tools": _option("cors_origins", lambda spelled, value, off: ("localhost",), unless_set=True),
    "--ui-mcp-proxy": _option("ui_mcp_proxy", _ON),
    "--media-path": _option("media_path", _TEXT),
    "--verbose": _option("verbose", _TRUE),
    "--embedding": _option("embeddings", _TRUE),
}


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
    r = _Reading(profile, parallel=args.slots, opts=opts)
    for dest, spelled, value in given:
        off = spelled.startswith(("--no-", "-no-", "LLAMA_ARG_NO_"))
        setter = _SETTERS.get(dest)
        if setter is not None:
            setter(r, spelled, value, off)
        elif dest in _ROUTER_FLAGS:
            r.router_flags.append((dest, spelled, value, off))
        elif dest not in _NO_OP:
            r.ignored.append(spelled if value is None else f"{spelled} {value}")
    server, ctx, parallel, kv_unified = r.server, r.ctx, r.parallel, r.kv_unified
    ignored, api_keys, router_flags = r.ignored, r.api_keys, r.router_flags
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
