"""The fingerprint's free-form parts read typed (``core.lane_evidence``: ``FingerprintModel.model_facts``,
``hardware_facts``, ``digested``, ``workload_facts``): what the readers (capability records, the planner, the
comparison, AIBrix's buckets) take from them, and that a part of the wrong shape reads as not told."""

from __future__ import annotations

from typing import Any

import pytest

from satbench.core.lane_evidence import FingerprintModel

FILES = [{"name": "m-00001-of-00002.gguf", "sha256": "aa"}, "not a file", {"name": "m-00002", "sha256": None},
         {"name": "m-00002-of-00002.gguf", "sha256": "bb"}]


@pytest.mark.parametrize(("model", "sha256s", "path"), [
    ({"path": "/models/m.gguf", "files": FILES}, ["aa", "bb"], "/models/m.gguf"),  # in the fingerprint's order
    ({"path": "/models/m.gguf", "files": None}, [], "/models/m.gguf"),  # a remote exporter reads no file
    ({"files": "not a list"}, [], None),
    (None, [], None),
])
def test_the_model_part_reads_its_files_sha256s_and_its_path(model: Any, sha256s: list[str], path: str | None
                                                             ) -> None:
    facts = FingerprintModel.model_validate({"model": model}).model_facts
    assert facts.sha256s == sha256s
    assert facts.path == path


def test_the_hardware_part_reads_what_it_tells_and_none_for_the_rest() -> None:
    hardware = {"gpu": "NVIDIA H100", "gpu_count": 2, "driver": "550"}
    told = FingerprintModel.model_validate({"hardware": hardware}).hardware_facts
    assert (told.gpu, told.gpu_count) == ("NVIDIA H100", 2)
    untold = FingerprintModel.model_validate({"hardware": None}).hardware_facts
    assert (untold.gpu, untold.gpu_count) == (None, None)


def test_the_digested_parts_read_their_digest_and_values() -> None:
    fp = FingerprintModel.model_validate({"workload": {"digest": "sha256:w", "values": {"users": 4}},
                                          "policy": {"digest": "sha256:p", "values": "not an object"}})
    assert (fp.digested("workload").digest, fp.digested("workload").values) == ("sha256:w", {"users": 4})
    assert (fp.digested("policy").digest, fp.digested("policy").values) == ("sha256:p", {})
    assert FingerprintModel.model_validate({}).digested("workload").digest is None


def test_the_workload_values_read_their_token_lengths() -> None:
    values = {"prompt_tokens": {"kind": "uniform", "low": 100, "high": 300}, "output_tokens": 128}
    facts = FingerprintModel.model_validate({"workload": {"digest": "sha256:w", "values": values}}).workload_facts
    assert facts.prompt_tokens is not None
    assert (facts.prompt_tokens.kind, facts.prompt_tokens.low, facts.prompt_tokens.high) == ("uniform", 100, 300)
    assert facts.output_tokens is None  # not a distribution: not told
    assert FingerprintModel.model_validate({}).workload_facts.prompt_tokens is None
