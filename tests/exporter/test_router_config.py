"""The router flags, their validation, and ``/metrics?model=`` on a single-model node (ignored)."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
import pytest

from satbench.exporter.cli import configure
from satbench.exporter.server import ExporterConfig, build_collector, serve
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime
from tests.exporter.test_wire import samples


@pytest.mark.parametrize(
    ("argv", "router", "model", "kv"),
    [
        ([], "auto", None, "auto"),
        (["--router"], "yes", None, "auto"),
        (["--router", "no", "--kv-unified", "yes"], "no", None, "yes"),
        (["--model", "org/m:Q8_0"], "auto", "org/m:Q8_0", "auto"),
    ],
)
def test_router_flags(argv: list[str], router: str, model: str | None, kv: str) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--runtime-url", "http://127.0.0.1:8080", *argv])
    assert (args.router, args.model, args.kv_unified) == (router, model, kv)


@pytest.mark.parametrize(
    ("kwargs", "mode"),
    [({}, None), ({"router": "yes"}, True), ({"router": "no"}, False), ({"model": "m"}, True)],
)
def test_router_mode_is_told_or_detected(kwargs: dict, mode: bool | None) -> None:
    assert ExporterConfig(runtime_url="http://h:1", **kwargs).router_mode is mode


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"router": "maybe"}, "--router"),
        ({"model": " "}, "--model"),
        ({"model": "m", "router": "no"}, "--router no"),
        ({"kv_unified": "true"}, "--kv-unified"),
    ],
)
def test_router_settings_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExporterConfig(runtime_url="http://h:1", **kwargs)


@pytest.mark.slow
def test_a_single_model_node_ignores_the_model_parameter(llamacpp_fixtures: Path) -> None:
    with LoopbackRuntime(FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np4")) as runtime:
        collector = build_collector(ExporterConfig(runtime_url=runtime.url, port=0, gpu="none"))
        server = serve(collector)
        try:
            plain = samples(httpx.get(server.url + "/metrics", timeout=5).text)  # tells the mode (/props)
            asked = len(runtime.runtime.requests)
            narrowed = samples(httpx.get(server.url + "/metrics", params={"model": "x"}, timeout=5).text)
        finally:
            server.close()
            collector.close()
        assert sorted(runtime.runtime.requests[asked:]) == ["/health", "/metrics", "/slots"]
    assert narrowed["runtime_queue_depth", ()] == plain["runtime_queue_depth", ()] == 6
    assert narrowed["runtime_slots", (("state", "decode"),)] == 4
    assert not any(name.startswith("runtime_model") for name, _ in narrowed)
    # dense_np4 ran --parallel 4 -c 16384; the process behind the port is this test runner, whose argv
    # tells nothing, and /slots (4 x 4096, 449 busy tokens) proves no layout: it is unknown and said so, with
    # the least capacity it can have (one slot's 4096, as a unified cache would hold), never assumed split
    assert narrowed["runtime_kv_cache_capacity_tokens", (("kv_layout", "unknown"),)] == 4096
