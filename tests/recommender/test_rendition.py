"""The served forms of a stale document, filled in from templates, equal the document marked stale whole at
that age (``answer.document.mark_stale``, the definition), in every form and at every age; and a document
that happens to hold the template's marker is rendered whole instead, with the same bytes."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import pytest

from satbench.answer.document import AmbiguousForV1, as_v1, mark_stale, node_index, read_document, wire
from satbench.core.manifest import RunManifest
from satbench.recommender import rendition
from satbench.recommender.capabilities import capability_fragment
from satbench.recommender.rendition import Served, render
from tests.recommender.test_service import FakeAnalyzer, FakeClock, manifest_dict

REASON = "records of run r1 unreadable: No such file or directory"


def document(lanes: tuple[str, ...] = ("dense", "moe")) -> dict[str, Any]:
    manifest = RunManifest.from_dict(manifest_dict("r1", lanes=lanes))
    return asyncio.run(FakeAnalyzer(FakeClock())(manifest, None))


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize("age", [0, 1, 59, 3600, 10**7])
def test_each_stale_form_at_an_age_is_the_document_marked_stale_whole(age: int) -> None:
    doc = document()
    served = Served(render(doc, stale_reason=REASON, good_at=1.0), age)
    whole = mark_stale(read_document(doc), age_s=float(age), reason=REASON)
    assert served.v2() == dumps(wire(whole))
    assert served.v1() == dumps(as_v1(whole))
    assert served.capabilities() == dumps(capability_fragment(whole))
    assert gzip.decompress(served.gzip()) == dumps(wire(whole))
    zipped_off_loop = Served(served.rendition, age)

    async def twice() -> tuple[bytes, bytes]:  # two polls at once share one compression
        return await asyncio.gather(zipped_off_loop.gzip_async(), zipped_off_loop.gzip_async())

    first, second = asyncio.run(twice())
    assert first is second and gzip.decompress(first) == dumps(wire(whole))
    assert served.model().age_s == age and served.model().lanes["dense"].status == "stale"


def test_a_fresh_rendition_serves_its_own_bytes_and_says_why_v1_cannot() -> None:
    doc = document(("dense",))
    lane = doc["lanes"]["dense"]
    doc["lanes"] = {"n1/dense": {**lane, "node": "n1"}, "n2/dense": {**lane, "node": "n2"}}  # one name, two nodes
    doc["nodes"] = {node: info.model_dump() for node, info in node_index(read_document(doc).lanes).items()}
    served = Served(render(doc, stale_reason=None, good_at=1.0), None)
    assert served.v2() == dumps(doc) and served.v2() is served.v2()
    assert gzip.decompress(served.gzip()) == dumps(doc)
    assert not served.v1_ready()
    with pytest.raises(AmbiguousForV1, match="several nodes serve one"):
        served.v1()


def test_a_document_holding_the_marker_is_rendered_whole_with_the_same_bytes() -> None:
    doc = document()
    planted = rendition._MARK_INT.decode()
    doc = {**doc, "notes": [*doc.get("notes", []), f"a figure of {planted} that is no age"]}
    r = render(doc, stale_reason=REASON, good_at=1.0)
    assert r.exact
    served = Served(r, 42)
    whole = wire(mark_stale(read_document(doc), age_s=42.0, reason=REASON))
    assert served.v2() == dumps(whole) and planted in served.v2().decode()
