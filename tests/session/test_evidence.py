"""Evidence pieces for the manifest, each from an injected source."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench import evidence


def test_redact_secrets_by_exact_key_flag_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANE_KEY", "sk-planted-4242")
    doc = {
        "lanes": [{"api_key": "sk-1234", "api_key_env": "LANE_KEY", "url": "http://h/v1?key=sk-planted-4242",
                   "server_args": ["--api-key", "arg-secret", "--hf-token=hf-secret", "-c", "4096"]}],
        "Authorization": "Bearer x-bearer",
        "token": "tok-value",
        "LANE_KEY": "named-like-the-variable",
        "workload": {"prompt_tokens": {"value": 64}, "prefill_probe_tokens": 1024, "max_tokens_note": "k"},
        "n": 1,
    }
    out = evidence.redact_secrets(doc, keys=["LANE_KEY"])
    text = json.dumps(out)
    for secret in ("sk-1234", "sk-planted-4242", "arg-secret", "hf-secret", "x-bearer", "tok-value",
                   "named-like-the-variable"):
        assert secret not in text, secret
    lane = out["lanes"][0]
    assert lane["api_key_env"] == "LANE_KEY"  # the variable's name is not the secret
    assert lane["url"] == "http://h/v1?key=***" and lane["server_args"][:3] == ["--api-key", "***", "--hf-token=***"]
    # never by substring: the workload is evidence
    assert out["workload"] == doc["workload"] and out["n"] == 1
    assert evidence.redact_secrets({"token": None}) == {"token": None}


def test_secret_values_ignore_short_strings() -> None:
    assert evidence.secret_values({"token": "ab", "password": "long-enough"}) == {"long-enough"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("processor : 0\nmodel : 17\nmodel name : AMD EPYC 7B13\n", "AMD EPYC 7B13"),
        ("processor : 0\nHardware : BCM2835\n", "BCM2835"),
    ],
)
def test_cpu_model(text: str, expected: str) -> None:
    assert evidence.cpu_model(text) == expected


class FakeGpus:
    def __init__(self, gpus: list[dict[str, Any]] | Exception) -> None:
        self._gpus = gpus

    def gpus(self) -> list[dict[str, Any]]:
        if isinstance(self._gpus, Exception):
            raise self._gpus
        return self._gpus


def test_hardware_with_and_without_gpu() -> None:
    gpu = {"index": 0, "name": "H200", "driver": "550", "memory_total_bytes": 141 * 2**30}
    hw = evidence.collect_hardware(FakeGpus([gpu]), cpuinfo="model name : X\n")
    assert hw["gpu"] == [gpu] and "gpu_reason" not in hw and hw["cpu_model"] == "X" and hw["ram_bytes"] > 0
    hw = evidence.collect_hardware(FakeGpus(OSError("libnvidia-ml.so.1 missing")))
    assert hw["gpu"] is None and "libnvidia-ml.so.1 missing" in hw["gpu_reason"]
    assert evidence.collect_hardware(FakeGpus([]))["gpu_reason"] == "NVML reports no GPU"


def test_round_trip_is_the_median_of_fake_clock_trips() -> None:
    ticks = iter([0.0, 0.003, 1.0, 1.001, 2.0, 2.002])
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"status": "ok"})))
    rtt = evidence.measure_round_trip(client, "http://rt:1/", samples=3, clock=lambda: next(ticks))
    assert rtt["probe"] == "http://rt:1/health" and rtt["samples"] == 3
    assert rtt["rtt_median_s"] == pytest.approx(0.002)


def test_round_trip_of_a_dead_endpoint_reports_the_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    rtt = evidence.measure_round_trip(
        httpx.Client(transport=httpx.MockTransport(refuse)), "http://rt:1", samples=2
    )
    assert rtt["rtt_median_s"] is None and "ConnectError" in rtt["error"]


def test_runtime_props_from_recorded_llama_server(llamacpp_fixtures: Path) -> None:
    props = json.loads((llamacpp_fixtures / "dense_np4" / "props.json").read_text())
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=props)))
    out = evidence.runtime_props(client, "http://rt:1")
    assert out["build_info"] == props["build_info"] and out["total_slots"] == props["total_slots"]
    assert "chat_template" not in out and len(out.get("chat_template_sha256", "")) in (0, 64)
    bad = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    assert "GET /props failed" in evidence.runtime_props(bad, "http://rt:1")["error"]


def test_model_files_hash_every_split(tmp_path: Path) -> None:
    parts = [tmp_path / f"m-0000{i}-of-00002.gguf" for i in (1, 2)]
    for i, part in enumerate(parts):
        part.write_bytes(bytes([i]) * 1000)
    (tmp_path / "other.gguf").write_bytes(b"x")
    files = evidence.describe_model_files([parts[0]])
    assert [f["name"] for f in files] == [p.name for p in parts]
    assert files[1]["sha256"] == hashlib.sha256(b"\x01" * 1000).hexdigest() and files[1]["size_bytes"] == 1000


@pytest.mark.parametrize("path", ["/home", "/home/user/models"])
def test_model_dir_under_home_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="under /home"):
        evidence.refuse_home_path(Path(path))
