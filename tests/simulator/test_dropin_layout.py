"""The drop-in simulator lays its KV cache out as llama-server does, and as the exporter reads a command line:
``-np -1`` (and ``-np`` left out, llama-server's default) is 4 slots over one unified cache, an explicit count
splits it unless ``-kvu``, and the ``LLAMA_ARG_*`` variables count as their flags (the command line winning).
One rule, ``core.llama_argv.server_layout``, and the two sides held to it here: what the simulator serves
against what ``core.llama_argv.settings_from_argv`` and ``exporter.kvcache.layout_from_argv`` read."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import httpx
import pytest

from satbench.core.llama_argv import settings_from_argv
from satbench.exporter.kvcache import layout_from_argv
from satbench.exporter.server import ExporterConfig, build_collector, serve
from satbench.simulator.cli import configure, prepare
from testkit.net import free_port, wait_http
from testkit.sim import REPO_ROOT

CASES = [
    (["-c", "8192"], {}),  # llama-server's default -np: auto
    (["-c", "8192", "-np", "-1"], {}),
    (["-c", "8192", "-np", "-1", "-no-kvu"], {}),  # auto forces unified
    (["-c", "8192", "-np", "4"], {}),
    (["-c", "8192", "-np", "4", "-kvu"], {}),
    (["-c", "4096", "-np", "2", "--no-kv-unified"], {}),
    (["-c", "4096", "-np", "1"], {}),
    ([], {"LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_CTX_SIZE": "4096"}),  # the official images' way
    (["-c", "6000"], {"LLAMA_ARG_N_PARALLEL": "3", "LLAMA_ARG_KV_UNIFIED": "true"}),
    (["-c", "6000", "-np", "3"], {"LLAMA_ARG_N_PARALLEL": "5", "LLAMA_ARG_KV_UNIFIED": "1"}),
    (["-c", "6000", "-np", "3", "-no-kvu"], {"LLAMA_ARG_KV_UNIFIED": "1"}),  # the command line wins
    (["-c", "8192", "-np", "2"], {"LLAMA_ARG_NO_KV_UNIFIED": "1"}),
]


def _simulator(flags: list[str], environ: dict[str, str]) -> tuple[int, bool, int]:
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["-m", "m.gguf", *flags])
    from satbench.simulator.dropin import apply_llama_flags
    from satbench.simulator.profile import load_profile

    profile = load_profile(args.profile)
    args.slots_flag = False
    profile, _ = apply_llama_flags(profile, args, environ)
    s = profile.server
    return s.slots, s.kv_unified, s.n_ctx_slot


@pytest.mark.parametrize(("flags", "environ"), CASES)
def test_the_simulator_and_the_exporter_read_one_command_line_alike(flags: list[str],
                                                                    environ: dict[str, str]) -> None:
    slots, unified, per_slot = _simulator(flags, environ)
    argv = ["llama-server", "-m", "m.gguf", *flags]
    read, why = settings_from_argv(argv, environ)
    assert (read["slots"], read["kv_unified"], read["ctx_per_slot"]) == (slots, unified, per_slot), why
    assert layout_from_argv(argv, environ) == ("unified" if unified else "split")


def test_np_minus_one_is_accepted_and_a_bad_count_refused() -> None:
    assert _simulator(["-c", "8192", "-np", "-1"], {}) == (4, True, 8192)
    parser = argparse.ArgumentParser()
    configure(parser)
    from satbench.simulator.profile import ProfileError

    with pytest.raises(ProfileError, match="--parallel"):
        prepare(parser.parse_args(["-m", "m.gguf", "-np", "-3"]))


@pytest.mark.slow
def test_over_http_the_simulators_props_say_what_its_command_line_and_environment_read() -> None:
    port = free_port()
    flags = ["-m", "m.gguf", "-c", "6144", "--metrics"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}, "LLAMA_ARG_N_PARALLEL": "3"}
    argv = [sys.executable, "-m", "satbench.cli", "sim", "--port", str(port), *flags]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        collector = None
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/health", timeout_s=20)
            props = httpx.get(url + "/props", timeout=10).json()
            assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (3, 2048)
            assert props["simulator"]["kv_unified"] is False
            read, _ = settings_from_argv(["llama-server", *flags], {"LLAMA_ARG_N_PARALLEL": "3"})
            assert (read["slots"], read["ctx_per_slot"], read["kv_unified"]) == (3, 2048, False)
            collector = build_collector(ExporterConfig(runtime_url=url, runtime_pid=proc.pid, port=0, gpu="none",
                                                       budget_s=2.0))
            server = serve(collector)
            try:
                fp = httpx.get(server.url + "/fingerprint", timeout=10).json()
                text = httpx.get(server.url + "/metrics", timeout=10).text
            finally:
                server.close()
            assert (fp["settings"]["slots"], fp["settings"]["kv_unified"]) == (3, False)
            assert 'runtime_kv_cache_capacity_tokens{kv_layout="split"} 6144.0' in text
        finally:
            if collector is not None:
                collector.close()
            proc.terminate()
            proc.wait(timeout=10)
