"""What the fingerprint must see, over real HTTP against real processes: a runtime down or loading is unknown,
two builds with one build string differ, a model swapped in place is told before a walk begins, a remote
exporter compares batch sizes where ``/props`` says them and says unknown where it cannot,
``LLAMA_ARG_N_PARALLEL`` is read, and a split and a unified KV cache differ.

The runtimes are the simulator as a drop-in llama-server and ``fake_llama_server.py`` (recorded payloads
behind a process whose command line, environment and executable are what a real llama-server's would be)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.fingerprint_compare import assess
from satbench.core.fingerprint_labels import from_info_labels
from satbench.core.lane_evidence import FingerprintModel
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.live_fingerprint import LiveFingerprints
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.server import ExporterConfig, ExporterServer, build_collector, serve
from satbench.recommender.validity import validity_of
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime
from testkit.net import free_port, wait_http
from tests.exporter.test_fingerprint_series import DropInProcess, fingerprint, info_series

pytestmark = pytest.mark.slow

FAKE = Path(__file__).with_name("fake_llama_server.py")
CPU = ("Test CPU 9000 (2 cores)", None)


@contextmanager
def exporting(collector: RuntimeCollector) -> Iterator[ExporterServer]:
    server = serve(collector)
    try:
        yield server
    finally:
        server.close()
        collector.close()


def local_exporter(url: str, pid: int, **config: Any) -> RuntimeCollector:
    """The exporter beside the runtime (its PID known), as ``satbench exporter --runtime-pid`` builds it."""
    return build_collector(ExporterConfig(runtime_url=url, runtime_pid=pid, port=0, gpu="none", budget_s=2.0,
                                          props_ttl_s=0, **config))


def remote_exporter(url: str) -> RuntimeCollector:
    """An exporter on another host: it sees the runtime's HTTP answers and nothing of its process."""
    return RuntimeCollector(LlamaCppAdapter(url, props_ttl_s=0), budget_s=2.0,
                            fingerprints=LiveFingerprints(cpu=CPU))


@contextmanager
def fake_llama_server(fixture: Path, executable: Path | None = None, env: dict[str, str] | None = None,
                      flags: Sequence[str] = ()) -> Iterator[tuple[str, int]]:
    """``fake_llama_server.py`` as a process named llama-server, run by ``executable``; (url, pid)."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(["llama-server", str(FAKE), str(fixture), str(port), *flags],
                                executable=str(executable or Path(os.path.realpath(sys.executable))),
                                env={**base, **(env or {})}, stdout=subprocess.DEVNULL, stderr=err)
        try:
            try:
                wait_http(f"http://127.0.0.1:{port}/health", timeout_s=20)
            except Exception:
                err.seek(0)
                raise RuntimeError(err.read().decode(errors="replace")[-2000:]) from None
            yield f"http://127.0.0.1:{port}", proc.pid
        finally:
            proc.kill()
            proc.wait(timeout=10)


def settled(url: str, check: Any = lambda fp: True, timeout_s: float = 20.0) -> dict[str, Any]:
    """``GET /fingerprint`` once every digest it can have is done (the hasher works in the background)."""
    deadline = time.monotonic() + timeout_s
    while True:
        fp: dict[str, Any] = fingerprint(url)
        pending = any(str(v).startswith(("hashing", "waiting")) for v in fp["unknown"].values())
        if not pending and check(fp):
            return fp
        assert time.monotonic() < deadline, fp["unknown"]
        time.sleep(0.1)


# -- a runtime that does not answer -----------------------------------------------------------------------


def test_a_runtime_that_is_down_or_loading_gives_unknown(llamacpp_fixtures: Path) -> None:
    with LoopbackRuntime(FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np4")) as runtime, \
            exporting(remote_exporter(runtime.url)) as exporter:
        measured = fingerprint(exporter.url)  # what an answer was measured on while it answered
        runtime.runtime.set("/health", llamacpp_fixtures / "extras" / "health_loading_503.json", status=503)
        [loading] = info_series(exporter.url)
        assert loading["runtime_state"] == "loading" and loading["slots"] == "" and loading["build"] == ""
        got = validity_of(FingerprintModel.model_validate(measured), [from_info_labels(loading)], now=0)
        assert got.state == "unknown" and (got.reason or "").startswith("the runtime is loading"), got
    with exporting(remote_exporter(f"http://127.0.0.1:{free_port()}")) as exporter:
        [down] = info_series(exporter.url)
        assert down["runtime_state"] == "down"
        got = validity_of(FingerprintModel.model_validate(measured), [from_info_labels(down)], now=0)
        assert got.state == "unknown" and (got.reason or "").startswith("the runtime is down"), got
        assert fingerprint(exporter.url)["unknown"]["runtime"].startswith("the runtime is down")


# -- the build -------------------------------------------------------------------------------------------


def _build(folder: Path, extra: bytes) -> Path:
    """A copy of this interpreter's binary named llama-server, ``extra`` appended: another build of one
    program, which answers the same ``/props`` ``build_info`` (b0-unknown) as any pip build does."""
    folder.mkdir()
    binary = folder / "llama-server"
    shutil.copy2(os.path.realpath(sys.executable), binary)
    with binary.open("ab") as f:
        f.write(extra)
    return binary


def test_two_builds_with_one_build_string_differ(tmp_path: Path, llamacpp_fixtures: Path) -> None:
    dense = llamacpp_fixtures / "dense_np4"
    builds = [_build(tmp_path / "a", b"build a"), _build(tmp_path / "b", b"build b, a few bytes longer")]
    prints = []
    for binary in builds:
        with fake_llama_server(dense, binary, flags=["-np", "4", "-c", "16384"]) as (url, pid), \
                exporting(local_exporter(url, pid)) as exporter:
            fp = settled(exporter.url, lambda f: f["runtime"]["binary_sha256"])
            assert fp["runtime"]["build"] == "b0-unknown"
            prints.append(fp)
    a, b = prints
    assert a["runtime"]["binary_sha256"] != b["runtime"]["binary_sha256"]
    got = assess(a, b)
    assert got["state"] == "changed" and [c["field"] for c in got["changes"]] == ["runtime.binary_sha256"]
    assert assess(a, a)["compared"]["not_compared"] == assess(b, b)["compared"]["not_compared"]


# -- the model -------------------------------------------------------------------------------------------


def test_a_model_swapped_in_place_is_told_before_the_walk_begins(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    model = models / "tiny.gguf"
    model.write_bytes(b"GGUF" + os.urandom(3 << 20))
    port = free_port()
    with DropInProcess(port, "-m", str(model), "-c", "4096", "-np", "2", "--metrics") as sim, \
            exporting(local_exporter(sim.url, sim.pid, models_roots=(str(models),))) as exporter:
        measured = settled(exporter.url)
        assert measured["model"]["files"][0]["sample_sha256"] and measured["model"]["files"][0]["sha256"]
        before = model.stat()
        model.write_bytes(b"GGUF" + os.urandom(3 << 20))  # cp -p over it: same size, same inode, mtime kept
        os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (model.stat().st_size, model.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
        swapped = time.monotonic()
        live = fingerprint(exporter.url)  # what a session asks when its walk begins: one request, no wait
        took = time.monotonic() - swapped
        got = assess(measured, live)
        assert got["state"] == "changed", got
        fields = [c["field"] for c in got["changes"]]  # the full sha256 too, when 3 MiB were read meanwhile
        assert fields[0] == "model.files[0].sample_sha256" and set(fields) <= {
            "model.files[0].sample_sha256", "model.files[0].sha256"}
        print(f"in-place swap told {took * 1000:.0f} ms after it, by the sampled hash (full sha256: "
              f"{live['model']['files'][0]['sha256'] or live['unknown'].get('model.files[0].sha256')})")
        assert took < 5.0


def test_model_files_outside_the_models_root_are_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.gguf"
    elsewhere.write_bytes(b"GGUF" + b"\x00" * 100)
    port = free_port()
    with DropInProcess(port, "-m", str(elsewhere), "-np", "1", "--metrics") as sim, \
            exporting(local_exporter(sim.url, sim.pid, models_roots=(str(tmp_path / "models"),))) as exporter:
        fp = fingerprint(exporter.url)
        assert fp["model"]["files"] is None and "not read" in fp["unknown"]["model.files"]
        [labels] = info_series(exporter.url)
        assert labels["model_size"] == "" and labels["model_sample_sha256"] == ""


# -- settings --------------------------------------------------------------------------------------------


def test_a_remote_exporter_compares_batch_sizes_where_props_says_them() -> None:
    port = free_port()
    flags = ("-c", "4096", "-np", "2", "-b", "256", "-ub", "64", "--metrics")
    with DropInProcess(port, *flags) as sim, exporting(remote_exporter(sim.url)) as exporter:
        fp = fingerprint(exporter.url)
        assert (fp["settings"]["batch"], fp["settings"]["ubatch"], fp["settings"]["kv_unified"]) == (256, 64, False)
        assert fp["hardware"]["cpu"] is None and "not the node's" in fp["unknown"]["hardware.cpu"]
        assert fp["model"]["meta"]["n_params"]  # what the runtime says of its model, for a remote exporter
        got = assess(fp, from_info_labels(info_series(exporter.url)[0]))
        assert got["state"] == "valid", got  # everything that decides capacity was in what it answered


def test_a_remote_exporter_says_unknown_where_it_cannot_tell(llamacpp_fixtures: Path) -> None:
    with LoopbackRuntime(FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np4")) as runtime, \
            exporting(remote_exporter(runtime.url)) as exporter:
        fp = fingerprint(exporter.url)
        assert fp["settings"]["batch"] is None and "remote runtime" in fp["unknown"]["settings.batch"]
        got = assess(fp, from_info_labels(info_series(exporter.url)[0]))
        assert got["state"] == "unknown" and "settings.batch" in got["reason"], got
        assert "settings.batch" in got["compared"]["not_compared"]


def test_llama_arg_n_parallel_is_read_from_the_runtimes_environment(llamacpp_fixtures: Path) -> None:
    dense = llamacpp_fixtures / "dense_np4"
    seen: dict[str, tuple[Any, dict[str, float]]] = {}
    for name, env in (("env", {"LLAMA_ARG_N_PARALLEL": "4", "LLAMA_ARG_BATCH": "1024"}), ("auto", {})):
        with fake_llama_server(dense, env=env) as (url, pid), exporting(local_exporter(url, pid)) as exporter:
            fp = fingerprint(exporter.url)
            text = httpx.get(exporter.url + "/metrics", timeout=10).text
            capacity = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
                        for line in text.splitlines() if line.startswith("runtime_kv_cache_capacity_tokens{")}
            seen[name] = (fp, capacity)
    env_fp, env_capacity = seen["env"]
    auto_fp, auto_capacity = seen["auto"]
    # LLAMA_ARG_N_PARALLEL=4: an explicit slot count, so a split cache (4 x 4096); left out, -np is auto:
    # 4 slots over one unified cache of 4096
    assert env_fp["settings"]["kv_unified"] is False and env_fp["settings"]["batch"] == 1024
    assert env_capacity == {'kv_layout="split"': 16384.0}
    assert auto_fp["settings"]["kv_unified"] is True and auto_fp["settings"]["batch"] == "default"
    assert auto_capacity == {'kv_layout="unified"': 4096.0}
    assert [c["field"] for c in assess(env_fp, auto_fp)["changes"]] == ["settings.kv_unified", "settings.batch"]


def test_a_split_and_a_unified_kv_cache_differ() -> None:
    prints = []
    for flags in (("-c", "32768", "-np", "4"), ("-c", "8192", "-np", "4", "-kvu")):
        port = free_port()
        with DropInProcess(port, *flags, "--metrics") as sim, exporting(remote_exporter(sim.url)) as exporter:
            fp = fingerprint(exporter.url)
            assert (fp["settings"]["slots"], fp["settings"]["ctx_per_slot"]) == (4, 8192)  # the same per slot
            prints.append(fp)
    got = assess(prints[0], prints[1])
    assert got["state"] == "changed"
    assert got["changes"] == [{"field": "settings.kv_unified", "measured": False, "live": True}]
