"""How long a ShareGPT JSON array takes to read, against the same conversations as JSONL (issue 39).

The published ShareGPT dumps are one JSON array; ``loadgen.datasets.read_dataset`` once found each item's line by
counting the newlines from the file's start (quadratic: 20,000 conversations took over 300 s where the same as
JSONL took 1.3 s). This script writes ``--conversations`` ShareGPT conversations (2 to 8 turns of a few hundred
characters, the dumps' shape, pretty-printed as the dumps are) both as a JSON array and as JSONL, reads each with
``read_dataset`` (every turn checked, the file hashed) and prints the times, the ratio of the array to the JSONL
floor measured in the same run, and the conversations per second. ``--sizes`` repeats it at several sizes to show
how the time grows (linear: the time per conversation stays flat).

    .venv/bin/python bench/dataset_read.py [--conversations 100000] [--sizes 25000,50000,100000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.loadgen.datasets import read_dataset  # noqa: E402

WORDS = ("the", "of", "and", "to", "in", "is", "for", "on", "with", "model", "server", "token", "cache", "slot")


def conversations(n: int, seed: int = 0) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        turns = []
        for t in range(rng.randint(1, 4)):
            for role in ("human", "gpt"):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))
                turns.append({"from": role, "value": f"{i}.{t} {text}"})
        out.append({"id": f"conv{i}", "conversations": turns})
    return out


def write_both(folder: Path, n: int) -> tuple[Path, Path]:
    convs = conversations(n)
    array = folder / f"sharegpt_{n}.json"
    lines = folder / f"sharegpt_{n}.jsonl"
    array.write_text(json.dumps(convs, indent=2), encoding="utf-8")
    lines.write_text("".join(json.dumps(c) + "\n" for c in convs), encoding="utf-8")
    return array, lines


def timed(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    data = read_dataset(path)
    return time.perf_counter() - t0, data.read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--sizes", default=None, help="comma-separated sizes (default: --conversations only)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [args.conversations]
    print(f"{'conversations':>13} {'array MB':>9} {'array s':>8} {'JSONL s':>8} {'ratio':>6} {'us/conv':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            array, lines = write_both(Path(tmp), n)
            floor_s, read_lines = timed(lines)
            array_s, read_array = timed(array)
            assert read_lines == read_array == n, (read_lines, read_array, n)
            print(f"{n:>13,} {array.stat().st_size / 1e6:>9.1f} {array_s:>8.2f} {floor_s:>8.2f} "
                  f"{array_s / floor_s:>6.2f} {array_s / n * 1e6:>8.1f}", flush=True)
            array.unlink()
            lines.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
