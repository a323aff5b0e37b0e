"""A newcomer's first hour: errors a person can act on, the quick start against one's own node, progress on a
non-terminal, one exit-status rule, and a finished run's answer served after the session.

Every error case runs the real console script and asserts the one-line message (naming the setting, the
lane by its name, the valid choices where there are some), exit status 2 and that no run folder is left.
The quick start runs ``satbench run --url`` against a simulator started apart (an external node, as an
operator's would be), then ``satbench serve`` on that run folder and ``satbench capabilities`` against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.runtimes.external import ExternalRuntime, is_this_host
from satbench.session.config import load_session_config
from satbench.session.run import _unanswered
from testkit.net import free_port, wait_http
from testkit.session import ROOT, SHORT
from testkit.sim import SimulatorProcess


def _satbench(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SATBENCH_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, "-m", "satbench.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text and "pydantic.dev" not in text and "Value error" not in text, text
    return lines[0]


# (arguments after "run", what the one line must say)
RUN_REFUSALS = [
    (["--set", 'lanes=[{name = "chat", profile = "densee"}]'],
     ["lanes[chat].profile", "'densee'", "dense, moe"]),
    (["--set", 'lanes=[{name = "chat", runtime = "externa"}]'],
     ["lanes[chat].runtime", "'simulator', 'llamacpp' or 'external'"]),
    (["--set", 'lanes=[{name = "chat", runtime = "external"}]'], ["lanes[chat].url", "needs a url"]),
    (["--set", "policy.slo.ttft_p95_s='fast'"], ["policy.slo.ttft_p95_s", "valid number"]),
    (["--set", "policy.slo.ttft_p95=1"], ["policy.slo.ttft_p95: unknown setting", "did you mean ttft_p95_s"]),
    (["--set", "loadgen.min_window_s=20", "--set", "loadgen.max_window_s=10"],
     ["loadgen.max_window_s", "min_window_s", "raise max_window_s or lower min_window_s"]),
    (["--set", "loadgen.ladder.concurency=[1, 2]"], ["loadgen.ladder.concurency", "did you mean concurrency"]),
    (["--name", "x"], ["--name", "--url"]),
    (["--url", "not-a-url"], ["lanes[node].url", "http(s) URL"]),
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "says"), RUN_REFUSALS, ids=[a[-1][:40] for a, _ in RUN_REFUSALS])
def test_a_bad_session_input_is_one_line_exit_2_and_no_run_folder(tmp_path: Path, args: list[str],
                                                                   says: list[str]) -> None:
    out = tmp_path / "runs"
    proc = _satbench("run", "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("satbench run: ")
    for text in says:
        assert text in line, line
    assert not out.exists()


@pytest.mark.slow
def test_an_out_dir_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("a file, not a folder")
    proc = _satbench("run", "--out", str(target / "runs"))
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert "out_dir" in line and "not a directory" in line and "--out" in line
    assert target.read_text() == "a file, not a folder"


@pytest.mark.slow
def test_other_commands_refuse_in_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"slo": {"ttft_p95_s": "x"}, "max_eror_ratio": 0.1}))
    proc = _satbench("recommender", "--policy", str(policy), "--port", str(free_port()))
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    assert "slo.ttft_p95_s" in line and "max_eror_ratio: unknown setting (did you mean max_error_ratio?" in line
    proc = _satbench("sim", "--profile", "densee", "--port", "0")
    assert proc.returncode == 2
    assert "choices: dense, moe" in _one_line(proc.stderr)
    proc = _satbench("serve", str(tmp_path))
    assert proc.returncode == 2
    assert "RUN_DIR" in _one_line(proc.stderr)
    (tmp_path / "old-run").mkdir()
    (tmp_path / "old-run" / "manifest.json").write_text('{"schema": "something else"}')
    proc = _satbench("serve", str(tmp_path))  # an unreadable run folder is said, and nothing else to serve
    assert proc.returncode == 2 and "old-run: manifest.json unreadable" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 2
    proc = _satbench("capabilities", "--url", f"http://127.0.0.1:{free_port()}", "--timeout", "1")
    assert proc.returncode == 1  # no recommender: no lane has an answer
    assert "satbench serve" in _one_line(proc.stderr)


def test_the_help_speaks_to_a_user() -> None:
    proc = _satbench("--help")
    assert proc.returncode == 0
    assert "``" not in proc.stdout and "module" not in proc.stdout
    assert "satbench run --url" in proc.stdout and "exit status" in proc.stdout
    proc = _satbench("loadgen", "--help")
    run_id = proc.stdout[proc.stdout.index("--run-id RUN_ID"):].splitlines()
    assert len(run_id[0].split()) > 2 or run_id[1].strip(), "--run-id has a help text"


def _document(**lanes: tuple[int | None, str, str | None]) -> dict[str, Any]:
    """A served document whose lanes answer ``(recommended, status, reason)``, with the fields the schema
    requires (no steps, nothing flagged): the session validates what it reads."""
    return {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-01T17:00:00Z", "run_id": "r",
            "source": {"kind": "records"}, "policy": {}, "lanes": {
                name: {"status": status, "reason": reason, "recommended_concurrency": recommended,
                       "saturation_concurrency": None, "binding_constraint": None,
                       "throughput_at_recommended_tok_s": None, "fairness": {"ok": True, "jain_min": None},
                       "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
                       "run_id": "r", "measured_at": None, "steps": []}
                for name, (recommended, status, reason) in lanes.items()}}


def test_exit_status_follows_the_answers() -> None:
    config = load_session_config(None, {})
    answered = _document(dense=(4, "ok", None), moe=(8, "ok", None))
    assert _unanswered(config, answered) == {}
    partial = _document(dense=(4, "ok", None), moe=(None, "insufficient_data", "1 usable step window"))
    assert _unanswered(config, partial) == {"moe": "1 usable step window"}
    assert _unanswered(config, None) == {"dense": "no recommendations document",
                                         "moe": "no recommendations document"}


def test_an_external_node_says_what_cannot_be_seen_from_here() -> None:
    assert is_this_host("http://127.0.0.1:8080") and is_this_host("http://localhost:1") and is_this_host(
        "http://[::1]:8080")
    assert not is_this_host("http://gpu-node-1:8080") and not is_this_host("http://10.0.0.5:8080")
    remote = ExternalRuntime(url="http://10.0.0.5:8080").evidence()
    assert remote["node_visible"] is False and "benchmarking host" in remote["node_reason"]
    assert ExternalRuntime(url="http://127.0.0.1:8080").evidence()["node_visible"] is True


@pytest.mark.slow
def test_quick_start_against_my_node_then_serve_the_answer(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with SimulatorProcess("dense", slots=2) as sim:
        proc = _satbench("run", "--url", sim.url, "--name", "mynode", "--out", str(out), *SHORT, timeout=150)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    for name in ("manifest.json", "records.jsonl", "steps.json", "recommendations.json", "report.html",
                 "README.md", "steps.csv", "records.csv"):
        assert (run_dir / name).stat().st_size > 0, name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["lanes"]["mynode"]["runtime"] == "external"
    assert manifest["lanes"]["mynode"]["url"] == sim.url
    # progress on a non-terminal: a line per finished rung, before the answer
    said = proc.stdout + proc.stderr
    for c in (1, 2):
        assert f"mynode c={c}: " in said and "tok/s" in said
    document = json.loads((run_dir / "recommendations.json").read_text())
    answer = document["lanes"]["mynode"]["recommended_concurrency"]
    assert answer is not None

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "satbench.cli", "serve", str(out), "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/recommendations", timeout_s=30)
        taken = _satbench("serve", str(out), "--port", str(port))  # the port is taken: cannot start, 1
        assert taken.returncode == 1 and "cannot listen" in _one_line(taken.stderr)
        served = httpx.get(f"http://127.0.0.1:{port}/recommendations", timeout=5).json()
        assert served["lanes"]["mynode"] == document["lanes"]["mynode"], "the answer as the run wrote it"
        caps = _satbench("capabilities", "--url", f"http://127.0.0.1:{port}")
        assert caps.returncode == 0, caps.stderr
        assert json.loads(caps.stdout)["lanes"]["mynode"]["max_useful_concurrency"] == answer
    finally:
        server.terminate()
        server.communicate(timeout=10)  # reads and closes both pipes


def test_a_service_that_answers_no_lane_is_checked_in_process(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """A recommender elsewhere (compose) whose Prometheus missed the load generator answers every lane
    ``insufficient_data``; the session then analyses in-process (it has the run's records) and keeps the
    document that answers more lanes, saying so."""
    from satbench.core.manifest import RunManifest
    from satbench.session import run as session_run

    empty = _document(dense=(None, "insufficient_data", None))
    answered = _document(dense=(4, "ok", None))

    def service(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(201, json={})
        return httpx.Response(200, json={"run_id": "r", "registered_at": 1.0, "analyzed": True, "manifest": {},
                                         "recommendations": empty})

    real_client = httpx.Client
    monkeypatch.setattr(session_run.httpx, "Client",
                        lambda **kw: real_client(transport=httpx.MockTransport(service), **kw))
    calls: list[Path] = []

    def in_process(manifest: RunManifest, *, prometheus_url: str, run_dir: Path, policy: object,
                   prometheus_auth: object = None) -> dict:
        calls.append(run_dir)
        return json.loads(json.dumps(answered))

    monkeypatch.setattr(session_run, "analyze_run", in_process)
    said: list[str] = []
    config = load_session_config(None, {})
    manifest = RunManifest(run_id="r", created_at=1.0)
    doc = session_run._recommend(manifest, "http://rec.test", "http://prom.test", tmp_path, config, said.append)
    assert calls == [tmp_path] and doc is not None and doc["lanes"]["dense"]["recommended_concurrency"] == 4
    assert "answered no lane" in doc["notes"][-1] and "analysing in-process" in said[-1]
    answered["lanes"]["dense"]["recommended_concurrency"] = None  # in-process answers no more: keep the service's
    assert session_run._recommend(manifest, "http://rec.test", "http://prom.test", tmp_path, config,
                                  said.append) == empty
