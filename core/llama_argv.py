"""What a llama-server command line says about capacity: the one table of its flags (``ARGV_FLAGS``) and
``settings_from_argv``, read by the fingerprint (``core.fingerprint``) where the exporter can see the
runtime's process.

Batch and micro-batch, flash attention, KV cache types and GPU layers are on the command line only, not in
``/props``; a flag left out is ``None`` with the reason (the build's default applies, and defaults move
between builds), never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ARGV_FLAGS", "FLASH_ATTN_VALUES", "SETTINGS_FIELDS", "is_llama_server_argv", "settings_from_argv", "to_int"]

SETTINGS_FIELDS = ("slots", "ctx_per_slot", "batch", "ubatch", "flash_attn", "cache_type_k", "cache_type_v",
                   "n_gpu_layers")

# setting -> (llama-server's spellings, its environment variable); the one table of flags read here.
# ``ctx_size`` is the total context (-c), from which ``ctx_per_slot`` follows.
ARGV_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "slots": (("-np", "--parallel"), "LLAMA_ARG_N_PARALLEL"),
    "ctx_size": (("-c", "--ctx-size"), "LLAMA_ARG_CTX_SIZE"),
    "batch": (("-b", "--batch-size"), "LLAMA_ARG_BATCH"),
    "ubatch": (("-ub", "--ubatch-size"), "LLAMA_ARG_UBATCH"),
    "flash_attn": (("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN"),
    "cache_type_k": (("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K"),
    "cache_type_v": (("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V"),
    "n_gpu_layers": (("-ngl", "--gpu-layers", "--n-gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS"),
}
_KV_ON = {"-kvu", "--kv-unified"}
_KV_OFF = {"-no-kvu", "--no-kv-unified"}
_BY_SPELLING = {name: setting for setting, (names, _) in ARGV_FLAGS.items() for name in names}
FLASH_ATTN_VALUES: dict[str, bool | str] = {"on": True, "off": False, "auto": "auto", "true": True, "false": False,
                                     "1": True, "0": False, "enabled": True, "disabled": False}


# -- the runtime's command line ---------------------------------------------------------------------------


def is_llama_server_argv(argv: Sequence[str]) -> bool:
    """llama-server (``llama-server``, the unified ``llama`` binary) or ``satbench sim``, which takes its
    flags; another program's flags (a test runner replaying payloads) say nothing about the runtime."""
    if not argv:
        return False
    program = argv[0].replace("\\", "/").rsplit("/", 1)[-1]
    if program.startswith("llama"):
        return True
    head = argv[:4]
    return any("satbench" in a for a in head) and "sim" in head


def to_int(value: str) -> int | None:
    """``value`` as an int, or None where it is not one."""
    try:
        return int(value)
    except ValueError:
        return None


def settings_from_argv(argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The capacity settings a llama-server command line sets, and why each one it leaves ``None`` is.

    Keys are :data:`SETTINGS_FIELDS`. A flag given twice counts as llama-server reads it (the last one). A
    flag left out means the build's default (or an ``LLAMA_ARG_*`` variable of the runtime's environment,
    not read here): ``None``, with that reason.
    """
    raw: dict[str, str] = {}
    unified: bool | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if arg in _KV_ON:
            unified = True
        elif arg in _KV_OFF:
            unified = False
        elif name in _BY_SPELLING:
            setting = _BY_SPELLING[name]
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if eq:
                raw[setting] = inline
            elif setting == "flash_attn" and (nxt is None or nxt.lower() not in FLASH_ATTN_VALUES):
                raw[setting] = "on"  # a bare -fa (builds before -fa took on|off|auto)
            elif nxt is not None:
                raw[setting] = nxt
                i += 1
        i += 1
    out: dict[str, Any] = {}
    why: dict[str, str] = {}

    def absent(setting: str) -> str:
        names, env = ARGV_FLAGS[setting]
        return (f"the runtime's command line does not set it ({'/'.join(names)}: the build's default applies, "
                f"or {env} in the runtime's environment, which is not read)")

    for setting in ("batch", "ubatch"):
        value = raw.get(setting)
        number = to_int(value) if value is not None else None
        out[setting] = number if number is not None and number > 0 else None
        if out[setting] is None:
            why[setting] = absent(setting) if value is None else f"unreadable {setting} {value!r} on the command line"
    fa = raw.get("flash_attn")
    out["flash_attn"] = FLASH_ATTN_VALUES.get(fa.lower()) if fa is not None else None
    if out["flash_attn"] is None:
        why["flash_attn"] = absent("flash_attn") if fa is None else f"unreadable -fa {fa!r} on the command line"
    for setting in ("cache_type_k", "cache_type_v"):
        value = raw.get(setting)
        out[setting] = value.lower() if value else None
        if out[setting] is None:
            why[setting] = absent(setting)
    ngl = raw.get("n_gpu_layers")
    if ngl is None:
        out["n_gpu_layers"], why["n_gpu_layers"] = None, absent("n_gpu_layers")
    elif (layers := to_int(ngl)) is not None:
        out["n_gpu_layers"] = layers
    elif ngl.lower() in ("auto", "all"):
        out["n_gpu_layers"] = ngl.lower()  # what it said; the layer count it stands for is not told
    else:
        out["n_gpu_layers"], why["n_gpu_layers"] = None, f"unreadable -ngl {ngl!r} on the command line"
    np_raw = raw.get("slots")
    slots = to_int(np_raw) if np_raw is not None else None
    if np_raw is None:
        out["slots"], why["slots"] = None, absent("slots") + "; its default -1 lets the runtime pick"
    elif slots is None or slots == 0 or slots < -1:
        out["slots"], why["slots"] = None, f"unreadable -np {np_raw!r} on the command line"
    elif slots == -1:
        out["slots"], why["slots"] = None, "-np -1 (auto): the runtime picks the slot count"
    else:
        out["slots"] = slots
    c_raw = raw.get("ctx_size")
    ctx = to_int(c_raw) if c_raw is not None else None
    if c_raw is None:
        out["ctx_per_slot"], why["ctx_per_slot"] = None, absent("ctx_size")
    elif ctx is None or ctx < 0:
        out["ctx_per_slot"], why["ctx_per_slot"] = None, f"unreadable -c {c_raw!r} on the command line"
    elif ctx == 0:
        out["ctx_per_slot"], why["ctx_per_slot"] = None, "-c 0: the context comes from the model"
    elif unified is True:
        out["ctx_per_slot"] = ctx  # a unified cache: every slot may use all of it
    elif out["slots"] is not None:
        out["ctx_per_slot"] = max(ctx // out["slots"], 1)
    else:
        out["ctx_per_slot"] = None
        why["ctx_per_slot"] = f"-c {ctx} over a slot count the command line does not fix"
    return out, why
