"""A starving lane's alert, end to end: a real Prometheus loads the committed rule files unchanged (the
recording rules and ``SatbenchDecodeStarvation`` with its own ``for: 10s``), scrapes the load generator's
own metrics collector (``loadgen.metrics``, fed by the test) and sends its alerts to a real Alertmanager,
which posts them to a webhook receiver in the test. Everything listens on free loopback ports.

The lane ``starved`` first has decode stalls of 0.4 s against a median inter-token gap of 5 ms (the alert
fires above 5x the median), the lane ``steady`` stalls of 6 ms; then the test heals ``starved`` and the
Alertmanager must post the alert again as ``"status": "resolved"``. Scrape and rule evaluation every 1 s,
Alertmanager's ``group_wait``/``group_interval`` 1 s, ``repeat_interval`` 5 s, ``resolve_timeout`` 5 s and
``send_resolved: true``. Every wait is bounded, every process and server is stopped in a ``finally``.
Skipped when the Alertmanager binary (Debian: ``prometheus-alertmanager``) is not installed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.promconfig import LOADGEN_JOB, ScrapeTarget, render_prometheus_config
from satbench.loadgen.metrics import LoadgenMetrics, MetricsServer
from testkit.net import free_port
from testkit.process import ChildProcess
from testkit.prom import PrometheusProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

PROM_DIR = Path(__file__).resolve().parents[2] / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
ALERT = "SatbenchDecodeStarvation"
ITL_S = 0.005
STALL_STARVING_S = 0.4
STALL_HEALTHY_S = 0.006
FIRE_TIMEOUT_S = 45.0
RESOLVE_TIMEOUT_S = 45.0


def alertmanager_binary() -> str | None:
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class Webhook:
    """A loopback HTTP receiver that keeps every JSON body POSTed to it (Alertmanager's webhook payloads)."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with owner._lock:
                    owner.posts.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def alerts(self) -> list[dict[str, Any]]:
        """Each alert of each notification so far, with the notification's status as ``notification``."""
        with self._lock:
            posts = list(self.posts)
        return [{**alert, "notification": post.get("status")} for post in posts for alert in post.get("alerts", [])]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Feed:
    """Feeds the load generator's collector as a streaming lane would: every 50 ms, per lane, five
    inter-token gaps of 5 ms and one decode stall (the lane's current stall length)."""

    def __init__(self, metrics: LoadgenMetrics, stalls: dict[str, float]) -> None:
        self.metrics = metrics
        self.stalls = dict(stalls)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feed", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for lane, stall in list(self.stalls.items()):
                self.metrics.histogram("itl", lane).observe_many([ITL_S] * 5)
                self.metrics.histogram("stall", lane).observe(stall)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class Alertmanager:
    """A real Alertmanager on a free loopback port, clustering off, its storage in a temporary folder."""

    def __init__(self, binary: str, webhook_url: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = (
            "global:\n"
            "  resolve_timeout: 5s\n"
            "route:\n"
            "  receiver: webhook\n"
            "  group_by: [alertname, lane]\n"
            "  group_wait: 1s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 5s\n"
            "receivers:\n"
            "  - name: webhook\n"
            "    webhook_configs:\n"
            f"      - url: {json.dumps(webhook_url)}\n"
            "        send_resolved: true\n"
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="satbench-am-")
        self.dir = Path(self._tmp.name)
        (self.dir / "alertmanager.yml").write_text(self.config)
        argv = [
            self.binary,
            f"--config.file={self.dir / 'alertmanager.yml'}",
            f"--storage.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
        self.child = ChildProcess(argv, name="alertmanager", ready_url=self.url + "/-/ready", cwd=self.dir,
                                  log_path=self.dir / "alertmanager.log", startup_timeout_s=20)

    def start(self) -> None:
        self.child.start()

    def log(self) -> str:
        return self.child.log()

    def close(self) -> None:
        self.child.stop()
        self._tmp.cleanup()


def _prometheus_config(loadgen_address: str, alertmanager_port: int) -> str:
    config = render_prometheus_config([ScrapeTarget(LOADGEN_JOB, loadgen_address)], [], scrape_interval_s=1.0)
    return config + (
        "alerting:\n"
        "  alertmanagers:\n"
        "    - static_configs:\n"
        f'        - targets: ["127.0.0.1:{alertmanager_port}"]\n'
    )


def _wait(what: str, found: Callable[[], list[dict[str, Any]]], timeout_s: float, context: Callable[[], str]
          ) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = found()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout_s:.0f}s\n{context()}")


@contextlib.contextmanager
def _closing(*closers: Callable[[], None]) -> Iterator[None]:
    try:
        yield
    finally:
        for close in closers:
            with contextlib.suppress(Exception):
                close()


def test_starving_lane_alert_reaches_the_receiver_and_resolves() -> None:
    binary = alertmanager_binary()
    if binary is None:
        pytest.skip("Alertmanager is not installed (Debian: apt-get install prometheus-alertmanager)")
    started = time.monotonic()
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    feed = Feed(metrics, {"starved": STALL_STARVING_S, "steady": STALL_HEALTHY_S})
    webhook = Webhook()
    loadgen = MetricsServer(registry)
    alertmanager = Alertmanager(binary, webhook.url)
    with _closing(alertmanager.close, loadgen.close, webhook.close, feed.close):
        feed.start()
        alertmanager.start()
        config = _prometheus_config(f"127.0.0.1:{loadgen.port}", alertmanager.port)
        with PrometheusProcess(config, rule_files=RULE_FILES) as prom:

            def context() -> str:
                alerts: object = "(no answer)"
                with contextlib.suppress(Exception):
                    alerts = prom.query("ALERTS")
                return (f"notifications: {json.dumps(webhook.posts)}\nALERTS: {alerts}\n"
                        f"alertmanager log:\n{alertmanager.log()}\nprometheus log:\n{prom.log()}")

            def of(lane: str, status: str) -> list[dict[str, Any]]:
                return [a for a in webhook.alerts() if a["labels"].get("alertname") == ALERT
                        and a["labels"].get("lane") == lane and a["status"] == status]

            firing = _wait(f"firing {ALERT} for lane starved", lambda: of("starved", "firing"), FIRE_TIMEOUT_S,
                           context)[0]
            fired_at = time.monotonic()
            assert firing["notification"] == "firing"
            assert firing["labels"]["severity"] == "warning"
            assert firing["annotations"]["summary"] == "Decoding stalls on lane starved"

            feed.stalls["starved"] = STALL_HEALTHY_S  # the lane recovers
            resolved = _wait(f"resolved {ALERT} for lane starved", lambda: of("starved", "resolved"),
                             RESOLVE_TIMEOUT_S, context)[0]
            assert resolved["notification"] == "resolved"
            assert resolved["startsAt"] == firing["startsAt"]
            assert resolved["endsAt"] >= resolved["startsAt"]
            # the healthy lane never alerted
            assert not [a for a in webhook.alerts() if a["labels"].get("lane") == "steady"], context()
            assert prom.query_value(f'ALERTS{{alertname="{ALERT}",lane="starved"}}') is None
    print(f"fired after {fired_at - started:.1f}s, resolved {time.monotonic() - fired_at:.1f}s later")
