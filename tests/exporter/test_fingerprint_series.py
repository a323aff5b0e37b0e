"""``runtime_fingerprint_info`` and ``GET /fingerprint`` over real HTTP: against recorded llama-server payloads
(single model and router) and against the simulator started as a drop-in llama-server, restarted on the same
port with another slot count."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from satbench.core.fingerprint_compare import compare, describe_changes
from satbench.core.fingerprint_labels import INFO_LABELS, from_info_labels
from satbench.core.model_files import sample_sha256
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.gpu import FakeGpuReader, GpuDevice, GpuUnavailable
from satbench.exporter.live_fingerprint import LiveFingerprints
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.process import FakeProcessReader, ProcessReading
from satbench.exporter.server import ExporterConfig, ExporterServer, build_collector, serve
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime
from testkit.net import free_port, wait_http
from testkit.sim import REPO_ROOT
from tests.exporter.router_support import DENSE, MOE, RouterRuntime

PARTS = ("runtime", "model", "settings", "hardware")
CPU = ("Test CPU 9000 (2 cores)", None)
H200 = GpuDevice("0", "NVIDIA H200", 1e9, 150754820096.0, driver="570.86.15")


def info_series(url: str, **params: str) -> list[dict[str, str]]:
    text = httpx.get(url + "/metrics", params=params, timeout=10).text
    return [dict(s.labels) for f in text_string_to_metric_families(text) if f.name == "runtime_fingerprint_info"
            for s in f.samples]


def fingerprint(url: str, **params: str) -> Any:
    r = httpx.get(url + "/fingerprint", params=params, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    return r.json()


def parts(fp: dict[str, Any]) -> dict[str, Any]:
    return {p: fp[p] for p in PARTS}


# -- recorded llama-server payloads, on loopback ----------------------------------------------------------


@pytest.fixture
def dense(llamacpp_fixtures: Path) -> Iterator[LoopbackRuntime]:
    runtime = FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np4")
    runtime.set("/v1/models", llamacpp_fixtures / "dense_np4" / "models.json")  # its model's meta
    with LoopbackRuntime(runtime) as loop:
        yield loop


def exporter_for(collector: RuntimeCollector) -> Iterator[ExporterServer]:
    server = serve(collector)
    try:
        yield server
    finally:
        server.close()
        collector.close()


@pytest.fixture
def local_exporter(dense: LoopbackRuntime, llamacpp_fixtures: Path) -> Iterator[ExporterServer]:
    """The recorded dense_np4 node, its recorded command line (its environment not readable), one H200
    through (fake) NVML."""
    argv = tuple((llamacpp_fixtures / "dense_np4" / "server.cmd").read_text().split())
    collector = RuntimeCollector(
        LlamaCppAdapter(dense.url), [FakeGpuReader([H200, H200], source="nvml")],
        FakeProcessReader(ProcessReading(4242, 1e8, argv, environ_error="not shown")),
        fingerprints=LiveFingerprints(cpu=CPU),
    )
    yield from exporter_for(collector)


@pytest.mark.slow
def test_the_info_series_of_a_recorded_node(local_exporter: ExporterServer) -> None:
    [labels] = info_series(local_exporter.url)
    assert tuple(sorted(labels)) == tuple(sorted(INFO_LABELS))
    assert labels == {
        **labels,
        "build": "b0-unknown", "model": "models/tiny-llama-dense.gguf", "slots": "4", "ctx_per_slot": "4096",
        "kv_unified": "",  # --parallel 4 on the command line, LLAMA_ARG_KV_UNIFIED unreadable
        "batch": "", "ubatch": "", "flash_attn": "", "cache_type_k": "", "cache_type_v": "", "n_gpu_layers": "",
        "model_size": "", "model_sha256": "", "model_sample_sha256": "",  # no such file beside the fake process
        "model_ftype": "F16", "model_n_params": "19007744",  # what the runtime says of its model
        "gpu": "NVIDIA H200", "gpu_count": "2", "gpu_memory_bytes": str(2 * 150754820096), "driver": "570.86.15",
        "cpu": CPU[0], "runtime_state": "",
    }
    fp = fingerprint(local_exporter.url)
    assert parts(from_info_labels(labels)) == parts(fp)
    assert labels["digest"] == fp["digest"]
    assert "LLAMA_ARG_FLASH_ATTN" in fp["unknown"]["settings.flash_attn"]  # the command line leaves it out
    assert "not shown" in fp["unknown"]["settings.flash_attn"]  # and the environment is not readable
    assert "model file models/tiny-llama-dense.gguf" in fp["unknown"]["model.files"]  # no pid 4242 to look in


@pytest.mark.slow
def test_a_remote_runtime_has_its_props_only(dense: LoopbackRuntime) -> None:
    # an exporter on another host whose own GPUs read fine: they are not the node's, nor is its CPU
    collector = RuntimeCollector(LlamaCppAdapter(dense.url), [FakeGpuReader([H200], source="nvml")],
                                 None, fingerprints=LiveFingerprints(cpu=CPU))
    for server in exporter_for(collector):
        [labels] = info_series(server.url)
        assert (labels["slots"], labels["ctx_per_slot"], labels["gpu"], labels["cpu"]) == ("4", "4096", "", "")
        fp = fingerprint(server.url)
        assert "remote runtime" in fp["unknown"]["settings.batch"]
        assert "remote runtime" in fp["unknown"]["model.files"]
        assert "this host's hardware is not the node's" in fp["unknown"]["hardware.gpu"]
        assert "this host's hardware is not the node's" in fp["unknown"]["hardware.cpu"]
        assert fp["model"]["meta"] == {"ftype": "F16", "n_params": 19007744, "size": 38020096}  # /v1/models
        assert parts(from_info_labels(labels)) == parts(fp)


def test_a_local_runtime_whose_gpus_cannot_be_read_says_why(dense: LoopbackRuntime) -> None:
    collector = RuntimeCollector(LlamaCppAdapter(dense.url), [FakeGpuReader(error=GpuUnavailable("NVML gone"),
                                                                            source="nvml")],
                                 FakeProcessReader(ProcessReading(4242, 1e8, ("llama-server",), environ=())),
                                 fingerprints=LiveFingerprints(cpu=(None, "no /proc/cpuinfo")))
    for server in exporter_for(collector):
        fp = fingerprint(server.url)
        assert fp["unknown"]["hardware.gpu"] == "the GPUs cannot be read (nvml: NVML gone)"
        assert fp["unknown"]["hardware.cpu"] == "no /proc/cpuinfo"


def test_a_down_runtime_still_has_a_fingerprint_that_says_why() -> None:
    collector = RuntimeCollector(LlamaCppAdapter(f"http://127.0.0.1:{free_port()}"), budget_s=0.3,
                                 fingerprints=LiveFingerprints(cpu=CPU))
    for server in exporter_for(collector):
        [labels] = info_series(server.url)
        assert labels["slots"] == "" and labels["runtime_state"] == "down"
        fp = fingerprint(server.url)
        assert fp["unknown"]["runtime.build"].startswith("the runtime does not report it: no /props (")
        assert fp["unknown"]["runtime"].startswith("the runtime is down")


@pytest.mark.slow
def test_the_model_files_of_a_local_runtime_are_sized_and_hashed(
    tmp_path: Path, llamacpp_fixtures: Path
) -> None:
    model = tmp_path / "models" / "tiny-llama-dense.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    runtime = FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np4")  # model_path models/... (relative)
    lf = LiveFingerprints(cpu=CPU, models_roots=[tmp_path / "models"])
    lf._cwd = (4242, str(tmp_path))  # the fake runtime process runs in tmp_path
    with LoopbackRuntime(runtime) as loop:
        reading = ProcessReading(4242, 1e8, ("llama-server",), environ=())
        # a budget that a loaded host's loopback /props meets: the test sizes and hashes files, it times nothing
        # (at the default, five workers on two cores left the first scrape without /props, and its size blank)
        collector = RuntimeCollector(LlamaCppAdapter(loop.url), process_reader=FakeProcessReader(reading),
                                     fingerprints=lf, budget_s=5.0)
        for server in exporter_for(collector):
            [labels] = info_series(server.url)
            assert labels["model_size"] == str(model.stat().st_size)
            assert lf.hasher.wait(10)
            [labels] = info_series(server.url)
            assert labels["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
            assert labels["model_sample_sha256"] == sample_sha256(model)
            assert parts(from_info_labels(labels)) == parts(fingerprint(server.url))
            assert lf.hasher.hashed == 1


# -- router payloads --------------------------------------------------------------------------------------


@pytest.fixture
def router_exporter() -> Iterator[ExporterServer]:
    runtime = RouterRuntime.recorded()
    adapter = LlamaCppAdapter("http://router.test", client=httpx.Client(transport=runtime.transport()))
    collector = RuntimeCollector(adapter, process_reader=FakeProcessReader(ProcessReading(7, 1e8, ("llama-server",),
                                                                                          environ=())),
                                 fingerprints=LiveFingerprints(cpu=CPU))
    yield from exporter_for(collector)


def test_a_router_publishes_one_fingerprint_per_loaded_model(router_exporter: ExporterServer) -> None:
    [labels] = info_series(router_exporter.url)  # the moe model is not loaded: no fingerprint
    assert labels["model"] == DENSE and labels["model_path"] == "models/tiny-llama-dense.gguf"
    assert (labels["slots"], labels["ctx_per_slot"], labels["kv_unified"]) == ("2", "1024", "off")
    assert labels["model_n_params"] == "19007744"  # the router's /v1/models meta of that model
    doc = fingerprint(router_exporter.url)
    assert doc["router"] is True and set(doc["models"]) == {DENSE}
    one = fingerprint(router_exporter.url, model=DENSE)
    assert parts(from_info_labels(labels)) == parts(one) == parts(doc["models"][DENSE])
    assert info_series(router_exporter.url, model=DENSE) == [labels]
    r = httpx.get(router_exporter.url + "/fingerprint", params={"model": MOE}, timeout=10)
    assert r.status_code == 404 and "not loaded" in r.json()["error"]
    assert info_series(router_exporter.url, model=MOE) == []


# -- the simulator as a drop-in llama-server, restarted on its port ---------------------------------------


class DropInProcess:
    """``satbench sim`` started with llama-server's flags on a given port (killed on exit)."""

    def __init__(self, port: int, *flags: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.argv = [sys.executable, "-m", "satbench.cli", "sim", "--port", str(port), *flags]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> DropInProcess:
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=self._err)
        try:
            wait_http(self.url + "/health", timeout_s=20)
        except BaseException:
            self.__exit__()
            self._err.seek(0)
            raise RuntimeError(self._err.read().decode(errors="replace")[-2000:]) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
        self._err.close()


def wait_for(url: str, check: Any, timeout_s: float = 15.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = info_series(url)
        if found and check(found[0]):
            return found[0]
        assert time.monotonic() < deadline, f"the info series never got there: {found}"
        time.sleep(0.1)


@pytest.mark.slow
def test_the_simulators_fingerprint_changes_when_it_restarts_with_other_slots(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + b"\x01" * 5000)
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    port = free_port()
    flags = ("-m", str(model), "-c", "4096", "-b", "256", "-ub", "64", "-fa", "on", "-ctk", "q8_0", "--metrics")
    collector = build_collector(ExporterConfig(runtime_url=f"http://127.0.0.1:{port}", port=0, gpu="none",
                                               budget_s=2.0, props_ttl_s=0, models_roots=(str(tmp_path),)))
    for server in exporter_for(collector):
        with DropInProcess(port, *flags, "-np", "4"):
            before = wait_for(server.url, lambda lb: lb["model_sha256"] != "")
            assert before["model_sha256"] == sha and before["model_size"] == str(model.stat().st_size)
            assert before["model"] == str(model)
            assert (before["slots"], before["ctx_per_slot"], before["kv_unified"]) == ("4", "1024", "off")
            assert (before["batch"], before["ubatch"]) == ("256", "64")  # /props (the simulator's) says them
            assert (before["flash_attn"], before["cache_type_k"]) == ("on", "q8_0")  # only the command line does
            assert before["cache_type_v"] == "default" and before["build"] == "b0-satbench-simulator"
            assert before["binary_sha256"] != ""  # the interpreter that runs the simulator, hashed
            assert before["gpu"] != "" and before["gpu_count"] == "1"  # the simulator's modelled GPU
            fp = fingerprint(server.url)
            assert parts(from_info_labels(before)) == parts(fp)
            assert fp["unknown"]["hardware.driver"].startswith("a simulated GPU")
        with DropInProcess(port, *flags, "-np", "2"):  # the same port, another slot count
            after = wait_for(server.url, lambda lb: lb["slots"] == "2" and lb["model_sha256"] != "")
            assert after["ctx_per_slot"] == "2048" and after["digest"] != before["digest"]
            assert after["model_sha256"] == sha
            changes = compare(from_info_labels(before), from_info_labels(after))
            assert describe_changes(changes) == "settings.slots 4 -> 2; settings.ctx_per_slot 1024 -> 2048"
            assert parts(from_info_labels(after)) == parts(fingerprint(server.url))
