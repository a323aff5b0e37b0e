"""The counter of string-key reads of the document (``bench/document_reads.py``, issue 30's acceptance): it
counts a read of a document field wherever it is, and leaves out exactly the shapes its rules name as not
the document (an ASGI scope, a Prometheus sample's labels, the dashboards' objective lines, steps.json's
parser), so the figure it prints can be trusted both ways."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _counter() -> Any:
    spec = importlib.util.spec_from_file_location("document_reads", ROOT / "bench" / "document_reads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("document_reads", module)
    spec.loader.exec_module(module)
    return module


PLANTED = '''
def answers(doc, scope, sample, steps):
    lanes = doc["lanes"]                                  # the document, by key
    n = lanes.get("dense", {}).get("recommended_concurrency")  # a lane field
    m = scope["method"], scope.get("path")               # an ASGI scope
    lane = sample.labels.get("lane")                     # a Prometheus sample's labels
    line = objectives().get("jain")                      # an objective line by name
    status = doc.lanes["dense"].status                   # attributes
    return doc.get("status")                             # a key the document has, read anywhere


def parse_steps_document(doc):
    return doc["lanes"], doc.get("steps")                # steps.json, in its parser only
'''


def test_the_counter_counts_document_keys_and_leaves_out_only_the_shapes_it_names() -> None:
    counter = _counter()
    keys = counter.document_keys()
    assert {"lanes", "recommended_concurrency", "status", "steps", "method", "path", "lane", "jain"} <= keys
    found = counter.reads(PLANTED, keys, "satbench/report/data.py")
    assert found == [(3, "lanes"), (4, "recommended_concurrency"), (9, "status")]
    # the same parser anywhere else is counted: the rule is the file and the function together
    elsewhere = counter.reads(PLANTED, keys, "satbench/report/other.py")
    assert (13, "lanes") in elsewhere and (13, "steps") in elsewhere
    # the document's edge reads the schema it is said in, before it validates; a reader elsewhere is counted
    edge = "def read_document(document):\n    return document.get('schema')\n"
    assert counter.reads(edge, keys, "satbench/answer/document.py") == []
    assert counter.reads(edge, keys, "satbench/recommender/store.py") == [(2, "schema")]
