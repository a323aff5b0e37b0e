"""llama-server payload parsing against every recorded real payload (tests/fixtures/llamacpp/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.exporter.llamacpp_parse import (
    classify_slot,
    llamacpp_snapshot,
    parse_exposition,
    parse_props,
    parse_slots,
)
from satbench.exporter.snapshot import EndpointReply, SlotCounts

FOLDERS = ("dense_np4", "dense_np8", "moe_np4")
SLOTS = {"dense_np4": 4, "dense_np8": 8, "moe_np4": 4}


def reply(name: str, path: Path | None, status: int = 200, error: str | None = None) -> EndpointReply:
    return EndpointReply(name, status, path.read_text() if path else "", 0.001, error)


def replies(folder: Path, metrics: str = "metrics_load.txt", slots: str = "slots_load.json") -> dict:
    return {
        "health": EndpointReply("health", 200, '{"status":"ok"}', 0.001),
        "metrics": reply("metrics", folder / metrics),
        "slots": reply("slots", folder / slots),
        "props": reply("props", folder / "props.json"),
    }


def test_every_metrics_fixture_parses(llamacpp_fixtures: Path) -> None:
    files = sorted(f for f in llamacpp_fixtures.glob("*/metrics_*.txt") if f.parent.name != "extras")
    assert len(files) == 15
    for file in files:
        if file.read_text().startswith("{"):  # router/: the unloaded model's recorded HTTP 400 body
            assert "model is not loaded" in file.read_text(), file
            continue
        samples = parse_exposition(file.read_text())
        assert "llamacpp:n_decode_total" in samples, file
        assert "llamacpp:requests_deferred" in samples, file


@pytest.mark.parametrize("text", ["", "# only comments\n", "garbage without value\n"])
def test_parse_exposition_rejects_non_expositions(text: str) -> None:
    with pytest.raises(ValueError):
        parse_exposition(text)


def test_parse_exposition_skips_labelled_and_keeps_colons() -> None:
    samples = parse_exposition('a:b_total 3\nx{le="1"} 2\nc 1.5e3 1700000000\n')
    assert samples == {"a:b_total": 3.0, "c": 1500.0}


@pytest.mark.parametrize(
    ("slot", "state"),
    [
        ({"is_processing": False}, "idle"),
        ({"is_processing": True, "next_token": [{"n_decoded": 0}]}, "prefill"),
        ({"is_processing": True, "next_token": [{"n_decoded": 97}]}, "decode"),
        ({"is_processing": True, "next_token": {"n_decoded": 3}}, "decode"),
        ({"is_processing": True}, "prefill"),
        ({"state": 0}, "idle"),
        ({"state": 1, "n_decoded": 0}, "prefill"),
        ({"state": 1, "next_token": {"n_decoded": 5}}, "decode"),
    ],
)
def test_classify_slot(slot: dict, state: str) -> None:
    assert classify_slot(slot) == state


def test_classify_slot_rejects_unknown_shape() -> None:
    with pytest.raises(ValueError):
        classify_slot({"id": 0})


@pytest.mark.parametrize("folder", FOLDERS)
def test_slots_fixtures(llamacpp_fixtures: Path, folder: str) -> None:
    n = SLOTS[folder]
    base = llamacpp_fixtures / folder
    assert parse_slots((base / "slots_idle.json").read_text()) == SlotCounts(n, 0, 0)
    assert parse_slots((base / "slots_load.json").read_text()) == SlotCounts(0, 0, n)
    assert parse_slots((base / "slots_after_load.json").read_text()) == SlotCounts(n, 0, 0)


def test_slots_prefill_is_seen_in_a_real_payload_edited_to_prefill(llamacpp_fixtures: Path) -> None:
    slots = json.loads((llamacpp_fixtures / "dense_np4" / "slots_load.json").read_text())
    slots[1]["next_token"][0]["n_decoded"] = 0
    slots[2]["is_processing"] = False
    assert parse_slots(json.dumps(slots)) == SlotCounts(idle=1, prefill=1, decode=2)


@pytest.mark.parametrize("body", ["{}", "[1]", "not json", '[{"id": 0}]'])
def test_parse_slots_rejects_bad_bodies(body: str) -> None:
    with pytest.raises(ValueError):
        parse_slots(body)


@pytest.mark.parametrize("folder", FOLDERS)
def test_props_fixtures(llamacpp_fixtures: Path, folder: str) -> None:
    props = parse_props((llamacpp_fixtures / folder / "props.json").read_text())
    assert props.total_slots == SLOTS[folder]
    assert props.model.endswith(".gguf") and "/" not in props.model
    assert props.endpoint_slots is True and props.endpoint_metrics is True


@pytest.mark.parametrize("folder", FOLDERS)
def test_snapshot_under_load(llamacpp_fixtures: Path, folder: str) -> None:
    base = llamacpp_fixtures / folder
    samples = parse_exposition((base / "metrics_load.txt").read_text())
    snap = llamacpp_snapshot(**replies(base))
    assert snap.up
    assert all(s.up for s in snap.sources)
    assert snap.slots == SlotCounts(0, 0, SLOTS[folder])
    assert snap.slots_configured == SLOTS[folder]
    assert snap.queue_depth == samples["llamacpp:requests_deferred"]
    assert snap.requests_processing == samples["llamacpp:requests_processing"]
    assert snap.occupancy_ratio == 1.0
    assert snap.output_tokens_total == samples["llamacpp:tokens_predicted_total"]
    assert snap.prompt_tokens_total == samples["llamacpp:prompt_tokens_total"]  # prefilled only
    assert snap.prompt_tokens_cached_total == samples["llamacpp:prompt_tokens_cached_total"]  # counted apart
    assert "llamacpp:n_tokens_max" in samples and "llamacpp:spec_decode_num_drafts_total" in samples  # ignored
    assert snap.busy_slot_decodes_total == pytest.approx(
        samples["llamacpp:n_busy_slots_per_decode"] * samples["llamacpp:n_decode_total"]
    )
    assert dict(snap.info)["flavour"] == "llamacpp"


def test_snapshot_dense_np4_load_figures(llamacpp_fixtures: Path) -> None:
    snap = llamacpp_snapshot(**replies(llamacpp_fixtures / "dense_np4"))
    assert snap.queue_depth == 6
    assert snap.decode_steps_total == 169
    assert snap.busy_slot_decodes_total == pytest.approx(457.0, abs=0.01)


@pytest.mark.parametrize("folder", FOLDERS)
def test_recovered_busy_count_matches_generated_tokens_after_load(
    llamacpp_fixtures: Path, folder: str
) -> None:
    # Every busy slot in a decode step produces one token, so after a load of pure generation the recovered
    # busy-slot-decode count equals tokens_predicted_total up to the 6-digit rounding of the average.
    snap = llamacpp_snapshot(
        **replies(llamacpp_fixtures / folder, "metrics_after_load.txt", "slots_after_load.json")
    )
    assert snap.busy_slot_decodes_total == pytest.approx(snap.output_tokens_total, rel=1e-4)
    assert snap.occupancy_ratio == 0.0


def test_metrics_disabled_keeps_slots_and_props(llamacpp_fixtures: Path) -> None:
    base = llamacpp_fixtures / "dense_np4"
    parts = replies(base)
    parts["metrics"] = reply("metrics", llamacpp_fixtures / "extras" / "metrics_without_flag.txt", status=501)
    snap = llamacpp_snapshot(**parts)
    metrics = snap.source("metrics")
    assert metrics is not None and not metrics.up and metrics.http_status == 501
    assert "--metrics" in (metrics.error or "")
    assert (
        snap.queue_depth is None and snap.output_tokens_total is None and snap.busy_slot_decodes_total is None
    )
    assert snap.slots == SlotCounts(0, 0, 4)
    assert snap.occupancy_ratio == 1.0


def test_slots_unavailable_falls_back_to_requests_processing(llamacpp_fixtures: Path) -> None:
    base = llamacpp_fixtures / "dense_np4"
    parts = replies(base)
    parts["slots"] = reply("slots", base / "slots_fail_on_no_slot_load.txt", status=503)
    snap = llamacpp_snapshot(**parts)
    slots = snap.source("slots")
    assert slots is not None and not slots.up and "no slot available" in (slots.error or "")
    assert snap.slots is None
    assert snap.slots_configured == 4  # from /props
    assert snap.occupancy_ratio == 1.0  # requests_processing 4 / total_slots 4
    assert snap.queue_depth == 6


def test_loading_runtime_is_down(llamacpp_fixtures: Path) -> None:
    body = (llamacpp_fixtures / "extras" / "health_loading_503.json").read_text()
    parts = {
        "health": EndpointReply("health", 503, body, 0.001),
        "metrics": EndpointReply("metrics", 503, body, 0.001),
        "slots": EndpointReply("slots", 503, body, 0.001),
        "props": EndpointReply("props", 503, body, 0.001),
    }
    snap = llamacpp_snapshot(**parts)
    assert not snap.up
    assert snap.source("health").error == "HTTP 503: Loading model"  # type: ignore[union-attr]
    assert snap.occupancy_ratio is None and snap.queue_depth is None


def test_unreachable_runtime_is_down() -> None:
    parts = {
        n: EndpointReply(n, None, "", 0.5, "timed out after 0.5s")
        for n in ("health", "metrics", "slots", "props")
    }
    snap = llamacpp_snapshot(**parts)
    assert not snap.up and not any(s.up for s in snap.sources)
    assert all(s.http_status is None for s in snap.sources)


def test_garbage_bodies_mark_only_their_source_down(llamacpp_fixtures: Path) -> None:
    parts = replies(llamacpp_fixtures / "dense_np4")
    parts["slots"] = EndpointReply("slots", 200, "<html>", 0.001)
    parts["props"] = EndpointReply("props", 200, "[]", 0.001)
    snap = llamacpp_snapshot(**parts)
    up = {s.name: s.up for s in snap.sources}
    assert up == {"health": True, "metrics": True, "slots": False, "props": False}
    assert snap.queue_depth == 6 and snap.slots is None and snap.slots_configured is None
    assert snap.occupancy_ratio is None


@pytest.mark.parametrize("folder", FOLDERS)
def test_load_timeline_queue_and_occupancy(llamacpp_fixtures: Path, folder: str) -> None:
    # load_timeline.json recorded requests_deferred and busy slots of a real server every ~0.27 s.
    timeline = json.loads((llamacpp_fixtures / folder / "load_timeline.json").read_text())
    n = timeline["n_parallel"]
    props = reply("props", llamacpp_fixtures / folder / "props.json")
    for point in timeline["timeline"]:
        text = (
            f"llamacpp:requests_processing {point['requests_processing']}\n"
            f"llamacpp:requests_deferred {point['requests_deferred']}\n"
        )
        snap = llamacpp_snapshot(
            EndpointReply("health", 200, "{}", 0.0),
            EndpointReply("metrics", 200, text, 0.0),
            EndpointReply("slots", 501, "", 0.0),
            props,
        )
        assert snap.queue_depth == point["requests_deferred"]
        assert snap.occupancy_ratio == pytest.approx(point["busy_slots"] / n)


def test_a_build_without_the_cached_counter_leaves_it_out(llamacpp_fixtures: Path) -> None:
    base = llamacpp_fixtures / "dense_np4"
    kept = [line for line in (base / "metrics_load.txt").read_text().splitlines()
            if "prompt_tokens_cached" not in line]
    metrics = EndpointReply("metrics", 200, "\n".join(kept) + "\n", 0.001)
    snap = llamacpp_snapshot(**{**replies(base), "metrics": metrics})
    assert snap.prompt_tokens_cached_total is None and snap.prompt_tokens_total is not None
    assert all(s.up for s in snap.sources)
