"""Signed fingerprint series: an answer's validity decided only by what its own exporter published.

The scenario each test builds is the truth: a node measured on 4 slots (build b1) now runs 2 slots (build b2),
so its answer is stale (``changed``). The exporter's series are made by the exporter's own code
(``exporter.live_fingerprint.fingerprint_family`` with a ``FingerprintSigner`` holding the node's key, as
``satbench fingerprint-key`` derives it); a forger writes the series the answer was measured on, as the audit
did with one import. With the fleet key the recommender must never call that answer ``valid``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from satbench.core.fingerprint import node_fingerprint
from satbench.core.fingerprint_labels import info_labels
from satbench.core.fingerprint_signature import MAC_LABEL, SINCE_LABEL, node_key, verify
from satbench.exporter.cli import fingerprint_key
from satbench.exporter.live_fingerprint import FingerprintSigner, fingerprint_family
from satbench.recommender.prometheus_source import VectorSample
from satbench.recommender.settings import RecommenderSettings
from satbench.recommender.validity import check_answers, fingerprints_when_measured, measured_fingerprints

FLEET_KEY = b"fleet-key-for-the-signature-tests"


def fingerprint(slots: int, build: str) -> dict[str, Any]:
    props = {"build_info": build, "model_path": "m.gguf", "total_slots": slots, "model_ftype": "Q8_0",
             "default_generation_settings": {"n_ctx": 4096}}
    argv = ["llama-server", "-np", str(slots), "-c", str(4096 * slots), "-b", "512", "-ub", "128"]
    return node_fingerprint(props=props, argv=argv, environ={}, hardware=None, model_files=None,
                            model_meta={"n_params": 8_000_000_000, "ftype": "Q8_0"})


MEASURED = fingerprint(4, "b1")
NOW_RUNS = fingerprint(2, "b2")


def exporter_series(fp: Mapping[str, Any], *, node: str, since: float, key: bytes | None = None,
                    lane: str = "dense") -> VectorSample:
    """The series node ``node``'s exporter publishes (signed with its node key, or ``key``) as the store
    returns it: its own labels, empty ones dropped, plus the scrape's target labels."""
    signer = FingerprintSigner(key or node_key(FLEET_KEY, node), clock=lambda: since)
    sample = fingerprint_family({None: fp}, signer).samples[0]
    labels = {k: v for k, v in sample.labels.items() if v}
    return VectorSample({**labels, "lane": lane, "node": node, "job": "satbench_exporter",
                         "instance": "10.0.0.7:9101"}, 1.0)


def forged_series(fp: Mapping[str, Any], *, node: str, lane: str = "dense") -> VectorSample:
    """What a forger imports: the fingerprint's labels, no signature."""
    labels = {k: v for k, v in info_labels(fp).items() if v}
    return VectorSample({**labels, "lane": lane, "node": node, "job": "satbench_exporter"}, 1.0)


class Store:
    """What an instant query of ``runtime_fingerprint_info`` returns."""

    def __init__(self, samples: list[VectorSample]) -> None:
        self.samples = samples

    async def query(self, expr: str, at: float) -> list[VectorSample]:
        return list(self.samples)

    async def query_samples(self, expr: str, at: float) -> list[tuple[dict[str, str], list[Any]]]:
        return []

    async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]:
        return []


def states(samples: list[VectorSample], fleet_key: bytes | None, keys: tuple[str, ...] = ("gpu-a/dense",)
           ) -> dict[str, tuple[str, str | None]]:
    answers = measured_fingerprints({key: {"fingerprint": MEASURED} for key in keys})
    got = asyncio.run(check_answers(Store(samples), answers, now=1000.0, fleet_key=fleet_key))
    return {key: (v.state, v.reason) for key, v in got.items()}


def test_a_forged_series_turns_a_stale_answer_valid_only_without_the_key() -> None:
    genuine = exporter_series(NOW_RUNS, node="gpu-a", since=900.0)
    forged = forged_series(MEASURED, node="gpu-a")
    assert states([genuine], None)["gpu-a/dense"][0] == "changed"
    assert states([genuine, forged], None)["gpu-a/dense"][0] == "valid"  # the audit: one import, valid again
    assert states([genuine, forged], FLEET_KEY)["gpu-a/dense"][0] == "changed"


def test_a_replayed_genuine_old_series_is_outranked_by_the_exporters_current_one() -> None:
    before = exporter_series(MEASURED, node="gpu-a", since=100.0)  # what the exporter signed before the rebuild
    now = exporter_series(NOW_RUNS, node="gpu-a", since=900.0)
    assert verify(before.labels, node_key(FLEET_KEY, "gpu-a"))  # a replay verifies: the since decides
    assert states([before, now], None)["gpu-a/dense"][0] == "valid"
    assert states([before, now], FLEET_KEY)["gpu-a/dense"][0] == "changed"
    assert states([before], FLEET_KEY)["gpu-a/dense"][0] == "valid"  # the node's last word while nothing else


def test_series_that_do_not_verify_decide_nothing_and_say_unverified() -> None:
    cases = {
        "unsigned": forged_series(MEASURED, node="gpu-b"),
        "another node's key": exporter_series(MEASURED, node="gpu-b", since=1.0, key=node_key(FLEET_KEY, "gpu-c")),
        "the wrong fleet": exporter_series(MEASURED, node="gpu-b", since=1.0,
                                           key=node_key(b"another-fleet-entirely", "gpu-b")),
    }
    for case, series in cases.items():
        state, reason = states([series], FLEET_KEY, ("gpu-b/dense",))["gpu-b/dense"]
        assert state == "unknown", case
        assert reason is not None and reason.startswith("unverified: 1 runtime_fingerprint_info"), case
    # a label changed after signing (a series copied to another node, a slot count edited) fails too
    signed = exporter_series(MEASURED, node="gpu-a", since=1.0)
    moved = VectorSample({**signed.labels, "node": "gpu-b"}, 1.0)
    edited = VectorSample({**signed.labels, "slots": "2"}, 1.0)
    assert signed.labels["slots"] == "4"
    assert states([moved], FLEET_KEY, ("gpu-b/dense",))["gpu-b/dense"][0] == "unknown"
    assert not verify(edited.labels, node_key(FLEET_KEY, "gpu-a"))
    assert states([signed], FLEET_KEY)["gpu-a/dense"][0] == "valid"  # and the genuine one counts


def test_a_posted_runs_fingerprint_is_taken_only_from_a_signed_series() -> None:
    forged = forged_series(MEASURED, node="gpu-a")
    genuine = exporter_series(NOW_RUNS, node="gpu-a", since=50.0)
    taken = asyncio.run(fingerprints_when_measured(Store([forged]), {"gpu-a/dense": 60.0}, fleet_key=FLEET_KEY))
    fp, why = taken["gpu-a/dense"]
    assert fp is None and why is not None and why.startswith("unverified")
    taken = asyncio.run(fingerprints_when_measured(Store([forged, genuine]), {"gpu-a/dense": 60.0},
                                                   fleet_key=FLEET_KEY))
    fp, why = taken["gpu-a/dense"]
    assert why is None and fp is not None and fp["settings"]["slots"] == 2


def test_the_signer_keeps_its_since_while_the_fingerprint_holds() -> None:
    clock = iter([10.0, 20.0, 30.0])
    signer = FingerprintSigner(node_key(FLEET_KEY, "local"), clock=lambda: next(clock))
    first = signer.signed(None, info_labels(MEASURED))
    again = signer.signed(None, info_labels(MEASURED))
    changed = signer.signed(None, info_labels(NOW_RUNS))
    assert first == again and first[SINCE_LABEL] == "10.000"  # one series while nothing changes
    assert changed[SINCE_LABEL] == "20.000" and changed[MAC_LABEL] != first[MAC_LABEL]
    assert "key" not in repr(signer).replace("key=<hidden>", "")
    with pytest.raises(ValueError, match="at least 16"):
        FingerprintSigner(b"short")


def test_the_cli_derives_a_node_key_the_recommender_verifies(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.key"
    fleet.write_text(FLEET_KEY.decode() + "\n")
    out = tmp_path / "gpu-a.key"
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "fingerprint-key", "--node", "gpu-a",
                           "--fleet-key-file", str(fleet), "--out", str(out)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and out.stat().st_mode & 0o077 == 0
    key = fingerprint_key(out)  # what the exporter reads from --fingerprint-key-file
    assert key is not None
    series = exporter_series(MEASURED, node="gpu-a", since=1.0, key=key)
    assert states([series], FLEET_KEY)["gpu-a/dense"][0] == "valid"
    settings = RecommenderSettings(fingerprint_key=FLEET_KEY.decode())
    assert states([series], settings.fingerprint_key_bytes())["gpu-a/dense"][0] == "valid"
    assert states([VectorSample({**series.labels, "node": "gpu-b"}, 1.0)], FLEET_KEY,
                  ("gpu-b/dense",))["gpu-b/dense"][0] == "unknown"
    bad = subprocess.run([sys.executable, "-m", "satbench.cli", "fingerprint-key", "--node", "gpu-a"],
                         capture_output=True, text=True, timeout=60, check=False,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "fleet key" in bad.stderr
