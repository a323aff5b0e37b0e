"""core.fingerprint: the shape, the sources (recorded llama-server /props and command lines), nulls with
their reasons, digests, the info-series round trip, comparing, and model files (splits, the hash cache)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from core import fingerprint as fpmod
from core import model_files
from core.fingerprint import (
    HARDWARE_FIELDS,
    INFO_LABELS,
    SETTINGS_FIELDS,
    ModelHasher,
    compare,
    cpu_facts,
    describe_changes,
    digest,
    from_info_labels,
    gpu_facts,
    info_labels,
    model_file_facts,
    node_fingerprint,
    policy_part,
    settings_from_argv,
    split_paths,
    workload_part,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"
PARTS = ("runtime", "model", "settings", "hardware")
HARDWARE = {"gpu": "NVIDIA H200", "gpu_count": 1, "gpu_memory_bytes": 150754820096, "driver": "570.86.15",
            "cpu": "AMD EPYC 9654 (2 cores)"}


def props(run: str, name: str = "props.json") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / run / name).read_text())
    return doc


def server_cmd(run: str) -> list[str]:
    return (FIXTURES / run / "server.cmd").read_text().split()


def full(**overrides: Any) -> dict[str, Any]:
    """A fingerprint with every field known (the recorded dense_np4 /props, a full command line)."""
    argv = ["llama-server", "-m", "models/tiny-llama-dense.gguf", "-np", "4", "-c", "16384", "-b", "512",
            "-ub", "128", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-ngl", "99"]
    files = [{"name": "tiny-llama-dense.gguf", "size": 38020096, "sha256": "ab" * 32}]
    kwargs: dict[str, Any] = {"props": props("dense_np4"), "argv": argv, "hardware": HARDWARE,
                              "model_files": files}
    kwargs.update(overrides)
    return node_fingerprint(**kwargs)


# -- shape and sources ------------------------------------------------------------------------------------


def test_shape_is_the_contracts() -> None:
    fp = full()
    assert set(fp) == {"digest", *PARTS, "unknown"}
    assert set(fp["runtime"]) == {"build"}
    assert set(fp["model"]) == {"path", "files"}
    assert tuple(fp["settings"]) == SETTINGS_FIELDS
    assert tuple(fp["hardware"]) == HARDWARE_FIELDS
    assert fp["digest"].startswith("sha256:") and len(fp["digest"]) == 7 + 64
    assert fp["unknown"] == {}
    assert fp["runtime"] == {"build": "b0-unknown"}
    assert fp["model"]["path"] == "models/tiny-llama-dense.gguf"
    assert fp["settings"] == {"slots": 4, "ctx_per_slot": 4096, "batch": 512, "ubatch": 128, "flash_attn": True,
                              "cache_type_k": "q8_0", "cache_type_v": "q8_0", "n_gpu_layers": 99}
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
    from_argv, _ = settings_from_argv(argv)  # the command line alone says the same
    assert (from_argv["slots"], from_argv["ctx_per_slot"]) == (slots, ctx)


def test_a_router_models_props_and_its_childs_argv() -> None:
    models = json.loads((FIXTURES / "router" / "v1_models.json").read_text())
    args = next(m["status"]["args"] for m in models["data"] if m["id"] == "tiny-llama-dense")
    fp = node_fingerprint(props=props("router", "props_tiny-llama-dense.json"), argv=args, hardware=None,
                          model_files=None)
    assert fp["settings"]["slots"] == 2 and fp["settings"]["ctx_per_slot"] == 1024  # -c 2048 -np 2
    assert fp["model"]["path"] == "models/tiny-llama-dense.gguf"
    router = node_fingerprint(props=props("router", "props_router.json"), argv=None, hardware=None,
                              model_files=None)
    assert router["model"]["path"] is None  # the router itself says "none"
    assert router["settings"]["ctx_per_slot"] is None  # and n_ctx 0


def test_props_wins_over_the_command_line() -> None:
    argv = ["llama-server", "-np", "8", "-c", "4096"]  # /props (what the server did) says 4 x 4096
    fp = node_fingerprint(props=props("dense_np4"), argv=argv, hardware=None, model_files=None)
    assert fp["settings"]["slots"] == 4 and fp["settings"]["ctx_per_slot"] == 4096


def test_argv_fills_what_props_lacks_when_props_is_gone() -> None:
    argv = ["llama-server", "-np", "2", "-c", "8192", "-kvu"]
    fp = node_fingerprint(props=None, argv=argv, hardware=None, model_files=None, reasons={"props": "HTTP 500"})
    assert fp["settings"]["slots"] == 2
    assert fp["settings"]["ctx_per_slot"] == 8192  # a unified cache: every slot may use all of it
    assert fp["unknown"]["runtime.build"] == "the runtime does not report it: no /props (HTTP 500)"


@pytest.mark.parametrize(("argv", "want"), [
    (["--parallel", "3", "--ctx-size", "3000"], {"slots": 3, "ctx_per_slot": 1000}),
    (["--parallel=3", "--ctx-size=3000"], {"slots": 3, "ctx_per_slot": 1000}),
    (["--batch-size", "1024", "--ubatch-size=256"], {"batch": 1024, "ubatch": 256}),
    (["-fa"], {"flash_attn": True}),  # bare, as builds before -fa took a value
    (["-fa", "-np", "2"], {"flash_attn": True, "slots": 2}),
    (["--flash-attn", "off"], {"flash_attn": False}),
    (["-fa", "auto"], {"flash_attn": "auto"}),
    (["--cache-type-k", "Q4_0", "--cache-type-v", "f16"], {"cache_type_k": "q4_0", "cache_type_v": "f16"}),
    (["--n-gpu-layers", "33"], {"n_gpu_layers": 33}),
    (["--gpu-layers", "all"], {"n_gpu_layers": "all"}),
    (["-ngl", "10", "-ngl", "20"], {"n_gpu_layers": 20}),  # the last one counts
])
def test_settings_from_argv(argv: list[str], want: dict[str, Any]) -> None:
    got, _ = settings_from_argv(["llama-server", *argv])
    assert {k: got[k] for k in want} == want
    assert set(got) == set(SETTINGS_FIELDS)


@pytest.mark.parametrize(("argv", "field", "why"), [
    (["-np", "-1"], "slots", "-np -1 (auto)"),
    ([], "slots", "LLAMA_ARG_N_PARALLEL"),
    (["-c", "0", "-np", "2"], "ctx_per_slot", "-c 0: the context comes from the model"),
    (["-c", "4096"], "ctx_per_slot", "over a slot count the command line does not fix"),
    (["-b", "lots"], "batch", "unreadable batch 'lots'"),
    ([], "cache_type_k", "the build's default applies"),
])
def test_what_argv_cannot_tell_is_null_with_a_reason(argv: list[str], field: str, why: str) -> None:
    got, reasons = settings_from_argv(["llama-server", *argv])
    assert got[field] is None
    assert why in reasons[field]


def test_nothing_readable_gives_nulls_each_with_its_reason() -> None:
    fp = node_fingerprint(props=None, argv=None, hardware=None, model_files=None,
                          reasons={"props": "timed out after 0.5s", "argv": "remote runtime",
                                   "model.files": "the runtime is on another host"})
    assert all(v is None for part in ("settings", "hardware") for v in fp[part].values())
    assert fp["runtime"]["build"] is None and fp["model"] == {"path": None, "files": None}
    nulls = {"runtime.build", "model.path", "model.files"} | {f"settings.{f}" for f in SETTINGS_FIELDS} | {
        f"hardware.{f}" for f in HARDWARE_FIELDS}
    assert set(fp["unknown"]) == nulls
    assert fp["unknown"]["settings.flash_attn"] == (
        "the runtime does not report it: no /props (timed out after 0.5s), and the exporter cannot read the "
        "runtime's command line (remote runtime)")
    assert fp["unknown"]["model.files"] == "the runtime is on another host"


def test_props_without_a_field_says_so() -> None:
    fp = node_fingerprint(props=props("dense_np4"), argv=None, hardware=None, model_files=None,
                          reasons={"argv": "remote runtime"})
    assert fp["settings"]["flash_attn"] is None
    assert fp["unknown"]["settings.flash_attn"] == (
        "the runtime does not report it: /props has no flash_attn, and the exporter cannot read the runtime's "
        "command line (remote runtime)")
    assert "settings.slots" not in fp["unknown"]


def test_another_programs_argv_is_ignored() -> None:
    fp = node_fingerprint(props=None, argv=["/usr/bin/python3", "-m", "pytest", "-np", "9"], hardware=None,
                          model_files=None)
    assert fp["settings"]["slots"] is None
    assert "not llama-server (python3)" in fp["unknown"]["settings.slots"]
    sim = node_fingerprint(props=None, argv=["python", "-m", "satbench.cli", "sim", "-np", "9"], hardware=None,
                           model_files=None)
    assert sim["settings"]["slots"] == 9  # satbench sim takes llama-server's flags


def test_hardware_nulls_take_the_callers_reasons() -> None:
    hardware = {**HARDWARE, "driver": None, "gpu": None}
    fp = node_fingerprint(props=None, argv=None, hardware=hardware, model_files=None,
                          reasons={"hardware.driver": "simulated", "hardware": "NVML unavailable"})
    assert fp["unknown"]["hardware.driver"] == "simulated"
    assert fp["unknown"]["hardware.gpu"] == "NVML unavailable"
    assert fp["hardware"]["gpu_count"] == 1


def test_an_unhashed_file_is_null_with_its_reason() -> None:
    files = [{"name": "m.gguf", "size": 10, "sha256": None, "unknown": "hashing"}]
    fp = full(model_files=files)
    assert fp["model"]["files"] == [{"name": "m.gguf", "size": 10, "sha256": None}]
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
    back = from_info_labels(labels)
    assert {p: back[p] for p in PARTS} == {p: fp[p] for p in PARTS}
    assert back["digest"] == fp["digest"] == labels["digest"]
    assert compare(fp, back) == []


def test_round_trip_of_unknowns_splits_and_strings() -> None:
    files = [{"name": f"big-0000{i}-of-00003.gguf", "size": 100 * i, "sha256": ("cd" * 32 if i != 2 else None)}
             for i in (1, 2, 3)]
    props_ = {**props("dense_np4"), "model_path": "/m/big-00001-of-00003.gguf"}
    fp = node_fingerprint(props=props_, argv=["llama-server", "-ngl", "all", "-fa", "auto"],
                          hardware={**HARDWARE, "driver": None}, model_files=files)
    labels = info_labels(fp)
    assert labels["model_size"] == "100,200,300"
    assert labels["model_sha256"] == f"{'cd' * 32},,{'cd' * 32}"
    assert labels["batch"] == "" and labels["driver"] == "" and labels["n_gpu_layers"] == "all"
    back = from_info_labels({**labels, "lane": "a", "node": "n1", "job": "exporter"})
    assert {p: back[p] for p in PARTS} == {p: fp[p] for p in PARTS}
    assert set(back["unknown"]) == set(fp["unknown"])
    assert back["digest"] == fp["digest"]
    router = from_info_labels({**labels, "model": "big", "model_path": labels["model"]})
    assert router["model"] == fp["model"]  # on a router the path is in model_path


def test_empty_labels_read_as_unknown() -> None:
    back = from_info_labels(dict.fromkeys(INFO_LABELS, ""))
    assert back["model"] == {"path": None, "files": None}
    assert all(v is None for v in back["settings"].values())
    assert "settings.slots" in back["unknown"] and back["digest"] == digest(back)


# -- compare and describe ---------------------------------------------------------------------------------


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


def test_model_files_by_name_and_size_and_sha_only_when_both_known() -> None:
    def files(name: str = "m.gguf", size: int = 10, sha: str | None = "aa" * 32) -> list[dict[str, Any]]:
        return [{"name": name, "size": size, "sha256": sha}]

    base = full(model_files=files())
    assert compare(base, full(model_files=files(sha=None))) == []
    resized = compare(base, full(model_files=files(size=11)))
    assert resized == [{"field": "model.files", "measured": [{"name": "m.gguf", "size": 10}],
                        "live": [{"name": "m.gguf", "size": 11}]}]
    assert describe_changes(resized) == "model.files m.gguf (10 B) -> m.gguf (11 B)"
    requant = compare(base, full(model_files=files(sha="bb" * 32)))
    assert requant == [{"field": "model.files[0].sha256", "measured": "aa" * 32, "live": "bb" * 32}]
    assert describe_changes(requant) == "model.files[0].sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb"
    moved = full(props={**props("dense_np4"), "model_path": "/elsewhere/m.gguf"}, model_files=files())
    assert compare(base, moved) == []  # same file elsewhere: the same model
    remote = full(props={**props("dense_np4"), "model_path": "/elsewhere/m.gguf"}, model_files=None)
    assert [c["field"] for c in compare(base, remote)] == ["model.path"]  # no files: the path tells


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


# -- model files ------------------------------------------------------------------------------------------


def test_split_detection() -> None:
    assert split_paths("/m/model.gguf") == [Path("/m/model.gguf")]
    names = [p.name for p in split_paths("/m/qwen-q4-00002-of-00003.gguf")]
    assert names == ["qwen-q4-00001-of-00003.gguf", "qwen-q4-00002-of-00003.gguf", "qwen-q4-00003-of-00003.gguf"]
    assert split_paths("/m/x-00004-of-00003.gguf") == [Path("/m/x-00004-of-00003.gguf")]  # not a split set


def test_model_file_facts_of_splits(tmp_path: Path) -> None:
    datas = [b"first split", b"second", b"third and last"]
    for i, data in enumerate(datas, 1):
        (tmp_path / f"m-{i:05d}-of-00003.gguf").write_bytes(data)
    facts = model_file_facts(tmp_path / "m-00001-of-00003.gguf")
    assert facts == [{"name": f"m-{i:05d}-of-00003.gguf", "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                     for i, d in enumerate(datas, 1)]
    (tmp_path / "m-00002-of-00003.gguf").unlink()
    with pytest.raises(FileNotFoundError):
        model_file_facts(tmp_path / "m-00001-of-00003.gguf")


def test_a_file_is_hashed_once_per_size_and_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    real = model_files._hash_file

    def counting(path: Path) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(model_files, "_hash_file", counting)
    model = tmp_path / "one.gguf"
    model.write_bytes(b"x" * 1000)
    first = model_file_facts(model)
    assert model_file_facts(model) == first and len(calls) == 1
    model.write_bytes(b"y" * 1001)  # rewritten: a new size (and mtime), a new hash
    again = model_file_facts(model)
    assert len(calls) == 2 and again[0]["sha256"] == hashlib.sha256(b"y" * 1001).hexdigest()


def test_the_background_hasher_says_hashing_until_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    calls: list[Path] = []
    real = model_files._hash_file

    def slow(path: Path) -> str:
        calls.append(path)
        assert gate.wait(10)
        return real(path)

    monkeypatch.setattr(model_files, "_hash_file", slow)
    model = tmp_path / "big.gguf"
    model.write_bytes(b"z" * 4096)
    hasher = ModelHasher()
    try:
        for _ in range(3):  # asked on every scrape while it runs: queued once
            facts = model_file_facts(model, hasher=hasher)
            assert facts == [{"name": "big.gguf", "size": 4096, "sha256": None, "unknown": "hashing"}]
        fp = full(model_files=facts)
        assert fp["unknown"] == {"model.files[0].sha256": "hashing"}
        gate.set()
        assert hasher.wait(10)
        done = model_file_facts(model, hasher=hasher)
        assert done == [{"name": "big.gguf", "size": 4096, "sha256": hashlib.sha256(b"z" * 4096).hexdigest()}]
        assert len(calls) == 1 and hasher.hashed == 1
    finally:
        gate.set()
        hasher.close()


def test_the_background_hasher_reports_an_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(model_files, "_hash_file", refuse)
    model = tmp_path / "locked.gguf"
    model.write_bytes(b"q")
    hasher = ModelHasher()
    try:
        model_file_facts(model, hasher=hasher)
        assert hasher.wait(10)
        facts = model_file_facts(model, hasher=hasher)
        assert facts[0]["sha256"] is None and "Permission denied" in facts[0]["unknown"]
    finally:
        hasher.close()
