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

The document is read within bounds, whatever answers at URL: at most ``max_bytes`` (``--remeasure-max-bytes``,
default ``MAX_DOCUMENT_BYTES``, 16 MiB: a 60-lane fleet document is well under 1 MiB) and all of it within
``timeout_s`` (``--remeasure-timeout-s``, default 30 s), headers included. httpx's own timeouts are per
operation, so a server trickling a byte every few seconds held the read for as long as it liked, and a
300 MB body was read whole into memory before anything looked at it; the read now goes through
:mod:`exporter.bounded_http` (every socket operation clamped to what is left of the deadline, the body cut
at the cap, a larger ``Content-Length`` refused before its first byte). It asks for the body unencoded
(``Accept-Encoding: identity``), so the cap counts what is parsed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from satbench.answer.document import read_document as validated
from satbench.answer.models import RecommendationsDocument
from satbench.exporter.bounded_http import TooLarge, bounded_transport, deadline, read_bounded

__all__ = ["MAX_DOCUMENT_BYTES", "READ_TIMEOUT_S", "check_read_bounds", "document_url", "lanes_to_remeasure",
           "read_document"]

MAX_DOCUMENT_BYTES = 16 << 20
READ_TIMEOUT_S = 30.0


def document_url(url: str) -> str:
    """The document's URL: ``URL/recommendations`` for a recommender's base URL, the URL itself where it names
    the document already."""
    base = url.rstrip("/")
    return base if base.endswith("/recommendations") else f"{base}/recommendations"


def check_read_bounds(max_bytes: int, timeout_s: float) -> None:
    """``ValueError`` in one line naming the flag, for a bound the read cannot keep."""
    if not 1024 <= max_bytes <= 1 << 30:
        raise ValueError(f"--remeasure-max-bytes must be within 1024..1073741824, got {max_bytes}")
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= 3600):
        raise ValueError(f"--remeasure-timeout-s must be within 0..3600 s, got {timeout_s}")


def read_document(url: str, *, timeout_s: float = READ_TIMEOUT_S, max_bytes: int = MAX_DOCUMENT_BYTES,
                  transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    """The v2 document served at ``url`` (``document_url``), read whole within ``timeout_s`` and at most
    ``max_bytes``; ``ValueError`` in one line naming the flag."""
    check_read_bounds(max_bytes, timeout_s)
    where = document_url(url)
    ends = time.monotonic() + timeout_s
    status, raw = 0, b""
    try:
        with deadline(ends), httpx.Client(timeout=timeout_s, transport=transport or bounded_transport()) as client, \
                client.stream("GET", where, params={"schema": "v2"},
                              headers={"Accept-Encoding": "identity"}) as resp:
            status = resp.status_code
            raw = read_bounded(resp, max_bytes)
    except TooLarge as exc:
        raise ValueError(f"--remeasure {url}: {where} sent {exc} (--remeasure-max-bytes {max_bytes})") from None
    except httpx.TimeoutException:
        raise ValueError(f"--remeasure {url}: {where} did not send the whole document within {timeout_s:g} s "
                         f"(--remeasure-timeout-s)") from None
    except httpx.HTTPError as exc:
        raise ValueError(f"--remeasure {url}: cannot read the served document at {where} "
                         f"({type(exc).__name__}: {exc})") from None
    if status != 200:
        said = " ".join(raw[:200].decode("utf-8", "replace").split())
        raise ValueError(f"--remeasure {url}: {where} answered HTTP {status} ({said})")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"--remeasure {url}: {where} is not JSON ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None
    try:
        validated(body)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"--remeasure {url}: {where}: {exc}") from None  # names the first field that is wrong
    return body


def lanes_to_remeasure(document: Mapping[str, Any] | RecommendationsDocument, keys: Iterable[str]
                       ) -> dict[str, str]:
    """Of lane ``keys``, those to walk again (module docstring), each with why, in the order given; the
    document as JSON is validated here (``answer.document.read_document``)."""
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
