"""Router mode, KV-cache usage and speculative counters, on payloads recorded from the real llama-server
(tests/fixtures/llamacpp/router/ and draft/), through an in-process transport."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.kvcache import SlotKv, kv_usage, layout_from_argv, resolve_layout
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.llamacpp_parse import llamacpp_snapshot, parse_props, parse_slot_kv, reply_error
from satbench.exporter.occupancy import OccupancyBook
from satbench.exporter.process import FakeProcessReader, ProcessReading
from satbench.exporter.router import parse_models
from satbench.exporter.snapshot import EndpointReply
from tests.exporter.router_support import DENSE, DRAFT, MOE, ROUTER, RouterRuntime


def make(
    runtime: RouterRuntime, adapter: dict | None = None, **kwargs
) -> tuple[CollectorRegistry, RuntimeCollector]:
    client = httpx.Client(transport=runtime.transport())
    collector = RuntimeCollector(LlamaCppAdapter("http://router.test", client=client, **(adapter or {})), **kwargs)
    registry = CollectorRegistry()
    registry.register(collector)
    return registry, collector


def reply(name: str, file: Path, status: int = 200) -> EndpointReply:
    return EndpointReply(name, status, file.read_text(), 0.01)


def names(registry: CollectorRegistry) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in registry.collect():
        for s in family.samples:
            out.setdefault(s.name, []).append(s.labels)
    return out


def test_the_router_is_told_by_its_props_and_its_models_by_v1_models() -> None:
    assert parse_props((ROUTER / "props_router.json").read_text()).role == "router"
    assert parse_props((ROUTER / "props_tiny-llama-dense.json").read_text()).role == ""
    models = {m.name: m for m in parse_models((ROUTER / "v1_models.json").read_text())}
    assert {n: m.status for n, m in models.items()} == {DENSE: "loaded", MOE: "unloaded"}
    assert models[DENSE].loaded and not models[MOE].loaded
    assert models[DENSE].args[-2:] == ("--parallel", "2")
    with pytest.raises(ValueError):
        parse_models('{"object":"list"}')


def test_without_model_the_router_answers_400_and_a_single_model_reading_says_so() -> None:
    no_model = reply("metrics", ROUTER / "metrics_no_model.json", 400)
    assert reply_error(no_model) == "HTTP 400: model name is missing from the request"
    runtime = RouterRuntime.recorded()
    registry, _ = make(runtime, adapter={"router": False})  # told wrongly: one model, so today's series
    value = registry.get_sample_value
    assert value("runtime_up") == 1
    assert value("runtime_metrics_up") == 0 and value("runtime_slots_up") == 0
    assert value("runtime_http_status", {"source": "metrics"}) == 400
    assert value("runtime_models_up") is None


def test_router_mode_publishes_each_loaded_model_with_a_model_label() -> None:
    runtime = RouterRuntime.recorded()
    registry, _ = make(runtime, process_reader=FakeProcessReader(ProcessReading(7, 1e8, ("llama-server",))))
    value = registry.get_sample_value
    dense = {"model": DENSE}
    assert value("runtime_up") == 1 and value("runtime_models_up") == 1 and value("runtime_props_up") == 1
    assert value("runtime_model_loaded", dense) == 1
    assert value("runtime_model_loaded", {"model": MOE}) == 0  # unloaded: reported, not an outage
    assert value("runtime_model_status", {"model": MOE, "status": "unloaded"}) == 1
    assert value("runtime_model_status", {"model": MOE, "status": "loaded"}) == 0
    assert value("runtime_model_status", {"model": DENSE, "status": "loaded"}) == 1
    for source in ("metrics", "slots", "props"):
        assert value(f"runtime_{source}_up", dense) == 1
        assert value("runtime_http_status", {"source": source, "model": DENSE}) == 200
        assert value(f"runtime_{source}_up", {"model": MOE}) is None  # never fetched
    assert value("runtime_http_status", {"source": "models"}) == 200
    assert value("runtime_slots", {"state": "idle", **dense}) == 2
    assert value("runtime_slots_configured", dense) == 2
    assert value("runtime_queue_depth", dense) == 0
    assert value("runtime_prompt_tokens_total", dense) == 132
    assert value("runtime_prompt_tokens_cached_total", dense) == 58
    assert value("runtime_output_tokens_total", dense) == 24
    assert value("runtime_spec_drafts_total", dense) == 0
    assert value("runtime_info", {"flavour": "llamacpp", "model": DENSE, "build_info": "b0-unknown"}) == 1
    assert value("runtime_queue_depth") is None  # no unlabelled per-model series in router mode
    series = names(registry)
    per_model = [n for n in series if n.startswith(("runtime_slots", "runtime_queue", "runtime_kv", "runtime_spec"))]
    assert per_model and all(all("model" in labels for labels in series[n]) for n in per_model)
    # only the loaded model was asked for, always without autoload; never an unloaded model
    for path in ("/metrics", "/slots", "/props"):
        asked = [q for q in runtime.asked(path) if q]
        assert asked and all(q == {"model": DENSE, "autoload": "false"} for q in asked), path


def test_props_of_each_model_are_cached_and_models_refreshed_every_scrape() -> None:
    runtime = RouterRuntime.recorded()
    registry, _ = make(runtime)
    for _ in range(3):
        assert registry.get_sample_value("runtime_model_loaded", {"model": DENSE}) == 1
    assert len(runtime.asked("/v1/models")) == 3
    assert len(runtime.asked("/props")) == 2  # the router's once, the model's once
    assert registry.get_sample_value("runtime_props_cached", {"model": DENSE}) == 1
    runtime.set("/v1/models", "", "v1_models.json")
    doc = json.loads((ROUTER / "v1_models.json").read_text())
    doc["data"][0]["status"]["value"] = "unloaded"
    runtime.routes[("/v1/models", "")] = (200, json.dumps(doc))
    assert registry.get_sample_value("runtime_model_loaded", {"model": DENSE}) == 0
    assert registry.get_sample_value("runtime_slots_up", {"model": DENSE}) is None
    assert registry.get_sample_value("runtime_up") == 1


def test_kv_usage_on_the_busy_slot_fixture_with_split_kv() -> None:
    slots = parse_slot_kv((ROUTER / "slots_busy_tiny-llama-dense.json").read_text())
    assert slots == (SlotKv(1024, 41, False), SlotKv(1024, 241, True))
    kv = kv_usage(slots or (), "split")
    assert kv is not None and (kv.active_tokens, kv.idle_tokens, kv.capacity_tokens) == (241, 41, 2048)
    assert kv.ratio == pytest.approx(241 / 2048)
    # the model's argv says --parallel 2, and the router's environment (read: it holds no LLAMA_ARG_*) adds
    # nothing: split
    router = FakeProcessReader(ProcessReading(7, 1e8, ("llama-server", "--models-dir", "models"), environ=()))
    registry, _ = make(RouterRuntime.recorded(busy=True), process_reader=router)
    value = registry.get_sample_value
    dense = {"model": DENSE}
    assert value("runtime_kv_cache_tokens", {"state": "active", **dense}) == 241
    assert value("runtime_kv_cache_tokens", {"state": "idle", **dense}) == 41
    assert value("runtime_kv_cache_capacity_tokens", {"kv_layout": "split", **dense}) == 2048
    assert value("runtime_kv_cache_usage_ratio", dense) == pytest.approx(241 / 2048)
    assert value("runtime_slots", {"state": "decode", **dense}) == 1
    # a remote router: its environment may hold LLAMA_ARG_KV_UNIFIED, so the layout is unknown, published with
    # the least capacity it can have and the most usage, never a quarter of it
    registry, _ = make(RouterRuntime.recorded(busy=True))
    value = registry.get_sample_value
    assert value("runtime_kv_cache_capacity_tokens", {"kv_layout": "unknown", **dense}) == 1024
    assert value("runtime_kv_cache_usage_ratio", dense) == pytest.approx(241 / 1024)


@pytest.mark.parametrize(
    ("argv", "layout"),
    [
        (["llama-server", "-m", "x.gguf"], "unified"),  # -np auto: 4 slots, unified (tools/server/server.cpp)
        (["llama-server", "-np", "-1"], "unified"),
        (["llama-server", "-np", "-1", "-no-kvu"], "unified"),  # auto forces it
        (["llama-server", "-np", "4"], "split"),
        (["llama-server", "--parallel=2"], "split"),
        (["llama-server", "-np", "4", "-kvu"], "unified"),
        (["llama-server", "--kv-unified", "--no-kv-unified", "-np", "4"], "split"),  # the last one wins
        (["llama-server", "-no-kvu"], "unified"),  # -np left out is auto, which is unified whatever -kvu says
        (["llama-server", "--kv-unified-per-slot", "512", "-np", "2"], "split"),  # not --kv-unified
        (["/opt/llama.cpp/bin/llama", "serve", "-np", "2"], "split"),  # the unified binary
        (["python", "-m", "satbench.cli", "sim", "-np", "2"], "split"),  # the simulator takes the same flags
        (["python", "-m", "satbench.cli", "sim"], None),  # its profile's layout: its /props says it
        (["python", "-m", "pytest", "-x"], None),  # another program: its flags tell nothing
        (["llama-server", "-np", "many"], None),
        ([], None),
    ],
)
def test_layout_from_argv_with_the_environment_read(argv: list[str], layout: str | None) -> None:
    assert layout_from_argv(argv, {}) == layout


@pytest.mark.parametrize(
    ("argv", "environ", "layout"),
    [
        (["llama-server"], {"LLAMA_ARG_N_PARALLEL": "2"}, "split"),  # the official images configure it so
        (["llama-server"], {"LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_KV_UNIFIED": "true"}, "unified"),
        (["llama-server", "-np", "2"], {"LLAMA_ARG_KV_UNIFIED": "1"}, "unified"),
        (["llama-server", "-np", "2", "-no-kvu"], {"LLAMA_ARG_KV_UNIFIED": "1"}, "split"),  # the command line wins
        (["llama-server", "-np", "3"], {"LLAMA_ARG_N_PARALLEL": "-1"}, "split"),
        (["llama-server"], {"LLAMA_ARG_N_PARALLEL": "4", "LLAMA_ARG_NO_KV_UNIFIED": "1"}, "split"),
        # an environment that cannot be read: only what the command line decides alone is known
        (["llama-server", "-np", "-1"], None, "unified"),
        (["llama-server", "-np", "4", "-kvu"], None, "unified"),
        (["llama-server", "-np", "4"], None, None),
        (["llama-server", "-m", "x.gguf"], None, None),
    ],
)
def test_layout_from_argv_and_the_llama_arg_environment(argv: list[str], environ: dict[str, str] | None,
                                                         layout: str | None) -> None:
    assert layout_from_argv(argv, environ) == layout


def test_the_operator_overrides_and_nothing_known_is_unknown_not_assumed() -> None:
    assert resolve_layout("yes", ["-np", "4"]) == "unified"
    assert resolve_layout("no", []) == "split"
    assert resolve_layout("auto", None) == "unknown"
    assert resolve_layout("auto", None, props={"simulator": {"kv_unified": False}}) == "split"  # the runtime says
    assert resolve_layout("auto", None, slots=(SlotKv(2048, 0, False),)) == "split"  # one slot: one cache
    proven = (SlotKv(1024, 900, True), SlotKv(1024, 800, True))  # more than one unified 1024 could hold
    assert resolve_layout("auto", None, slots=proven) == "split"
    assert resolve_layout("auto", None, slots=(SlotKv(1024, 900, True), SlotKv(1024, 0, False))) == "unknown"
    unified = kv_usage((SlotKv(2048, 100, True), SlotKv(2048, 50, False)), "unified")
    assert unified is not None and unified.capacity_tokens == 2048 and unified.ratio == pytest.approx(100 / 2048)
    assert kv_usage((), "split") is None


def test_single_model_kv_layout_comes_from_the_process_argv_or_is_labelled_unknown() -> None:
    runtime = RouterRuntime.recorded(busy=True)
    runtime.routes[("/metrics", "")] = (200, (ROUTER / "metrics_busy_tiny-llama-dense.txt").read_text())
    runtime.routes[("/slots", "")] = (200, (ROUTER / "slots_busy_tiny-llama-dense.json").read_text())
    runtime.routes[("/props", "")] = (200, (ROUTER / "props_tiny-llama-dense.json").read_text())
    unified = FakeProcessReader(ProcessReading(7, 1e8, ("llama-server", "-c", "1024"), environ=()))
    registry, _ = make(runtime, process_reader=unified)
    assert registry.get_sample_value("runtime_kv_cache_capacity_tokens", {"kv_layout": "unified"}) == 1024
    assert registry.get_sample_value("runtime_kv_cache_usage_ratio") == pytest.approx(241 / 1024)
    assert registry.get_sample_value("runtime_model_loaded") is None  # single model: no router series
    env = FakeProcessReader(ProcessReading(7, 1e8, ("llama-server", "-c", "2048"),
                                           environ=(("LLAMA_ARG_N_PARALLEL", "2"),)))
    registry, _ = make(runtime, process_reader=env)  # the official images' way: -np from the environment
    assert registry.get_sample_value("runtime_kv_cache_capacity_tokens", {"kv_layout": "split"}) == 2048
    registry, _ = make(runtime)
    assert registry.get_sample_value("runtime_kv_cache_capacity_tokens", {"kv_layout": "unknown"}) == 1024
    registry, _ = make(runtime, process_reader=unified, kv_unified="no")
    assert registry.get_sample_value("runtime_kv_cache_capacity_tokens", {"kv_layout": "split"}) == 2048


def test_spec_counters_from_a_draft_model_and_absent_from_a_build_without_them() -> None:
    draft = llamacpp_snapshot(
        EndpointReply("health", 200, '{"status":"ok"}', 0.0), reply("metrics", DRAFT / "metrics.txt"),
        reply("slots", DRAFT / "slots.json"), reply("props", DRAFT / "props.json"),
    )
    assert (draft.spec_draft_tokens_total, draft.spec_accepted_tokens_total, draft.spec_drafts_total) == (30, 30, 8)
    lines = [ln for ln in (DRAFT / "metrics.txt").read_text().splitlines() if "spec_decode" not in ln]
    older = llamacpp_snapshot(
        EndpointReply("health", 200, '{"status":"ok"}', 0.0), EndpointReply("metrics", 200, "\n".join(lines), 0.0),
        reply("slots", DRAFT / "slots.json"), reply("props", DRAFT / "props.json"),
    )
    assert older.source("metrics").up and older.spec_drafts_total is None and older.output_tokens_total == 40


@pytest.mark.parametrize(
    ("body", "metrics_up", "queue"),
    [
        ("# HELP other_total x\nother_total 3\nvllm:num_requests_waiting 2\n", 0, None),  # nothing we read
        ("llamacpp:requests_deferred 4\nllamacpp:brand_new_gauge 9\nfoo{a=\"b\"} 1\n", 1, 4),  # unknown: ignored
    ],
)
def test_a_metrics_body_without_known_series_leaves_the_runtime_up(
    body: str, metrics_up: int, queue: int | None
) -> None:
    runtime = RouterRuntime.recorded()
    runtime.routes[("/metrics", DENSE)] = (200, body)
    registry, _ = make(runtime)
    value = registry.get_sample_value
    assert value("runtime_up") == 1 and value("runtime_slots_up", {"model": DENSE}) == 1
    assert value("runtime_metrics_up", {"model": DENSE}) == metrics_up
    assert value("runtime_queue_depth", {"model": DENSE}) == queue


def test_one_model_per_scrape_and_an_unknown_model_is_reported_not_an_error() -> None:
    runtime = RouterRuntime.recorded()
    _, collector = make(runtime, process_reader=FakeProcessReader(ProcessReading(7, 1e8)))
    one = CollectorRegistry()
    one.register(collector.for_model(DENSE))
    assert one.get_sample_value("runtime_model_loaded", {"model": DENSE}) == 1
    assert one.get_sample_value("runtime_model_loaded", {"model": MOE}) is None
    assert one.get_sample_value("runtime_process_up") == 1 and one.get_sample_value("runtime_up") == 1
    unknown = CollectorRegistry()
    unknown.register(collector.for_model("no/such:model"))
    assert unknown.get_sample_value("runtime_model_loaded", {"model": "no/such:model"}) == 0
    assert unknown.get_sample_value("runtime_model_status", {"model": "no/such:model", "status": "unknown"}) == 1
    assert unknown.get_sample_value("runtime_up") == 1
    assert all(q.get("model") in (None, DENSE) for _, q in runtime.requests)


def test_a_failing_model_list_is_its_own_source() -> None:
    runtime = RouterRuntime.recorded()
    runtime.routes[("/v1/models", "")] = (500, '{"error":{"code":500,"message":"boom"}}')
    registry, _ = make(runtime, adapter={"router": True})
    assert registry.get_sample_value("runtime_models_up") == 0
    assert registry.get_sample_value("runtime_http_status", {"source": "models"}) == 500
    assert registry.get_sample_value("runtime_up") == 1


def test_decode_counters_of_each_model_are_kept_apart() -> None:
    book = OccupancyBook()
    assert book.step("a", 100, 200, 2).interval_ratio is None
    assert book.step("b", 10, 10, 2).interval_ratio is None  # b's first scrape, not a step back from a
    assert book.step("a", 110, 220, 2).interval_ratio == 1.0
    assert book.step("b", 20, 15, 2).interval_ratio == 0.25
