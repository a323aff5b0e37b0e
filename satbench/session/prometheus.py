"""A Prometheus for one session: generated config and storage in the run folder, loopback only.

The session starts the Debian ``prometheus`` binary (found on PATH, or as configured) with a config that
lists exactly this run's targets: one exporter per lane (the lane is a target label, as DESIGN.md asks), the
load generator and the recommender, scraped every ``scrape_interval_s``, plus the recording and alerting
rules of the repository's ``prometheus/rules/``. The text comes from the exporter's
``render_prometheus_config``, so the per-run config and the committed one agree. ``wait_targets_up`` blocks
until every target has been scraped once, so the first step window already has samples.
``wait_remote_written`` holds the session's end until a ``remote_write`` store (the fleet's) has been sent
every sample this Prometheus had stored: stopping it sooner loses the last batches (on a loaded machine the
store lacked the session's last seconds).

A Prometheus given by URL may want credentials for reads (a fleet's store behind its gate): every wait takes
``auth`` (user, password) and sends it as basic auth; ``check_readable`` asks it once before the session
starts anything, so one that refuses the session's reads (401/403) stops it in one line naming the settings,
not after a whole walk whose waits ran to their bounds.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from satbench.exporter.promconfig import ScrapeTarget, render_prometheus_config
from satbench.runtimes.processes import ProcessSet, StartError, wait_until_ready

__all__ = [
    "INSTALL_HINT",
    "PROMETHEUS_DIR",
    "ScrapeTarget",
    "check_readable",
    "find_prometheus",
    "remote_write_lag",
    "render_prometheus_config",
    "rule_files",
    "start_prometheus",
    "wait_remote_written",
    "wait_scraped_since",
    "wait_targets_up",
]

INSTALL_HINT = "apt-get install prometheus"
PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "prometheus"


def find_prometheus(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        raise StartError(f"Prometheus not found ({binary!r} is not on PATH); install it: {INSTALL_HINT}")
    return found


def rule_files(root: Path = PROMETHEUS_DIR) -> list[Path]:
    """The rule files of ``prometheus/rules/`` (``*.yml``, ``*.yaml``), sorted."""
    folder = root / "rules"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml") and p.is_file())


@dataclass(frozen=True, slots=True)
class StartedPrometheus:
    url: str
    config_path: Path
    storage_path: Path
    pid: int


def start_prometheus(
    processes: ProcessSet, binary: str, folder: Path, config_text: str, *, port: int, timeout_s: float
) -> StartedPrometheus:
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "prometheus.yml"
    config_path.write_text(config_text, encoding="utf-8")
    storage = folder / "data"
    argv = [
        find_prometheus(binary),
        f"--config.file={config_path}",
        f"--storage.tsdb.path={storage}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=30d",
        "--log.level=warn",
    ]
    child = processes.start("prometheus", argv)
    url = f"http://127.0.0.1:{port}"
    wait_until_ready(child, f"{url}/-/ready", timeout_s=timeout_s)
    return StartedPrometheus(url=url, config_path=config_path, storage_path=storage, pid=child.pid)


Auth = tuple[str, str]


def check_readable(url: str, auth: Auth | None, *, timeout_s: float = 5.0,
                   client: httpx.Client | None = None) -> None:
    """One query of the Prometheus at ``url`` (``vector(1)``): ``StartError`` in one line where it refuses it
    (401/403: no credentials, or wrong ones), naming the settings. Anything else (no answer yet, another
    error) is left to the session's own waits, which degrade rather than stop."""
    http = client or httpx.Client(timeout=timeout_s, auth=auth)
    try:
        status = http.get(f"{url}/api/v1/query", params={"query": "vector(1)"}).status_code
    except httpx.HTTPError:
        return
    finally:
        if client is None:
            http.close()
    if status in (401, 403):
        why = ("refused the credentials of prometheus.username and prometheus.password_file" if auth is not None
               else "wants credentials: set prometheus.username and prometheus.password_file")
        raise StartError(f"Prometheus at {url} answered HTTP {status} to a query: it {why}")


def wait_targets_up(
    url: str,
    expected: int,
    *,
    timeout_s: float,
    client: httpx.Client | None = None,
    ignore_jobs: Sequence[str] = (),
    auth: Auth | None = None,
) -> None:
    """Waits until ``expected`` active targets (jobs in ``ignore_jobs`` aside) report health ``up``.

    Raises StartError naming the targets still down at the deadline.
    """
    http = client or httpx.Client(timeout=2.0, auth=auth)
    deadline = time.monotonic() + timeout_s
    down: list[str] = ["(no answer)"]
    try:
        while time.monotonic() < deadline:
            try:
                data = http.get(f"{url}/api/v1/targets", params={"state": "active"}).json()
                active = [
                    t
                    for t in data["data"]["activeTargets"]
                    if (t.get("labels") or {}).get("job") not in ignore_jobs
                ]
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                time.sleep(0.2)
                continue
            down = [
                f"{t.get('scrapeUrl')}: {t.get('lastError') or t.get('health')}"
                for t in active
                if t.get("health") != "up"
            ]
            if len(active) >= expected and not down:
                return
            time.sleep(0.2)
    finally:
        if client is None:
            http.close()
    raise StartError(f"Prometheus targets not up after {timeout_s:.0f} s: {'; '.join(down)}")


def _unix(stamp: str) -> float | None:
    """Prometheus' RFC 3339 ``lastScrape`` (nanosecond fraction, ``Z``) as Unix seconds."""
    try:
        head, _, rest = stamp.partition(".")
        if rest:
            digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]  # the fraction, before the zone
            zone = rest[len(digits):]
            stamp = f"{head}.{digits[:6]}{zone}"
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def wait_scraped_since(
    url: str,
    since: float,
    jobs: Sequence[str],
    *,
    timeout_s: float,
    client: httpx.Client | None = None,
    auth: Auth | None = None,
) -> bool:
    """Waits until Prometheus has scraped every active target of ``jobs`` at or after Unix time ``since``.

    This is the readiness check for "the samples up to ``since`` are in": a scrape that started after
    ``since`` carries them (a target that answered) or shows they cannot come (a target that is gone).
    Returns False at the deadline, never raises: a late or unreachable Prometheus degrades the answer
    (the recommender then reads missed windows from the records), it does not stop the session.
    """

    def scraped(http: httpx.Client) -> bool:
        data = http.get(f"{url}/api/v1/targets", params={"state": "active"}).json()
        targets = [t for t in data["data"]["activeTargets"] if (t.get("labels") or {}).get("job") in jobs]
        stamps = [_unix(str(t.get("lastScrape") or "")) for t in targets]
        return bool(targets) and all(s is not None and s >= since for s in stamps)

    return _poll(scraped, timeout_s=timeout_s, client=client, auth=auth)


def _poll(check: Callable[[httpx.Client], bool], *, timeout_s: float, client: httpx.Client | None,
          auth: Auth | None = None) -> bool:
    """``check`` every 0.1 s until it holds (True) or ``timeout_s`` passed (False); an answer it cannot read
    counts as not yet, never raises."""
    http = client or httpx.Client(timeout=2.0, auth=auth)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                if check(http):
                    return True
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
    finally:
        if client is None:
            http.close()


# Prometheus' own gauges (storage/remote): the newest sample it stored, and per remote_write queue the newest
# sample that queue has sent
_STORED = "prometheus_remote_storage_highest_timestamp_in_seconds"
_SENT = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds"


def remote_write_lag(metrics_text: str) -> tuple[float, float] | None:
    """``(stored, sent)`` from Prometheus' ``/metrics``: the newest sample's time it stored, and the oldest of
    its remote_write queues' newest sent (None where it has no queue)."""
    stored, sent = 0.0, []
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == _STORED:
                stored = max(stored, sample.value)
            elif sample.name == _SENT:
                sent.append(sample.value)
    return (stored, min(sent)) if sent else None


def wait_remote_written(url: str, *, timeout_s: float, client: httpx.Client | None = None) -> bool:
    """Waits until every remote_write queue of the Prometheus at ``url`` has sent the samples it had stored
    when the wait began. False at the deadline (or with no queue to ask), never raises: a slow store costs
    its own last samples, never the session."""
    target: float | None = None  # what was stored when the wait began, not a figure that moves on

    def sent(http: httpx.Client) -> bool:
        nonlocal target
        lag = remote_write_lag(http.get(f"{url}/metrics").text)
        if lag is None:
            return False
        target = lag[0] if target is None else target
        return lag[1] >= target > 0

    return _poll(sent, timeout_s=timeout_s, client=client)
