"""``satbench run --remeasure URL``: walk exactly the lanes whose served answer no longer holds.

A fleet's answers go stale without anyone watching: a node is rebuilt, its model swapped, its ``--parallel``
changed, and the recommender says so per answer (``validity.state``: ``changed``, served as status ``stale``;
``unknown`` where it cannot tell; DESIGN.md "v2: nodes, fingerprints, validity"). A CronJob that re-measures
the whole fleet every night spends hours on answers that still hold; one that re-measures nothing leaves the
stale ones stale. ``--remeasure`` reads the served document (``GET /recommendations`` of the recommender at
URL, or the document URL itself) and keeps, of the lanes the config names, exactly those the document calls
stale or unknown:

- ``validity.state`` ``changed`` (the answer is ``stale``: the node runs something else) or ``unknown`` (a
  runtime down or loading, not all that decides capacity compared, or no fingerprint: never measured,
  or a shard that did not report);
- a lane the document has no answer for (a node added to the fleet since), which it cannot call anything
  but unknown.

An answer whose validity is ``valid`` is kept as it is, even in a document served ``stale`` as a whole
because the recommender's store is unreachable: that staleness is the service's, not the node's. Only
``valid`` is skipped, so an answer the recommender cannot vouch for is measured again rather than trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from satbench.recommender.document import read_document as validated
from satbench.recommender.models import RecommendationsDocument

__all__ = ["document_url", "lanes_to_remeasure", "read_document"]


def document_url(url: str) -> str:
    """The document's URL: ``URL/recommendations`` for a recommender's base URL, the URL itself where it names
    the document already."""
    base = url.rstrip("/")
    return base if base.endswith("/recommendations") else f"{base}/recommendations"


def read_document(url: str, *, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None
                  ) -> dict[str, Any]:
    """The v2 document served at ``url`` (``document_url``); ``ValueError`` in one line naming the flag."""
    where = document_url(url)
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            resp = client.get(where, params={"schema": "v2"})
        body = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        raise ValueError(f"--remeasure {url}: cannot read the served document at {where} "
                         f"({type(exc).__name__}: {exc})") from None
    if body is None:
        raise ValueError(f"--remeasure {url}: {where} answered HTTP {resp.status_code} "
                         f"({resp.text[:200].strip()})")
    try:
        validated(body)
    except ValueError as exc:
        raise ValueError(f"--remeasure {url}: {where}: {exc}") from None  # names the first field that is wrong
    return body


def lanes_to_remeasure(document: Mapping[str, Any] | RecommendationsDocument, keys: Iterable[str]
                       ) -> dict[str, str]:
    """Of lane ``keys``, those to walk again (module docstring), each with why, in the order given; the
    document as JSON is validated here (``recommender.document.read_document``)."""
    lanes = validated(document).lanes
    out: dict[str, str] = {}
    for key in keys:
        answer = lanes.get(key)
        if answer is None:
            out[key] = "no answer in the served document"
            continue
        validity = answer.validity
        state = None if validity is None else validity.state
        if state == "valid":
            continue
        said = (None if validity is None else validity.reason) or answer.reason or "no reason given"
        out[key] = f"stale: {said}" if state == "changed" else f"unknown: {said}"
    return out
