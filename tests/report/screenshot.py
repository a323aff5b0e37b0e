"""Headless Chromium screenshots of a report, and a blankness measure for the PNG."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["CHROMIUM", "non_white_fraction", "screenshot"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 2000


def screenshot(html_path: Path, work_dir: Path) -> Path:
    png = work_dir / "report.png"
    profile = work_dir / "chromium-profile"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        f"--window-size={WIDTH},{HEIGHT}",
        html_path.resolve().as_uri(),
    ]
    subprocess.run(cmd, capture_output=True, timeout=90, check=False, stdin=subprocess.DEVNULL)
    return png


def non_white_fraction(png: Path) -> tuple[tuple[int, int], float]:
    with Image.open(png) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=np.int16)
        size = img.size
    non_white = (pixels.min(axis=2) < 235).mean()
    return size, float(non_white)
