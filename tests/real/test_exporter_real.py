"""The exporter in front of a real llama-server agrees with the server's own /slots and requests_deferred.

Two slots and six long streaming requests (3000 tokens each) hold the server in a steady state for
seconds: two slots busy, the others deferred. Each sample reads the server's raw ``/metrics``, the exporter's
``/metrics``, then the server's ``/slots`` and ``/metrics`` again; where every slot was busy and the queue did
not move meanwhile, both must say the same (busy slots, queue depth, occupancy); once idle, the token counters
match exactly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satbench.exporter.collector import DEFAULT_READ_MAX_AGE_S
from satbench.exporter.server import ExporterConfig, build_collector, serve
from satbench.runtimes.llamacpp import LlamaServer, LlamaServerSpec
from testkit.exposition import samples

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]


@pytest.fixture()
def two_slot_server(llama_server_binary: Path, tiny_models: dict[str, Path],
                    tmp_path: Path) -> Iterator[LlamaServer]:
    # llama-server serves HTTP from a pool of max(np + 2, cores - 1) threads (tools/server: "+2 threads for
    # monitoring endpoints") and a streaming request holds its thread to the end: on two cores the six streams
    # and the polls raced for four to five threads, and the server held 3 deferred, not 4. A pool larger than
    # the test's connections makes the steady state the same on any CPU.
    spec = LlamaServerSpec(model=tiny_models["dense"], parallel=2, ctx_size=16384, alias="dense",
                           extra_args=("--threads-http", "16"))
    with LlamaServer(spec, tmp_path / "server.log", binary=llama_server_binary, ready_timeout_s=120) as server:
        yield server


def test_exporter_agrees_with_slots_and_deferred(two_slot_server: LlamaServer) -> None:
    url = two_slot_server.url
    collector = build_collector(ExporterConfig(runtime_url=url, port=0, gpu="none"))
    exporter = serve(collector, port=0)
    body = {"prompt": "hello " * 16, "n_predict": 3000, "ignore_eos": True, "stream": True}
    # the streams end once the steady state was compared: six answers of 3000 tokens on two CPU slots take three
    # waves of generation, and the last waves' requests waited past their 120 s read timeout for a slot on a busy
    # machine (a thread's ReadTimeout, and the counters compared while the server still generated: 12001 against
    # 12002). A stream told to stop closes its connection at its next chunk, and the server drops the request
    done = threading.Event()

    def stream() -> None:
        with httpx.Client(timeout=120) as client, client.stream("POST", f"{url}/completion", json=body) as r:
            for _ in r.iter_bytes():
                if done.is_set():
                    break

    users = [threading.Thread(target=stream, daemon=True) for _ in range(6)]
    for user in users:
        user.start()
    agreed, late = 0, 0
    seen: list[tuple[int, float, float]] = []
    try:
        with httpx.Client(timeout=10) as client:
            deadline = time.monotonic() + 60
            while agreed < 3 and time.monotonic() < deadline:
                time.sleep(0.3)
                before = samples(client.get(f"{url}/metrics").text)[("llamacpp:requests_deferred", ())]
                ours = samples(client.get(f"{exporter.url}").text)
                if ours[("runtime_up", ())] != 1 or ours[("runtime_slots_up", ())] != 1:
                    # a CPU-only server busy with six streams on two cores answered after the exporter's 0.5 s
                    # scrape budget (--budget-s): that scrape says so and is not compared
                    late += 1
                    continue
                slots = client.get(f"{url}/slots").json()
                raw = samples(client.get(f"{url}/metrics").text)
                busy_raw = sum(1 for s in slots if s.get("is_processing"))
                deferred_raw = raw[("llamacpp:requests_deferred", ())]
                busy_ours = sum(v for (name, labels), v in ours.items()
                                if name == "runtime_slots" and dict(labels)["state"] in ("prefill", "decode"))
                seen.append((busy_raw, deferred_raw, busy_ours))
                if busy_raw != 2 or deferred_raw < 1 or deferred_raw != before:
                    continue  # not the steady state (every slot busy, a queue that did not move meanwhile)
                assert busy_ours == busy_raw
                assert ours[("runtime_queue_depth", ())] == deferred_raw
                assert ours[("runtime_batch_occupancy_ratio", ())] == pytest.approx(1.0)
                agreed += 1
            assert agreed == 3, f"the server never held a steady state (2 busy, a queue): {seen}, {late} late"
            assert late <= len(seen), f"{late} scrapes past the budget, {len(seen)} in time"
            done.set()
            for user in users:
                user.join(timeout=120)
            assert not any(user.is_alive() for user in users), "a stream did not end within 120 s of being told"
            idle_by = time.monotonic() + 60  # the server drops a closed stream at its next token: idle soon after
            while time.monotonic() < idle_by and (
                    any(s.get("is_processing") for s in client.get(f"{url}/slots").json())
                    or samples(client.get(f"{url}/metrics").text)[("llamacpp:requests_deferred", ())]):
                time.sleep(0.2)
            # a scrape within read_max_age_s of the last one reports that read (exporter.shared_read): wait it out
            time.sleep(DEFAULT_READ_MAX_AGE_S + 0.1)
            ours = samples(client.get(f"{exporter.url}").text)
            raw = samples(client.get(f"{url}/metrics").text)
            assert ours[("runtime_output_tokens_total", ())] == raw[("llamacpp:tokens_predicted_total", ())] > 0
            assert ours[("runtime_queue_depth", ())] == 0 and ours[("runtime_batch_occupancy_ratio", ())] == 0
    finally:
        done.set()
        for user in users:
            user.join(timeout=120)
        exporter.close()
        collector.close()
