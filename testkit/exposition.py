"""Reading a Prometheus text exposition in tests: every sample by (name, sorted labels), and one value."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "sample_value", "samples"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition ``text``, keyed by its name and its labels sorted."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample_value(found: Samples, name: str, **labels: str) -> float | None:
    """The value of the first sample named ``name`` whose labels include ``labels`` (None when there is none)."""
    want = set(labels.items())
    return next((v for (n, lbl), v in found.items() if n == name and want <= set(lbl)), None)
