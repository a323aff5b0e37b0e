"""The recommender's exceptions: a small tree, turned into HTTP errors only at the route edge.

``SourceUnavailable`` (Prometheus or the records cannot be read right now: serve the last good answer) is
kept apart from ``BadInput`` (the caller sent something wrong: a 4xx) and ``UnknownRun``/``UnknownLane``
(404). Not enough data is never an exception: it is a lane status. A runs folder that cannot take a posted run
(``RunsFolderFull``: 507, ``RunsFolderUnwritable``: 503) leaves the service as it was: nothing registered.
"""

from __future__ import annotations

__all__ = [
    "BadInput",
    "NothingToServe",
    "PrometheusQueryError",
    "PrometheusUnavailable",
    "RecommenderError",
    "RecordsUnavailable",
    "RunsFolderFull",
    "RunsFolderUnwritable",
    "SourceUnavailable",
    "TooLarge",
    "UnknownLane",
    "UnknownRun",
]


class RecommenderError(Exception):
    """Base of every error the recommender raises on purpose."""


class SourceUnavailable(RecommenderError):
    """A data source cannot be read now; the last good answer stays valid."""


class PrometheusUnavailable(SourceUnavailable):
    """Prometheus did not answer (connection refused, timeout, 5xx)."""


class RecordsUnavailable(SourceUnavailable):
    """The run folder has no readable records.jsonl."""


class PrometheusQueryError(RecommenderError):
    """Prometheus refused a query (4xx): a bug in a builder or a hostile input that escaping must stop."""


class BadInput(RecommenderError):
    """The caller sent something the recommender cannot use."""


class TooLarge(BadInput):
    """A write asks for more than the service reads or analyses (steps, lanes, window lengths): a 413."""


class UnknownRun(RecommenderError):
    """No run with that id is registered."""


class UnknownLane(RecommenderError):
    """The current document has no such lane."""


class NothingToServe(RecommenderError):
    """No document has been computed yet (no run registered, or every source failed so far)."""


class RunsFolderUnwritable(RecommenderError):
    """The runs folder refused a posted run's manifest (read-only, permission denied): nothing was registered."""


class RunsFolderFull(RunsFolderUnwritable):
    """The runs folder is out of space or quota (ENOSPC, EDQUOT): nothing was registered."""
