"""Check the exporter's NVML readings against ``nvidia-smi`` on the real card, and keep the result as evidence.

``python -m satbench.exporter.nvml_check --out runs/<run_id>`` (a few seconds; wherever a GPU is present) reads
each GPU's memory, power and energy counter the way the exporter does (``exporter.gpu.NvmlGpuReader``) and the
same figures from ``nvidia-smi``, an independent reader of the same driver:

* memory: NVML's used and total bytes against ``memory.used`` and ``memory.total`` (MiB): within 2 MiB plus what
  the device allocated between the two reads (both read twice, the tolerance widened by the change seen);
* power: the mean of NVML's readings against the mean of ``power.draw`` sampled over the same seconds: within
  5 % or 5 W;
* energy: the energy counter's increase over the sampling interval against ``power.draw`` integrated over it
  (the trapezoid rule on samples every ``--sample-s``): within 5 % or 5 J. ``nvidia-smi`` has no energy query
  field, so the integral of its power is the independent figure; a device without the counter says so.

The result goes to ``<out>/nvml_check.json``: per GPU each comparison with both figures, its tolerance and
``ok`` (null where a side does not report the figure: not compared, neither a pass nor a failure), the driver
and the commands run. Exit status 0: every comparison held; 1: one did not; 2: no GPU or no
``nvidia-smi`` (said in the file, never a pass). An idle card is a valid check of the readings; a card under
load checks the power path over a wider range, so run it while a session walks where you can.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from satbench.exporter.gpu import GpuDevice, GpuUnavailable, NvmlGpuReader

__all__ = ["Comparison", "check", "main"]

MIB = 1024 * 1024
SMI_FIELDS = "index,name,memory.used,memory.total,power.draw"


@dataclass(frozen=True)
class Comparison:
    gpu: str
    figure: str
    nvml: float | None
    nvidia_smi: float | None
    tolerance: float
    ok: bool | None  # None: a side does not report the figure (said in the note), neither a pass nor a failure
    note: str = ""


def _smi(binary: str) -> dict[str, dict[str, float]]:
    """One ``nvidia-smi`` query: per GPU index, memory in bytes and power in watts (NaN where not available)."""
    out = subprocess.run([binary, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    rows: dict[str, dict[str, float]] = {}
    for line in out.strip().splitlines():
        cells = [cell.strip() for cell in line.split(",")]  # the name may hold commas: the numbers are last
        index, (used, total, power) = cells[0], cells[-3:]
        rows[index] = {"used": _num(used) * MIB, "total": _num(total) * MIB, "power": _num(power)}
    return rows


def _num(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return float("nan")


def _within(a: float | None, b: float | None, rel: float, absolute: float) -> tuple[bool | None, float]:
    if a is None or b is None or a != a or b != b:
        return None, absolute
    tolerance = max(absolute, rel * abs(b))
    return abs(a - b) <= tolerance, tolerance


def _sample(reader: NvmlGpuReader, binary: str, seconds: float, every_s: float, clock: Callable[[], float]
            ) -> tuple[list[tuple[float, Sequence[GpuDevice]]], list[tuple[float, dict[str, dict[str, float]]]]]:
    nvml: list[tuple[float, Sequence[GpuDevice]]] = []
    smi: list[tuple[float, dict[str, dict[str, float]]]] = []
    start = clock()
    while True:
        now = clock()
        nvml.append((now, reader.read(None)))
        smi.append((clock(), _smi(binary)))
        if now - start >= seconds:
            return nvml, smi
        time.sleep(every_s)


def _trapezoid(points: Sequence[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))


def _compare_gpu(gpu: str, nvml: list[tuple[float, Sequence[GpuDevice]]],
                 smi: list[tuple[float, dict[str, dict[str, float]]]]) -> list[Comparison]:
    mine = [(t, next(d for d in devices if d.gpu == gpu)) for t, devices in nvml]
    theirs = [(t, rows[gpu]) for t, rows in smi]
    out: list[Comparison] = []
    drift = abs(mine[-1][1].used_bytes - mine[0][1].used_bytes)  # memory allocated while we read
    for figure, a, b in (("memory_used_bytes", mine[-1][1].used_bytes, theirs[-1][1]["used"]),
                         ("memory_total_bytes", mine[-1][1].total_bytes, theirs[-1][1]["total"])):
        ok, tol = _within(a, b, 0.0, 2 * MIB + drift)
        out.append(Comparison(gpu, figure, a, b, tol, ok, "" if ok is not None else "not reported by one side"))
    powers = [d.power_w for _, d in mine]
    mean_nvml = None if None in powers else sum(p for p in powers if p is not None) / len(powers)
    smi_powers = [row["power"] for _, row in theirs]
    mean_smi = sum(smi_powers) / len(smi_powers)
    ok, tol = _within(mean_nvml, mean_smi, 0.05, 5.0)
    out.append(Comparison(gpu, "power_watts", mean_nvml, mean_smi, tol, ok,
                          "" if ok is not None else "power not reported by one side ([N/A], not supported)"))
    first, last = mine[0], mine[-1]
    if first[1].energy_j is None or last[1].energy_j is None:
        out.append(Comparison(gpu, "energy_joules", None, None, 0.0, None,
                              "no energy counter on this device: the exporter reads power samples (said as such)"))
    else:
        counted = last[1].energy_j - first[1].energy_j
        inside = [(t, row["power"]) for t, row in theirs if first[0] <= t <= last[0]]
        integral = _trapezoid(inside) * (last[0] - first[0]) / max(inside[-1][0] - inside[0][0], 1e-9) \
            if len(inside) > 1 else None
        ok, tol = _within(counted, integral, 0.05, 5.0)
        out.append(Comparison(gpu, "energy_joules", counted, integral, tol, ok,
                              f"over {last[0] - first[0]:.1f} s: the counter's increase against nvidia-smi's "
                              "power.draw integrated"))
    return out


def check(out_dir: Path, *, seconds: float = 10.0, every_s: float = 0.2, module: Any = None,
          binary: str | None = None, clock: Callable[[], float] = time.monotonic) -> int:
    """Run the check, write ``out_dir/nvml_check.json`` and return the exit status (module docstring)."""
    found = binary or shutil.which("nvidia-smi")
    result: dict[str, Any] = {"checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "seconds": seconds, "sample_s": every_s,
                              "commands": [f"nvidia-smi --query-gpu={SMI_FIELDS} --format=csv,noheader,nounits",
                                           "NVML via satbench.exporter.gpu.NvmlGpuReader"]}
    status = 2
    reader = NvmlGpuReader(module=module, clock=clock)
    try:
        if found is None:
            raise GpuUnavailable("nvidia-smi not found on PATH")
        nvml, smi = _sample(reader, found, seconds, every_s, clock)
        devices = nvml[0][1]
        if not devices:
            raise GpuUnavailable("NVML lists no GPU")
        comparisons = [c for d in devices for c in _compare_gpu(d.gpu, nvml, smi)]
        result.update(driver=devices[0].driver, gpus=[{"gpu": d.gpu, "name": d.name} for d in devices],
                      comparisons=[asdict(c) for c in comparisons],
                      ok=all(c.ok is not False for c in comparisons) and any(c.ok for c in comparisons))
        status = 0 if result["ok"] else 1
    except (GpuUnavailable, subprocess.SubprocessError, OSError, KeyError, StopIteration, ValueError) as exc:
        result.update(ok=None, reason=f"not checked: {exc}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "nvml_check.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m satbench.exporter.nvml_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the run folder the result is written into")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to sample (default 10)")
    parser.add_argument("--sample-s", type=float, default=0.2, help="seconds between samples (default 0.2)")
    args = parser.parse_args(argv)
    if not 1.0 <= args.seconds <= 600.0 or not 0.01 <= args.sample_s <= args.seconds:
        print("nvml_check: --seconds must be within 1..600 and --sample-s within 0.01..--seconds", file=sys.stderr)
        return 2
    status = check(args.out, seconds=args.seconds, every_s=args.sample_s)
    said = json.loads((args.out / "nvml_check.json").read_text(encoding="utf-8"))
    verdicts = {True: "ok", False: "DIFFERS", None: "not compared"}
    for c in said.get("comparisons", []):
        print(f"gpu {c['gpu']} {c['figure']}: NVML {c['nvml']} nvidia-smi {c['nvidia_smi']} "
              f"(tolerance {c['tolerance']:.3g}) {verdicts[c['ok']]} {c['note']}".rstrip())
    print(said.get("reason") or f"written to {args.out / 'nvml_check.json'}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
