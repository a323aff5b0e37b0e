"""What the service serves, built once per change of the document: every form a poll can ask for.

Every node polls ``GET /recommendations`` (or ``/capabilities``) every second or so, so nothing a poll does may
cost in proportion to the document. A 60-lane fleet document is 1.3 MB: serialising it takes 25 ms here, and
marking it stale (a deep copy, ``answer.document.mark_stale``) 50 ms more; done per poll, 200 pollers at
1 req/s asked the event loop for 15 s of CPU each second (p50 10 s, p99 12.3 s). ``render`` builds every form
once per change of the document (v2, gzipped v2, v1 or why v1 cannot say it, the capability fragment, the
validated model); the store calls it in a worker thread and swaps the result in at once, so a poll is a
lookup and a write.

A stale document (its source unreachable, the last good answer served) carries its age, which grows every
second while the document does not change. The age is served in whole seconds: a poller at 1 req/s cannot
read it finer, and it is the age of an answer whose analysis took seconds. So a stale document is rendered
once, as templates whose age fields hold a marker (a random 16-digit number drawn per process), and its bytes
at each new second of age are one ``bytes.replace`` per form (about 1 ms for 1.3 MB), gzipped only when a
poller asks for gzip, in a worker thread: at most one such fill per second, none per poll. The age stays a
field of the document (``age_s``, and each lane's ``age_s`` and reason), where every consumer already reads
it, rather than a header that a consumer of the JSON alone would never see. Should the marker's digits already
occur in the document (they cannot by chance), the stale forms are rendered whole at each second instead
(``Rendition.exact``).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.document import AmbiguousForV1, as_v1, mark_stale, read_document, wire
from satbench.answer.models import RecommendationsDocument
from satbench.recommender.capabilities import capability_fragment

__all__ = ["Rendition", "Served", "render"]

_MARK = float(7_000_000_000_000_000 + secrets.randbelow(10**15))  # below 2**53 and 1e16: exact, no exponent
_MARK_FLOAT = repr(_MARK).encode()  # as JSON writes an ``age_s`` field
_MARK_INT = f"{_MARK:.0f}".encode()  # as ``mark_stale`` writes the age into each lane's reason


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _zip(body: bytes) -> bytes:
    return gzip.compress(body, compresslevel=1, mtime=0)


@dataclass(frozen=True, slots=True)
class Rendition:
    """One document in every served form. ``stale_reason`` set: the forms are templates with the age marked
    (``Served`` fills it in), or, where ``exact``, the document is marked stale whole at each age."""

    document: RecommendationsDocument  # the document as served fresh (stale: before marking)
    stale_reason: str | None
    good_at: float  # when the answer was last computed: a stale document's age counts from here
    model: RecommendationsDocument
    v2: bytes
    v1: bytes | None  # None: ``v1_refused`` says why (``AmbiguousForV1``)
    v1_refused: str | None
    capabilities: bytes
    gzip: bytes | None  # fresh only: the stale forms are zipped per age, when asked
    exact: bool = False

    @property
    def stale(self) -> bool:
        return self.stale_reason is not None


def _forms(model: RecommendationsDocument) -> tuple[RecommendationsDocument, bytes, bytes | None, str | None,
                                                   bytes]:
    try:
        v1: bytes | None = _dumps(as_v1(model))
        refused = None
    except AmbiguousForV1 as exc:
        v1, refused = None, str(exc)
    return model, _dumps(wire(model)), v1, refused, _dumps(capability_fragment(model))


def render(document: RecommendationsDocument | dict[str, Any], *, stale_reason: str | None,
           good_at: float) -> Rendition:
    """Every form of ``document`` (pure, and slow for a large one: the store runs it in a worker thread; JSON
    is read at its edge, ``read_document``); ``stale_reason``: templates of the stale document, the age marked."""
    document = read_document(document)
    if stale_reason is None:
        model, v2, v1, refused, cut = _forms(document)
        return Rendition(document, None, good_at, model, v2, v1, refused, cut, _zip(v2))
    if _MARK_INT in _dumps(wire(document)) or _MARK_INT in stale_reason.encode():
        model, v2, v1, refused, cut = _forms(mark_stale(document, age_s=0.0, reason=stale_reason))
        return Rendition(document, stale_reason, good_at, model, v2, v1, refused, cut, None, exact=True)
    model, v2, v1, refused, cut = _forms(mark_stale(document, age_s=_MARK, reason=stale_reason))
    return Rendition(document, stale_reason, good_at, model, v2, v1, refused, cut, None)


@dataclass(slots=True)
class Served:
    """A rendition's forms at one whole-second age (fresh: the rendition's own bytes), each form filled in
    once, when first asked for."""

    rendition: Rendition
    age_s: int | None
    _forms: dict[str, bytes] = field(default_factory=dict)
    _model: RecommendationsDocument | None = None
    _exact: Rendition | None = None
    _zipping: asyncio.Future[bytes] | None = None

    def _aged(self, name: str, template: bytes) -> bytes:
        if self.age_s is None or self.rendition.exact:  # fresh, or rendered whole at this age already
            return template
        if name not in self._forms:
            self._forms[name] = template.replace(_MARK_FLOAT, repr(float(self.age_s)).encode()).replace(
                _MARK_INT, str(self.age_s).encode())
        return self._forms[name]

    def _whole(self) -> Rendition:
        """The exact fallback: the stale document rendered whole at this age."""
        if self._exact is None:
            r = self.rendition
            model, v2, v1, refused, cut = _forms(mark_stale(r.document, age_s=float(self.age_s or 0),
                                                            reason=r.stale_reason or ""))
            self._exact = Rendition(r.document, r.stale_reason, r.good_at, model, v2, v1, refused, cut, None)
        return self._exact

    def _source(self) -> Rendition:
        return self._whole() if self.rendition.exact and self.age_s is not None else self.rendition

    def v2(self) -> bytes:
        return self._aged("v2", self._source().v2)

    def v1(self) -> bytes:
        """The v1 view; ``AmbiguousForV1`` where several nodes serve one lane name."""
        source = self._source()
        if source.v1 is None:
            raise AmbiguousForV1(source.v1_refused or "schema v1 cannot say this document")
        return self._aged("v1", source.v1)

    def v1_ready(self) -> bool:
        return self._source().v1 is not None

    def capabilities(self) -> bytes:
        return self._aged("capabilities", self._source().capabilities)

    def gzip(self) -> bytes:
        if self.rendition.gzip is not None and self.age_s is None:
            return self.rendition.gzip
        if "gzip" not in self._forms:
            self._forms["gzip"] = _zip(self.v2())
        return self._forms["gzip"]

    def prepare(self) -> None:
        """Fills in the plain and gzipped forms now (``RecommendationStore.prepare_ages`` runs it in a worker
        thread for the next second's age, before any poll asks)."""
        self.v2()
        self.gzip()

    async def gzip_async(self) -> bytes:
        """``gzip()``, a stale age's compressed in a worker thread (zlib lets go of the GIL, 8 ms for 1.3 MB here),
        once, however many polls ask meanwhile: the loop serves the other polls while it runs."""
        if (self.rendition.gzip is not None and self.age_s is None) or "gzip" in self._forms:
            return self.gzip()
        if self._zipping is None:
            self._zipping = asyncio.ensure_future(asyncio.to_thread(_zip, self.v2()))
        body = await asyncio.shield(self._zipping)
        self._forms["gzip"] = body
        return body

    def model(self) -> RecommendationsDocument:
        """The document as served, validated: fresh, the rendition's own; stale, read back from the bytes at
        this age (once per second at most, for ``/metrics``)."""
        if self.age_s is None:
            return self.rendition.model
        if self._model is None:
            self._model = read_document(json.loads(self.v2()))
        return self._model
