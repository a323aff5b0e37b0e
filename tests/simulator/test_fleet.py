"""A fleet of simulated nodes in one process (``simulator.fleet``), over real HTTP on loopback.

Each (node, lane) must be its own llama-server: its own port, slot count, engine and counters; a restart
changes one lane on the same port and nothing else; ``satbench sim-fleet`` writes the URL map once every
lane listens; a bad spec is refused in one line naming the setting; and 50 nodes x 2 lanes start in one
process quickly enough for a 2-core test host.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from satbench.simulator.fleet import Fleet, FleetError, FleetSpec, parse_lanes, serve_fleet
from satbench.simulator.profile import PROFILE_DIR
from testkit.fleet import FleetThread

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES = ("node-001", "node-002", "node-003")


def _spec() -> FleetSpec:
    lanes = [{"name": "dense", "profile": "dense"}, {"name": "moe", "profile": "moe"}]
    odd = [{"name": "dense", "profile": "dense", "slots": 6}, {"name": "moe", "profile": "moe", "slots": 3}]
    return FleetSpec.from_mapping({"nodes": [
        {"name": "node-001", "labels": {"gpu": "h100"}, "lanes": lanes},
        {"name": "node-002", "lanes": odd},
        {"name": "node-003", "lanes": lanes},
    ]})  # fmt: skip


@pytest.fixture(scope="module")
def fleet() -> Iterator[FleetThread]:
    with FleetThread(_spec(), startup_timeout_s=30) as f:
        yield f


def _props(url: str) -> dict[str, Any]:
    resp = httpx.get(url + "/props", timeout=5)
    resp.raise_for_status()
    out: dict[str, Any] = resp.json()
    return out


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no llamacpp:{name} in {url}/metrics")


def _busy_slots(url: str) -> int:
    return sum(1 for slot in httpx.get(url + "/slots", timeout=5).json() if slot["is_processing"])


def test_every_lane_is_its_own_server_with_its_own_slot_count(fleet: FleetThread) -> None:
    urls = fleet.urls()
    assert list(urls) == list(NODES) and all(list(lanes) == ["dense", "moe"] for lanes in urls.values())
    ports = {urlsplit(url).port for lanes in urls.values() for url in lanes.values()}
    assert len(ports) == 6
    for node, lanes in urls.items():
        for lane, url in lanes.items():
            assert fleet.url(node, lane) == url
            props = _props(url)
            want = {"dense": 6, "moe": 3}[lane] if node == "node-002" else (4 if lane == "dense" else None)
            if want is not None:
                assert props["total_slots"] == want, (node, lane)
            assert props["simulator"]["profile"] == lane
            assert httpx.get(url + "/health", timeout=5).json() == {"status": "ok"}
    default_moe = _props(urls["node-001"]["moe"])["total_slots"]
    assert _props(urls["node-003"]["moe"])["total_slots"] == default_moe != 3


def test_a_request_on_one_lane_leaves_every_other_lane_untouched(fleet: FleetThread) -> None:
    busy, other, far = fleet.url("node-003", "dense"), fleet.url("node-003", "moe"), fleet.url("node-001", "dense")
    before = {u: _metric(u, "tokens_predicted_total") for u in (busy, other, far)}
    body = {"prompt": "a long story " * 4, "n_predict": 4000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=10) as client, client.stream("POST", busy + "/completion", json=body) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # generating now
        assert _busy_slots(busy) == 1 and _metric(busy, "requests_processing") == 1
        for quiet in (other, far):
            assert _busy_slots(quiet) == 0
            assert _metric(quiet, "requests_processing") == 0
    done = httpx.post(busy + "/completion", json={"prompt": "hi", "n_predict": 4, "ignore_eos": True}, timeout=10)
    assert done.json()["timings"]["predicted_n"] == 4
    assert _metric(busy, "tokens_predicted_total") > before[busy]
    assert _metric(other, "tokens_predicted_total") == before[other]
    assert _metric(far, "tokens_predicted_total") == before[far]
    assert fleet.app("node-003", "dense").runtime is not fleet.app("node-003", "moe").runtime


def test_restart_keeps_the_port_and_changes_only_that_lane(fleet: FleetThread) -> None:
    url = fleet.url("node-001", "dense")
    others = {(n, ln): _props(u) for n, lanes in fleet.urls().items() for ln, u in lanes.items()
              if (n, ln) != ("node-001", "dense")}  # fmt: skip
    apps = {key: fleet.app(*key) for key in others}
    assert _props(url)["total_slots"] == 4
    assert fleet.restart("node-001", "dense", slots=2, ctx_size=4096) == url
    props = _props(url)
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 2048  # -c over -np
    assert len(httpx.get(url + "/slots", timeout=5).json()) == 2
    assert httpx.get(url + "/metrics", timeout=5).status_code == 200  # ctx_size keeps /metrics on
    for key, was in others.items():
        assert _props(fleet.url(*key))["total_slots"] == was["total_slots"]
        assert fleet.app(*key) is apps[key]  # never restarted
    lane = fleet.fleet.spec.node("node-001").lane("dense")
    assert (lane.slots, lane.ctx_size) == (2, 4096)
    with pytest.raises(FleetError, match=r"^restart node-001/dense: slots: .*greater than 0$"):
        fleet.restart("node-001", "dense", slots=0)
    with pytest.raises(FleetError, match=r"unknown setting\(s\) slotz \(valid: profile, slots"):
        fleet.restart("node-001", "dense", slotz=3)
    assert _props(url)["total_slots"] == 2  # a refused restart leaves the lane serving
    assert fleet.restart("node-001", "dense", slots=None, ctx_size=None) == url  # None: back to the profile
    assert _props(url)["total_slots"] == 4 and urlsplit(url).port == urlsplit(fleet.url("node-001", "dense")).port


# A connection the old app had accepted but not answered is dropped with it (as on any restart); asyncio may
# then collect its transport unclosed, which pytest reports as an unraisable ResourceWarning. That is the
# drop the test counts, not a leak of the fleet. The test collects them itself before it ends: left to the
# collector's own time, they were found during the next tests of this file (a clean clone's make test, twice:
# two server-side sockets of this test's port, one per hammer, at the bad-spec tests' setup).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_lane_restarting_under_load_is_never_refused() -> None:
    with FleetThread(FleetSpec.uniform(1, {"d": "dense"}), startup_timeout_s=30) as fleet:
        url = fleet.url("node-001", "d")
        stop, answered, refused, dropped, other = threading.Event(), [0], [0], [0], []

        def hammer() -> None:
            while not stop.is_set():
                try:
                    httpx.get(url + "/health", timeout=5).raise_for_status()  # a new connection each time
                    answered[0] += 1
                except httpx.ConnectError:
                    refused[0] += 1
                except httpx.RemoteProtocolError:  # accepted by the old app, closed at its shutdown
                    dropped[0] += 1
                except httpx.HTTPError as exc:  # anything else is reported, never a dead thread
                    other.append(repr(exc))

        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 10
            while answered[0] == 0 and time.monotonic() < deadline:  # the hammers are in before any restart
                time.sleep(0.01)
            for i in range(10):
                assert fleet.restart("node-001", "d", slots=1 + i % 3) == url
                time.sleep(0.02)  # requests land on every new app, not only between restarts
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
    gc.collect()  # the dropped connections' transports, under this test's filter (above)
    assert refused[0] == 0 and answered[0] > 0, (answered, refused, dropped, other[:3])


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"nodes": [{"name": "a", "lanes": [{"name": "x"}]}, {"name": "a", "lanes": [{"name": "y"}]}]},
         "nodes: duplicate node name(s) a"),
        ({"nodes": [{"name": "a", "lanes": [{"name": "x"}, {"name": "x", "profile": "moe"}]}]},
         "nodes[a].lanes: duplicate lane name(s) x"),
        ({"nodes": [{"name": "a", "lanes": [{"name": "x", "profile": "nope"}]}]},
         "nodes[a].lanes[x].profile: no simulator profile 'nope'"),
        ({"nodes": [{"name": "a", "lanes": [{"name": "x", "slotz": 2}]}]},
         "nodes[a].lanes[x].slotz: unknown setting (did you mean slots?"),
        ({"nodes": [{"name": "local", "lanes": [{"name": "x"}]}]}, "nodes[local].name: 'local' is reserved"),
        ({"nodes": [{"name": "a", "lanes": []}]}, "nodes[a].lanes: a node needs at least one lane"),
        ({"nodes": [{"name": "a", "lanes": [{"name": "x", "slots": 0}]}]}, "nodes[a].lanes[x].slots:"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_refused_in_one_line_naming_the_setting(data: dict[str, Any], names: str) -> None:
    with pytest.raises(FleetError) as err:
        FleetSpec.from_mapping(data)
    message = str(err.value)
    assert "\n" not in message and message.startswith("invalid fleet config: ")
    assert names in message


def test_a_spec_file_reads_profiles_next_to_it_and_the_shorthand_names_nodes(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.toml").write_text((PROFILE_DIR / "moe.toml").read_text())
    (tmp_path / "fleet.toml").write_text(
        '[[nodes]]\nname = "gpu-a"\nlabels = {gpu = "h100"}\n'
        '[[nodes.lanes]]\nname = "chat"\nprofile = "dense"\nslots = 2\n'
        '[[nodes.lanes]]\nname = "code"\nprofile = "profiles/mine.toml"\nbatch = 1024\nubatch = 256\n'
    )
    spec = FleetSpec.load(tmp_path / "fleet.toml")
    node = spec.node("gpu-a")
    assert node.labels == {"gpu": "h100"} and node.lane("code").profile == str(tmp_path / "profiles/mine.toml")
    profile, _ = node.lane("code").resolved()
    assert (profile.server.batch, profile.server.ubatch, profile.is_moe) == (1024, 256, True)
    assert node.lane("chat").resolved()[0].server.slots == 2
    (tmp_path / "bad.toml").write_text("[[nodes]\n")
    with pytest.raises(FleetError, match="is not valid TOML"):
        FleetSpec.load(tmp_path / "bad.toml")
    assert parse_lanes("dense=dense, moe=moe") == {"dense": "dense", "moe": "moe"} == parse_lanes("dense,moe")
    with pytest.raises(FleetError, match="duplicate lane name dense"):
        parse_lanes("dense=dense,dense=moe")
    uniform = FleetSpec.uniform(12, {"a": "dense"}, slots=3)
    assert [n.name for n in uniform.nodes][:2] == ["node-001", "node-002"] and uniform.lane_count() == 12
    assert all(n.lanes[0].slots == 3 for n in uniform.nodes)


def _cli(*args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "satbench.cli", "sim-fleet", *args]
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_cli_writes_the_urls_file_once_every_lane_listens(tmp_path: Path) -> None:
    urls_file = tmp_path / "urls.json"
    proc = _cli("--nodes", "3", "--lanes", "dense=dense,moe=moe", "--urls-file", str(urls_file))
    try:
        deadline = time.monotonic() + 30
        while not urls_file.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no urls file in 30 s"
            time.sleep(0.05)
        urls = json.loads(urls_file.read_text())
        assert list(urls) == list(NODES) and all(list(lanes) == ["dense", "moe"] for lanes in urls.values())
        for lanes in urls.values():
            for lane, url in lanes.items():
                assert _props(url)["simulator"]["profile"] == lane  # listening already when the file appears
    finally:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=5)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 1 and "listening: 3 nodes, 6 lanes on 127.0.0.1" in lines[0], out
    assert str(urls_file) in lines[0]


@pytest.mark.slow
def test_the_cli_refuses_a_bad_spec_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.toml"
    spec.write_text('[[nodes]]\nname = "a"\n[[nodes.lanes]]\nname = "x"\n[[nodes.lanes]]\nname = "x"\n')
    cases = [(["--spec", str(spec)], "nodes[a].lanes: duplicate lane name(s) x"),
             (["--nodes", "2", "--lanes", "x=nope"], "nodes[node-001].lanes[x].profile: no simulator profile 'nope'")]
    for args, names in cases:
        done = subprocess.run([sys.executable, "-m", "satbench.cli", "sim-fleet", *args], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("satbench sim-fleet: invalid fleet config: "), done.stderr
        assert names in lines[0]


def test_fifty_nodes_of_two_lanes_start_in_one_process_and_all_answer_health() -> None:
    t0 = time.perf_counter()
    spec = FleetSpec.uniform(50, {"dense": "dense", "moe": "moe"})
    with FleetThread(spec, startup_timeout_s=30) as fleet:
        urls = [url for lanes in fleet.urls().values() for url in lanes.values()]
        listening_s = time.perf_counter() - t0
        with httpx.Client(timeout=5) as client:
            statuses = [client.get(url + "/health").json()["status"] for url in urls]
        healthy_s = time.perf_counter() - t0
    closed_s = time.perf_counter() - t0
    assert len(urls) == 100 and len({urlsplit(u).port for u in urls}) == 100
    assert statuses == ["ok"] * 100
    print(f"50x2 fleet: spec+listening {listening_s:.2f} s, all /health {healthy_s:.2f} s, closed {closed_s:.2f} s")
    assert healthy_s < 15.0 and closed_s < 20.0


def test_serve_fleet_runs_on_the_callers_loop_and_stops_with_the_event() -> None:
    async def main() -> tuple[dict[str, dict[str, str]], int]:
        stop = asyncio.Event()
        seen: list[dict[str, dict[str, str]]] = []
        fleets: list[Fleet] = []

        def ready(urls: dict[str, dict[str, str]]) -> None:
            seen.append(urls)
            stop.set()

        await asyncio.wait_for(serve_fleet(FleetSpec.uniform(2, {"d": "dense"}), stop=stop, on_ready=ready,
                                           on_fleet=fleets.append), timeout=20)
        return seen[0], len(fleets[0].urls())  # closed: no lane left

    urls, left = asyncio.run(main())
    assert list(urls) == ["node-001", "node-002"] and left == 0
    port = urlsplit(urls["node-001"]["d"]).port
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)  # the port is released


def test_a_fleet_with_an_unbindable_host_fails_in_the_callers_thread() -> None:
    with pytest.raises(OSError), FleetThread(FleetSpec.uniform(2, {"d": "dense"}), host="192.0.2.1",
                                             startup_timeout_s=10):  # TEST-NET-1: never a local address
        pass
