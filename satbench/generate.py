"""``python -m satbench.generate``: regenerates the committed artefacts; ``--check`` only reports drift.

Each entry of ``GENERATORS`` returns ``{path relative to the repository root: file text}``. Dashboards come
from ``satbench.dashboards.overview``; the recommendations JSON Schema is meant to be added here by its owner as one
more entry (a function returning ``{"satbench/recommender/schema/...json": text}``). Tests call ``drift()`` and fail
when a committed file differs from what its generator writes today, so generated files are never edited by
hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["GENERATORS", "REPO_ROOT", "artefacts", "dashboard_artefacts", "drift", "keda_example_artefacts", "main",
           "schema_artefacts", "write_all"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def dashboard_artefacts() -> dict[str, str]:
    from satbench.dashboards.overview import DASHBOARDS, dashboard_json

    return {f"grafana/dashboards/{name}": dashboard_json(build()) for name, build in DASHBOARDS.items()}


def schema_artefacts() -> dict[str, str]:
    from satbench.recommender.schema import SCHEMA_PATH, render_schema

    return {SCHEMA_PATH.relative_to(REPO_ROOT).as_posix(): render_schema()}


KEDA_EXAMPLE = "deploy/kubernetes/examples/keda/scaledobjects.yaml"
KEDA_OPTIONS = ("--format", "keda", "--namespace", "satbench", "--scale-target", "dense=StatefulSet/llamacpp",
                "--auth-ref", "satbench-store-reader")


def keda_example_artefacts() -> dict[str, str]:
    """The KEDA example's ScaledObjects: what ``satbench capabilities`` prints for the sample document (JSON is
    YAML), so a change of the sample moves the example with it."""
    import contextlib
    import io

    from satbench.recommender import capabilities_cli
    from satbench.recommender.schema import SAMPLE_PATH

    parser = argparse.ArgumentParser()
    capabilities_cli.configure(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if capabilities_cli.main(parser.parse_args(["--file", str(SAMPLE_PATH), *KEDA_OPTIONS])) != 0:
            raise RuntimeError(f"satbench capabilities --file {SAMPLE_PATH} {' '.join(KEDA_OPTIONS)} failed")
    return {KEDA_EXAMPLE: out.getvalue()}


GENERATORS: list[Callable[[], dict[str, str]]] = [dashboard_artefacts, schema_artefacts, keda_example_artefacts]


def artefacts() -> dict[str, str]:
    out: dict[str, str] = {}
    for generator in GENERATORS:
        out.update(generator())
    return out


def drift(root: Path = REPO_ROOT) -> list[str]:
    """Relative paths whose committed text differs from the generated text (or that are missing)."""
    stale = []
    for rel, text in sorted(artefacts().items()):
        path = root / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
    return stale


def write_all(root: Path = REPO_ROOT) -> list[str]:
    written = []
    for rel, text in sorted(artefacts().items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(rel)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m satbench.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list files that differ; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift()
        for rel in stale:
            print(f"stale: {rel}")
        return 1 if stale else 0
    for rel in write_all():
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
