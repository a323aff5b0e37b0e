"""The exporter in front of a runtime started with an API key, over real HTTP.

llama-server started with ``--api-key`` answers ``/metrics``, ``/slots`` and ``/props`` 401 without the key;
only ``/health``, ``/models`` and the web UI stay public (tools/server's ``get_public_endpoints``). The
simulator started with the same flags does the same (``simulator.edge``), so these tests run here. Before,
the exporter sent only ``Accept-Encoding``: in front of such a runtime it published ``runtime_up 1`` (the
public ``/health``) and nothing else, ``runtime_metrics_up``, ``runtime_slots_up`` and ``runtime_props_up``
all 0, with no word of why. Now the key comes from ``--runtime-api-key-file`` or
``SATBENCH_EXPORTER_RUNTIME_API_KEY`` (never a flag's value) and goes with every read of the runtime; without
it, or with a wrong one, the guarded sources are down and their reason says which, naming the settings.
``runtime_up`` stays what it says (``/health`` answers 200): the runtime is up, the exporter may not read it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satbench.core.net import free_port
from satbench.exporter.adapter import NO_KEY, REFUSED_KEY
from satbench.exporter.cli import RUNTIME_API_KEY_ENV, runtime_api_key
from satbench.exporter.server import ExporterConfig, build_collector, serve
from testkit.exposition import samples
from testkit.process import ChildProcess

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-runtime-" + "k" * 24


@pytest.fixture(scope="module")
def keyed_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A simulator started as llama-server is with ``--api-key-file`` (and ``--metrics``): its URL."""
    key_file = tmp_path_factory.mktemp("runtime-key") / "keys"
    key_file.write_text(f"{KEY}\n")
    port = free_port()
    argv = [sys.executable, "-m", "satbench.cli", "sim", "--profile", "dense", "--port", str(port),
            "--api-key-file", str(key_file), "--metrics"]
    with ChildProcess(argv, name="keyed-sim", ready_url=f"http://127.0.0.1:{port}/health", cwd=ROOT):
        yield f"http://127.0.0.1:{port}"


def _scrape(runtime_url: str, key: str | None) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float],
                                                           dict[str, object]]:
    """One /metrics and one /fingerprint of an exporter built for ``runtime_url`` with ``key``."""
    config = ExporterConfig(runtime_url=runtime_url, port=0, gpu="none", runtime_api_key=key)
    collector = build_collector(config)
    server = serve(collector, config.host, config.port)
    try:
        got = samples(httpx.get(server.url + "/metrics", timeout=10).text)
        fingerprint = httpx.get(server.url + "/fingerprint", timeout=10).json()
    finally:
        server.close()
        collector.close()
    return got, fingerprint


@pytest.mark.slow
def test_the_runtime_refuses_a_reader_without_its_key(keyed_runtime: str) -> None:
    """The ground truth the exporter meets: the guarded endpoints want the key, /health does not."""
    assert httpx.get(keyed_runtime + "/health", timeout=5).status_code == 200
    for path in ("/metrics", "/slots", "/props"):
        assert httpx.get(keyed_runtime + path, timeout=5).status_code == 401, path
        assert httpx.get(keyed_runtime + path, headers={"Authorization": f"Bearer {KEY}"},
                         timeout=5).status_code == 200, path


@pytest.mark.slow
def test_with_the_key_every_source_is_up(keyed_runtime: str) -> None:
    got, fingerprint = _scrape(keyed_runtime, KEY)
    assert got["runtime_up", ()] == 1
    for source in ("metrics", "slots", "props"):
        assert got[f"runtime_{source}_up", ()] == 1, source
        assert got["runtime_http_status", (("source", source),)] == 200, source
    assert got["runtime_slots_configured", ()] == 4  # the dense profile's slots, read from the guarded /slots
    assert fingerprint["settings"]["slots"] == 4 and "runtime" not in fingerprint["unknown"]  # /props was read


@pytest.mark.slow
@pytest.mark.parametrize(("key", "reason"), [(None, NO_KEY), ("sk-wrong-" + "w" * 24, REFUSED_KEY)])
def test_without_the_key_the_guarded_sources_are_down_and_say_why(
        keyed_runtime: str, key: str | None, reason: str) -> None:
    got, fingerprint = _scrape(keyed_runtime, key)
    assert got["runtime_up", ()] == 1  # /health is public: the runtime is up, the exporter may not read it
    for source in ("metrics", "slots", "props"):
        assert got[f"runtime_{source}_up", ()] == 0, source
        assert got["runtime_http_status", (("source", source),)] == 401, source
    assert ("runtime_slots_configured", ()) not in got
    assert fingerprint["settings"]["slots"] is None  # the fingerprint knows nothing /props would have told
    assert fingerprint["unknown"]["runtime"] == f"no /props: HTTP 401: {reason}"
    assert KEY not in str(fingerprint)


@pytest.mark.slow
def test_the_exporter_command_reads_the_key_from_its_file(keyed_runtime: str, tmp_path: Path) -> None:
    """``satbench exporter --runtime-api-key-file``: the whole command, the key in a file, not in its argv."""
    key_file = tmp_path / "runtime.key"
    key_file.write_text(KEY + "\n")
    port = free_port()
    argv = [sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", keyed_runtime, "--port", str(port),
            "--gpu", "none", "--runtime-api-key-file", str(key_file)]
    with ChildProcess(argv, name="keyed-exporter", ready_url=f"http://127.0.0.1:{port}/metrics", cwd=ROOT):
        got = samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    assert got["runtime_metrics_up", ()] == 1 and got["runtime_slots_up", ()] == 1
    assert KEY not in " ".join(argv)


def test_the_key_comes_from_a_file_or_the_environment_never_a_flag(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(f"  {KEY}\n")
    assert runtime_api_key(path) == KEY
    assert runtime_api_key(None, {RUNTIME_API_KEY_ENV: KEY}) == KEY
    assert runtime_api_key(None, {}) is None
    assert runtime_api_key(path, {RUNTIME_API_KEY_ENV: "other"}) == KEY  # the file wins, as for every secret
    cases = {"empty": ("\n", "the file is empty"), "two": ("a\nb\n", "one printable line"),
             "missing": (None, "No such file")}
    for name, (text, said) in cases.items():
        bad = tmp_path / name
        if text is not None:
            bad.write_text(text)
        with pytest.raises(ValueError, match="--runtime-api-key-file") as caught:
            runtime_api_key(bad)
        assert said in str(caught.value) and "\n" not in str(caught.value), name
    with pytest.raises(ValueError, match=RUNTIME_API_KEY_ENV):
        runtime_api_key(None, {RUNTIME_API_KEY_ENV: "a\tb"})
    with pytest.raises(ValueError, match="--runtime-api-key-file"):
        ExporterConfig(runtime_url="http://127.0.0.1:1", runtime_api_key="a\nb")


@pytest.mark.slow
def test_the_exporter_command_refuses_an_unreadable_key_file_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", "http://127.0.0.1:1",
                           "--port", "0", "--runtime-api-key-file", str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--runtime-api-key-file" in done.stderr and str(tmp_path / "missing") in done.stderr


def test_the_flag_takes_no_key_value() -> None:
    """No ``--runtime-api-key VALUE``: a key in argv is readable by every user of the host."""
    import argparse

    from satbench.exporter.cli import configure

    parser = argparse.ArgumentParser()
    configure(parser)
    flags = {opt for action in parser._actions for opt in action.option_strings}
    assert "--runtime-api-key-file" in flags and "--runtime-api-key" not in flags
