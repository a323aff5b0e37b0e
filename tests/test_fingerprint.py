"""core.fingerprint: the shape, the sources (recorded llama-server /props, command lines and LLAMA_ARG_*
environments), nulls with their reasons, digests, the info-series round trip, comparing and weighing
(``assess``: valid only where what decides capacity was compared). The model files' own tests are in
tests/test_model_files.py."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from satbench.core import fingerprint as fpmod
from satbench.core.fingerprint import (
    HARDWARE_FIELDS,
    SETTINGS_FIELDS,
    cpu_facts,
    digest,
    gpu_facts,
    node_fingerprint,
    policy_part,
    workload_part,
)
from satbench.core.fingerprint_compare import COMPARED_FIELDS, assess, compare, describe_changes
from satbench.core.fingerprint_labels import INFO_LABELS, from_info_labels, info_labels
from satbench.core.llama_argv import DEFAULT, settings_from_argv
from testkit.fingerprints import ARGV, FIXTURES, HARDWARE, META, RUNTIME, full, props, server_cmd

PARTS = ("runtime", "model", "settings", "hardware")


# -- shape and sources ------------------------------------------------------------------------------------


def test_shape_is_the_contracts() -> None:
    fp = full()
    assert set(fp) == {"digest", *PARTS, "unknown"}
    assert set(fp["runtime"]) == {"build", "binary_sha256", "package", "backend"}
    assert set(fp["model"]) == {"path", "files", "meta"}
    assert tuple(fp["settings"]) == SETTINGS_FIELDS
    assert tuple(fp["hardware"]) == HARDWARE_FIELDS
    assert fp["digest"].startswith("sha256:") and len(fp["digest"]) == 7 + 64
    assert fp["unknown"] == {}
    assert fp["runtime"] == {"build": "b0-unknown", **RUNTIME}
    assert fp["model"]["path"] == "models/tiny-llama-dense.gguf" and fp["model"]["meta"] == META
    assert fp["settings"] == {"slots": 4, "ctx_per_slot": 4096, "kv_unified": False, "batch": 512, "ubatch": 128,
                              "flash_attn": True, "cache_type_k": "q8_0", "cache_type_v": "q8_0", "n_gpu_layers": 99,
                              "threads": 8, "threads_batch": 8, "draft_model": "draft.gguf", "n_cpu_moe": 4,
                              "override_tensor": "exps=CPU", "split_mode": "layer", "devices": "CUDA0",
                              "tensor_split": "1", "main_gpu": 0, "cache_reuse": 256}
    assert fp["hardware"] == HARDWARE


@pytest.mark.parametrize(("run", "slots", "ctx"), [("dense_np4", 4, 4096), ("dense_np8", 8, 2048),
                                                   ("moe_np4", 4, 4096)])
def test_props_n_ctx_is_per_slot_as_recorded(run: str, slots: int, ctx: int) -> None:
    # recorded with -c 16384 and --parallel 4 / 8: /props n_ctx is the context of one slot
    argv = server_cmd(run)
    assert "-c" in argv and argv[argv.index("-c") + 1] == "16384"
    fp = node_fingerprint(props=props(run), argv=None, hardware=None, model_files=None)
    assert fp["settings"]["slots"] == slots
    assert fp["settings"]["ctx_per_slot"] == ctx == 16384 // slots
    from_argv, _ = settings_from_argv(argv, {})  # the command line alone says the same, and split (-np given)
    assert (from_argv["slots"], from_argv["ctx_per_slot"], from_argv["kv_unified"]) == (slots, ctx, False)


def test_a_router_models_props_and_its_childs_argv() -> None:
    models = json.loads((FIXTURES / "router" / "v1_models.json").read_text())
    child = next(m for m in models["data"] if m["id"] == "tiny-llama-dense")
    fp = node_fingerprint(props=props("router", "props_tiny-llama-dense.json"), argv=child["status"]["args"],
                          environ={}, hardware=None, model_files=None, model_meta=child["meta"])
    assert fp["settings"]["slots"] == 2 and fp["settings"]["ctx_per_slot"] == 1024  # -c 2048 -np 2
    assert fp["settings"]["kv_unified"] is False
    assert fp["model"]["path"] == "models/tiny-llama-dense.gguf"
    assert fp["model"]["meta"] == {"ftype": "F16", "n_params": 19007744, "size": 38020096}
    router = node_fingerprint(props=props("router", "props_router.json"), argv=None, hardware=None,
                              model_files=None)
    assert router["model"]["path"] is None  # the router itself says "none"
    assert router["settings"]["ctx_per_slot"] is None  # and n_ctx 0


def test_props_wins_over_the_command_line() -> None:
    argv = ["llama-server", "-np", "8", "-c", "4096"]  # /props (what the server did) says 4 x 4096
    fp = node_fingerprint(props=props("dense_np4"), argv=argv, hardware=None, model_files=None)
    assert fp["settings"]["slots"] == 4 and fp["settings"]["ctx_per_slot"] == 4096


def test_settings_a_runtime_reports_in_props_are_read_from_it() -> None:
    # the simulator (and any runtime that says them) reports its batch sizes and KV layout in /props: a remote
    # exporter, which sees no command line, knows them there
    said = {**props("dense_np4"), "simulator": {"batch": 2048, "ubatch": 512, "kv_unified": True}}
    fp = node_fingerprint(props=said, argv=None, hardware=None, model_files=None, reasons={"argv": "remote"})
    assert (fp["settings"]["batch"], fp["settings"]["ubatch"], fp["settings"]["kv_unified"]) == (2048, 512, True)
    top = node_fingerprint(props={**props("dense_np4"), "n_batch": 1024, "n_ubatch": 256, "kv_unified": False},
                           argv=None, hardware=None, model_files=None)
    assert (top["settings"]["batch"], top["settings"]["ubatch"], top["settings"]["kv_unified"]) == (1024, 256, False)
    plain = node_fingerprint(props=props("dense_np4"), argv=None, hardware=None, model_files=None,
                             reasons={"argv": "remote runtime"})
    assert plain["settings"]["batch"] is None
    assert plain["unknown"]["settings.batch"] == (
        "the runtime does not report it: /props has no n_batch, and the exporter cannot read the runtime's "
        "command line (remote runtime)")


def test_argv_fills_what_props_lacks_when_props_is_gone() -> None:
    argv = ["llama-server", "-np", "2", "-c", "8192", "-kvu"]
    fp = node_fingerprint(props=None, argv=argv, hardware=None, model_files=None, reasons={"props": "HTTP 500"})
    assert fp["settings"]["slots"] == 2
    assert fp["settings"]["ctx_per_slot"] == 8192  # a unified cache: every slot may use all of it
    assert fp["unknown"]["runtime.build"] == "the runtime does not report it: no /props (HTTP 500)"
    assert fp["unknown"]["runtime"] == "no /props: HTTP 500"


@pytest.mark.parametrize(("argv", "want"), [
    (["--parallel", "3", "--ctx-size", "3000"], {"slots": 3, "ctx_per_slot": 1000, "kv_unified": False}),
    (["--parallel=3", "--ctx_size=3000"], {"slots": 3, "ctx_per_slot": 1000}),  # llama.cpp reads _ as -
    (["-c", "8192"], {"slots": 4, "ctx_per_slot": 8192, "kv_unified": True}),  # -np auto: 4 slots, unified
    (["-np", "-1", "-c", "8192", "-no-kvu"], {"slots": 4, "kv_unified": True}),  # auto forces unified
    (["-np", "4", "-c", "8192", "-kvu"], {"slots": 4, "ctx_per_slot": 8192, "kv_unified": True}),
    (["-np", "4", "-c", "32768"], {"slots": 4, "ctx_per_slot": 8192, "kv_unified": False}),
    (["--batch-size", "1024", "--ubatch-size=256"], {"batch": 1024, "ubatch": 256}),
    (["-fa"], {"flash_attn": True}),  # bare, as builds before -fa took a value
    (["-fa", "-np", "2"], {"flash_attn": True, "slots": 2}),
    (["--flash-attn", "off"], {"flash_attn": False}),
    (["-fa", "auto"], {"flash_attn": "auto"}),
    (["--cache-type-k", "Q4_0", "--cache-type-v", "f16"], {"cache_type_k": "q4_0", "cache_type_v": "f16"}),
    (["--n-gpu-layers", "33"], {"n_gpu_layers": 33}),
    (["--gpu-layers", "all"], {"n_gpu_layers": "all"}),
    (["-ngl", "10", "-ngl", "20"], {"n_gpu_layers": 20}),  # the last one counts
    (["-t", "4", "--threads-batch", "8"], {"threads": 4, "threads_batch": 8}),
    (["--model-draft", "d.gguf"], {"draft_model": "d.gguf"}),
    (["--spec-draft-model", "d2.gguf"], {"draft_model": "d2.gguf"}),
    (["--n-cpu-moe", "20"], {"n_cpu_moe": 20}),
    (["-cmoe"], {"n_cpu_moe": "all"}),
    (["-ot", "blk.1=CPU", "-ot", "blk.2=CPU"], {"override_tensor": "blk.1=CPU,blk.2=CPU"}),  # they add up
    (["-sm", "ROW", "-dev", "CUDA0,CUDA1", "-ts", "3,1", "-mg", "1"],
     {"split_mode": "row", "devices": "CUDA0,CUDA1", "tensor_split": "3,1", "main_gpu": 1}),
    (["--cache-reuse", "256"], {"cache_reuse": 256}),
    ([], {"batch": DEFAULT, "threads": DEFAULT, "draft_model": DEFAULT}),  # the build's default, said as such
])
def test_settings_from_argv(argv: list[str], want: dict[str, Any]) -> None:
    got, _ = settings_from_argv(["llama-server", *argv], {})
    assert {k: got[k] for k in want} == want
    assert set(got) == set(SETTINGS_FIELDS)


@pytest.mark.parametrize(("environ", "argv", "want"), [
    ({"LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_CTX_SIZE": "8192"}, [], {"slots": 2, "ctx_per_slot": 4096,
                                                                      "kv_unified": False}),
    ({"LLAMA_ARG_N_PARALLEL": "2"}, ["-np", "3"], {"slots": 3}),  # the command line wins
    ({"LLAMA_ARG_KV_UNIFIED": "on", "LLAMA_ARG_N_PARALLEL": "2"}, [], {"kv_unified": True}),
    ({"LLAMA_ARG_NO_KV_UNIFIED": "", "LLAMA_ARG_N_PARALLEL": "2"}, ["-kvu"], {"kv_unified": True}),
    ({"LLAMA_ARG_BATCH": "256", "LLAMA_ARG_UBATCH": "64"}, [], {"batch": 256, "ubatch": 64}),
    ({"LLAMA_ARG_FLASH_ATTN": "off", "LLAMA_ARG_N_GPU_LAYERS": "99"}, [], {"flash_attn": False, "n_gpu_layers": 99}),
    ({"LLAMA_ARG_MODEL_DRAFT": "old.gguf"}, [], {"draft_model": "old.gguf"}),
    ({"LLAMA_ARG_CPU_MOE": "1", "LLAMA_ARG_THREADS": "6"}, [], {"n_cpu_moe": "all", "threads": 6}),
    ({"LLAMA_ARG_CACHE_REUSE": "128", "LLAMA_ARG_SPLIT_MODE": "none"}, [], {"cache_reuse": 128, "split_mode": "none"}),
])
def test_llama_arg_environment_is_read_as_llama_server_reads_it(environ: dict[str, str], argv: list[str],
                                                                 want: dict[str, Any]) -> None:
    got, _ = settings_from_argv(["llama-server", *argv], environ)
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize(("argv", "field", "why"), [
    (["-np", "0"], "slots", "unreadable -np 0"),
    ([], "slots", "LLAMA_ARG_N_PARALLEL"),
    (["-c", "0", "-np", "2"], "ctx_per_slot", "the context comes from the model"),
    (["-c", "4096"], "ctx_per_slot", "over a slot count or KV layout the command line does not fix"),
    (["-b", "lots"], "batch", "unreadable -b 'lots'"),
    ([], "cache_type_k", "LLAMA_ARG_CACHE_TYPE_K"),
    (["-np", "4"], "kv_unified", "LLAMA_ARG_KV_UNIFIED"),
])
def test_what_argv_cannot_tell_is_null_with_a_reason(argv: list[str], field: str, why: str) -> None:
    got, reasons = settings_from_argv(["llama-server", *argv])  # the environment could not be read
    assert got[field] is None
    assert why in reasons[field]


def test_nothing_readable_gives_nulls_each_with_its_reason() -> None:
    fp = node_fingerprint(props=None, argv=None, hardware=None, model_files=None,
                          reasons={"props": "timed out after 0.5s", "argv": "remote runtime",
                                   "model.files": "the runtime is on another host"})
    assert all(v is None for part in ("settings", "hardware") for v in fp[part].values())
    assert fp["runtime"] == dict.fromkeys(("build", "binary_sha256", "package", "backend"))
    assert fp["model"] == {"path": None, "files": None, "meta": None}
    nulls = {"runtime", "runtime.build", "runtime.binary_sha256", "runtime.package", "runtime.backend",
             "model.path", "model.files", "model.meta"} | {f"settings.{f}" for f in SETTINGS_FIELDS} | {
        f"hardware.{f}" for f in HARDWARE_FIELDS}
    assert set(fp["unknown"]) == nulls
    assert fp["unknown"]["settings.flash_attn"] == (
        "the runtime does not report it: no /props (timed out after 0.5s), and the exporter cannot read the "
        "runtime's command line (remote runtime)")
    assert fp["unknown"]["model.files"] == "the runtime is on another host"


def test_a_runtime_that_does_not_answer_says_so() -> None:
    for state, why in (("down", "connection refused"), ("loading", "HTTP 503: Loading model")):
        fp = node_fingerprint(props=None, argv=None, hardware=HARDWARE, model_files=None, state=state,
                              reasons={"runtime": why})
        assert fp["unknown"]["runtime"] == f"the runtime is {state}: {why}"
        labels = info_labels(fp)
        assert labels["runtime_state"] == state
        assert from_info_labels(labels)["unknown"]["runtime"].startswith(f"the runtime is {state}")
    assert info_labels(full())["runtime_state"] == ""


def test_another_programs_argv_is_ignored() -> None:
    fp = node_fingerprint(props=None, argv=["/usr/bin/python3", "-m", "pytest", "-np", "9"], hardware=None,
                          model_files=None)
    assert fp["settings"]["slots"] is None
    assert "not llama-server (python3)" in fp["unknown"]["settings.slots"]
    sim = node_fingerprint(props=None, argv=["python", "-m", "satbench.cli", "sim", "-np", "9"], hardware=None,
                           model_files=None, environ={})
    assert sim["settings"]["slots"] == 9  # satbench sim takes llama-server's flags
    plain = node_fingerprint(props=None, argv=["python", "-m", "satbench.cli", "sim"], hardware=None,
                             model_files=None, environ={})
    assert plain["settings"]["slots"] is None and "its profile's" in plain["unknown"]["settings.slots"]


def test_hardware_nulls_take_the_callers_reasons() -> None:
    hardware = {**HARDWARE, "driver": None, "gpu": None}
    fp = node_fingerprint(props=None, argv=None, hardware=hardware, model_files=None,
                          reasons={"hardware.driver": "simulated", "hardware": "NVML unavailable"})
    assert fp["unknown"]["hardware.driver"] == "simulated"
    assert fp["unknown"]["hardware.gpu"] == "NVML unavailable"
    assert fp["hardware"]["gpu_count"] == 1


def test_an_unhashed_file_is_null_with_its_reason() -> None:
    files = [{"name": "m.gguf", "size": 10, "sample_sha256": "aa" * 32, "sha256": None,
              "unknown": {"sha256": "hashing"}}]
    fp = full(model_files=files)
    assert fp["model"]["files"] == [{"name": "m.gguf", "size": 10, "sample_sha256": "aa" * 32, "sha256": None}]
    assert fp["unknown"] == {"model.files[0].sha256": "hashing"}


# -- digest -----------------------------------------------------------------------------------------------


def test_digest_is_stable_and_covers_what_the_answer_is_valid_for() -> None:
    a, b = full(), full()
    assert a["digest"] == b["digest"] == digest(a)
    reordered = {part: dict(reversed(list(a[part].items()))) for part in PARTS}
    assert digest(reordered) == a["digest"]  # canonical: key order does not matter
    assert digest({**a, "unknown": {"x": "y"}}) == a["digest"]  # reasons are not what was measured
    two = full(argv=["llama-server", "-b", "256"])
    assert two["digest"] != a["digest"]
    other_gpu = full(hardware={**HARDWARE, "gpu": "NVIDIA H100"})
    assert other_gpu["digest"] != a["digest"]
    assert a["digest"] == "sha256:" + hashlib.sha256(fpmod.canonical_json(
        {part: a[part] for part in PARTS}).encode()).hexdigest()


def test_workload_and_policy_parts() -> None:
    w1 = workload_part({"prompt_tokens": 256, "output_tokens": 128, "mix": [1, 2]})
    w2 = workload_part({"mix": (1, 2), "output_tokens": 128, "prompt_tokens": 256})
    assert w1 == w2 and set(w1) == {"digest", "values"}
    assert w1["values"] == {"prompt_tokens": 256, "output_tokens": 128, "mix": [1, 2]}
    assert w1["digest"].startswith("sha256:")
    assert policy_part({"ttft_p95_s": 2.0})["digest"] != policy_part({"ttft_p95_s": 1.0})["digest"]
    measured = {**full(), "workload": w1, "policy": policy_part({"ttft_p95_s": 2.0})}
    live = {**full(), "workload": workload_part({"prompt_tokens": 512}), "policy": policy_part({"ttft_p95_s": 2.0})}
    assert [c["field"] for c in compare(measured, live)] == ["workload.digest"]
    assert compare(measured, full()) == []  # a live fingerprint has no workload: not compared


# -- info series round trip -------------------------------------------------------------------------------


def test_info_labels_are_the_contracts_and_round_trip() -> None:
    fp = full()
    labels = info_labels(fp)
    assert tuple(labels) == INFO_LABELS
    assert all(isinstance(v, str) for v in labels.values())
    assert labels["flash_attn"] == "on" and labels["slots"] == "4" and labels["model_size"] == "38020096"
    assert labels["kv_unified"] == "off" and labels["binary_sha256"] == "11" * 32 and labels["model_ftype"] == "F16"
    back = from_info_labels(labels)
    assert {p: back[p] for p in PARTS} == {p: fp[p] for p in PARTS}
    assert back["digest"] == fp["digest"] == labels["digest"]
    assert compare(fp, back) == []
    assert assess(fp, back)["state"] == "valid"


def test_round_trip_of_unknowns_splits_and_strings() -> None:
    files = [{"name": f"big-0000{i}-of-00003.gguf", "size": 100 * i, "sample_sha256": "ef" * 32,
              "sha256": ("cd" * 32 if i != 2 else None)} for i in (1, 2, 3)]
    props_ = {**props("dense_np4"), "model_path": "/m/big-00001-of-00003.gguf"}
    fp = node_fingerprint(props=props_, argv=["llama-server", "-ngl", "all", "-fa", "auto"],
                          hardware={**HARDWARE, "driver": None}, model_files=files)
    labels = info_labels(fp)
    assert labels["model_size"] == "100,200,300"
    assert labels["model_sha256"] == f"{'cd' * 32},,{'cd' * 32}"
    assert labels["batch"] == "" and labels["driver"] == "" and labels["n_gpu_layers"] == "all"
    back = from_info_labels({**labels, "lane": "a", "node": "n1", "job": "exporter"})
    assert {p: back[p] for p in PARTS} == {p: fp[p] for p in PARTS}
    assert set(back["unknown"]) >= {k for k in fp["unknown"] if k != "runtime"}
    assert back["digest"] == fp["digest"]
    router = from_info_labels({**labels, "model": "big", "model_path": labels["model"]})
    assert router["model"] == fp["model"]  # on a router the path is in model_path


def test_empty_labels_read_as_unknown() -> None:
    back = from_info_labels(dict.fromkeys(INFO_LABELS, ""))
    assert back["model"] == {"path": None, "files": None, "meta": None}
    assert all(v is None for v in back["settings"].values())
    assert "settings.slots" in back["unknown"] and back["digest"] == digest(back)


# -- compare, describe and assess -------------------------------------------------------------------------


def test_compare_names_what_changed_and_describe_says_it_on_one_line() -> None:
    measured = full()
    live = full(props={**props("dense_np4"), "total_slots": 2, "build_info": "b6123-abc1234"})
    changes = compare(measured, live)
    assert changes == [{"field": "runtime.build", "measured": "b0-unknown", "live": "b6123-abc1234"},
                       {"field": "settings.slots", "measured": 4, "live": 2}]
    assert describe_changes(changes) == "runtime.build b0-unknown -> b6123-abc1234; settings.slots 4 -> 2"
    assert describe_changes([]) == ""
    fa = compare(measured, full(argv=["llama-server", "-fa", "off"]))
    assert describe_changes([c for c in fa if c["field"] == "settings.flash_attn"]) == "settings.flash_attn on -> off"


def test_a_field_null_on_either_side_is_not_compared() -> None:
    measured = full()
    blind = node_fingerprint(props=None, argv=None, hardware=None, model_files=None)
    assert compare(measured, blind) == [] == compare(blind, measured)
    assert compare(None, measured) == [] == compare(measured, None)


def test_model_files_by_name_and_size_and_each_hash_both_sides_have() -> None:
    def files(name: str = "m.gguf", size: int = 10, sha: str | None = "aa" * 32,
              sample: str | None = "ee" * 32) -> list[dict[str, Any]]:
        return [{"name": name, "size": size, "sample_sha256": sample, "sha256": sha}]

    base = full(model_files=files())
    assert compare(base, full(model_files=files(sha=None))) == []
    resized = compare(base, full(model_files=files(size=11)))
    assert resized == [{"field": "model.files", "measured": [{"name": "m.gguf", "size": 10}],
                        "live": [{"name": "m.gguf", "size": 11}]}]
    assert describe_changes(resized) == "model.files m.gguf (10 B) -> m.gguf (11 B)"
    requant = compare(base, full(model_files=files(sha="bb" * 32)))
    assert requant == [{"field": "model.files[0].sha256", "measured": "aa" * 32, "live": "bb" * 32}]
    assert describe_changes(requant) == "model.files[0].sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb"
    # swapped in place while the full hash is pending on one side: the sampled hash tells it at once
    swapped = compare(full(model_files=files(sha=None)), full(model_files=files(sample="ff" * 32)))
    assert [c["field"] for c in swapped] == ["model.files[0].sample_sha256"]
    moved = full(props={**props("dense_np4"), "model_path": "/elsewhere/m.gguf"}, model_files=files())
    assert compare(base, moved) == []  # same file elsewhere: the same model
    remote = full(props={**props("dense_np4"), "model_path": "/elsewhere/m.gguf"}, model_files=None)
    assert [c["field"] for c in compare(base, remote)] == ["model.path"]  # no files: the path tells


def _remote(**overrides: Any) -> dict[str, Any]:
    """What a remote exporter sees: /props and /v1/models, nothing of the process or its files."""
    kwargs: dict[str, Any] = {"props": props("dense_np4"), "argv": None, "hardware": None, "model_files": None,
                              "model_meta": META, "reasons": {"argv": "remote runtime"}}
    kwargs.update(overrides)
    return node_fingerprint(**kwargs)


def test_assess_is_valid_only_where_what_decides_capacity_was_compared() -> None:
    valid = assess(full(), full())
    assert valid == {"state": "valid", "changes": [], "reason": None,
                     "compared": {"fields": len(COMPARED_FIELDS), "of": len(COMPARED_FIELDS), "not_compared": []}}
    # a remote exporter: nothing differs, but the batch sizes and the KV layout were never compared, and a
    # b0-unknown build string names no build: unknown, saying how much was compared and what was not
    remote = assess(_remote(), _remote())
    assert remote["state"] == "unknown" and remote["changes"] == []
    assert remote["compared"]["fields"] < remote["compared"]["of"]
    for gap in ("the build identity", "settings.batch", "settings.ubatch", "settings.kv_unified"):
        assert gap in remote["reason"], gap
    assert "the model identity" not in remote["reason"]  # ftype and parameters said by the runtime
    assert "remote runtime" in remote["reason"]
    # what differs is said whatever else was compared
    moved = assess(_remote(), _remote(props={**props("dense_np4"), "total_slots": 2}))
    assert moved["state"] == "changed" and "settings.slots 4 -> 2" in moved["reason"]


def test_a_runtime_down_or_loading_makes_the_answer_unknown_never_valid() -> None:
    for state in ("down", "loading"):
        silent = node_fingerprint(props=None, argv=None, hardware=HARDWARE, model_files=None, state=state,
                                  reasons={"runtime": "no answer"})
        for live in (silent, from_info_labels(info_labels(silent))):
            got = assess(full(), live)
            assert got["state"] == "unknown" and got["reason"].startswith(f"the runtime is {state}"), got
            assert got["compared"]["fields"] == len(HARDWARE_FIELDS)


@pytest.mark.parametrize(("measured", "live", "state", "field"), [
    # two pip builds: one build string, two binaries
    ({"runtime": {**RUNTIME, "binary_sha256": "aa" * 32}}, {"runtime": {**RUNTIME, "binary_sha256": "bb" * 32}},
     "changed", "runtime.binary_sha256"),
    # one commit built for CUDA and for the CPU
    ({"runtime": {**RUNTIME, "binary_sha256": None, "backend": "cuda"}},
     {"runtime": {**RUNTIME, "binary_sha256": None, "backend": "cpu"}}, "changed", "runtime.backend"),
    # b0-unknown and nothing else: the build cannot be told
    ({"runtime": None}, {"runtime": None}, "unknown", None),
    # a build string that names a build is enough
    ({"runtime": None, "props": {**props("dense_np4"), "build_info": "b7000-1a2b3c"}},
     {"runtime": None, "props": {**props("dense_np4"), "build_info": "b7000-1a2b3c"}}, "valid", None),
    # split -c 32768 -np 4 against unified -c 8192 -np 4 -kvu: the same 8192 per slot, 4x the KV
    ({"argv": ["llama-server", "-np", "4", "-c", "32768", "-b", "512", "-ub", "128"]},
     {"argv": ["llama-server", "-np", "4", "-c", "8192", "-kvu", "-b", "512", "-ub", "128"]},
     "changed", "settings.kv_unified"),
    # threads, a draft model, experts on the CPU, the split mode, cache reuse: each is a change
    ({}, {"argv": [*ARGV, "-t", "4"]}, "changed", "settings.threads"),
    ({}, {"argv": [*ARGV, "-md", "other.gguf"]}, "changed", "settings.draft_model"),
    ({}, {"argv": [*ARGV, "-ncmoe", "20"]}, "changed", "settings.n_cpu_moe"),
    ({}, {"argv": [*ARGV, "-sm", "row"]}, "changed", "settings.split_mode"),
    ({}, {"argv": [*ARGV, "--cache-reuse", "0"]}, "changed", "settings.cache_reuse"),
])
def test_what_changes_capacity_is_seen(measured: dict[str, Any], live: dict[str, Any], state: str,
                                       field: str | None) -> None:
    got = assess(full(**measured), from_info_labels(info_labels(full(**live))))
    assert got["state"] == state, got
    if field is not None:
        assert field in [c["field"] for c in got["changes"]]


# -- hardware helpers -------------------------------------------------------------------------------------


def test_gpu_and_cpu_facts() -> None:
    two = [{"name": "NVIDIA H200", "memory_bytes": 100, "driver": "570"}] * 2
    assert gpu_facts(two) == {"gpu": "NVIDIA H200", "gpu_count": 2, "gpu_memory_bytes": 200, "driver": "570"}
    mixed = gpu_facts([{"name": "A", "memory_bytes": 1}, {"name": "B", "memory_bytes": 2}])
    assert mixed == {"gpu": "A + B", "gpu_count": 2, "gpu_memory_bytes": 3, "driver": None}
    assert gpu_facts([]) == {"gpu": None, "gpu_count": 0, "gpu_memory_bytes": 0, "driver": None}
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  9654 96-Core Processor\n"
    assert cpu_facts(cpuinfo, 2) == "AMD EPYC 9654 96-Core Processor (2 cores)"
    assert cpu_facts("processor : 0\n", 2) is None
