"""Headless Chromium on a report: a screenshot of its first screen, a blankness measure for the PNG, and
where the answer blocks lie on the first screen.

``first_screen_layout`` does not touch the report: it writes a test-only wrapper page next to it that
loads the report in an iframe the size of the first screen (``WIDTH`` x ``HEIGHT``), and a script in the
wrapper (never in the report, which has none) writes each answer block's ``getBoundingClientRect()`` and
text into the wrapper's DOM; Chromium's ``--dump-dom`` prints that DOM and the rectangles are read back from
it. ``--allow-file-access-from-files`` lets the wrapper read the report's DOM from a ``file://`` URL.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["CHROMIUM", "HEIGHT", "WIDTH", "first_screen_layout", "non_white_fraction", "screenshot"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 800  # the first screen of a laptop browser

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

# The wrapper's script: per answer block (``[data-answer]``), its rectangle, its headline's and its binding
# constraint row's, with their texts, as JSON in <pre id="layout">.
_WRAPPER = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe id="report" src="{src}" style="width:{w}px;height:{h}px;border:0;display:block"></iframe>
<pre id="layout"></pre>
<script>
function box(e) {{
  if (!e) return null;
  var r = e.getBoundingClientRect();
  return {{top: r.top, bottom: r.bottom, left: r.left, right: r.right, text: e.textContent}};
}}
document.getElementById("report").addEventListener("load", function () {{
  var out = {{viewport: null, answers: []}};
  try {{
    var win = this.contentWindow, doc = this.contentDocument;
    out.viewport = {{width: win.innerWidth, height: win.innerHeight}};
    doc.querySelectorAll("[data-answer]").forEach(function (e) {{
      var b = box(e);
      b.lane = e.getAttribute("data-answer");
      b.state = e.getAttribute("data-state");
      b.headline = box(e.querySelector("h2"));
      b.binding = box(e.querySelector("[data-binding]"));
      out.answers.push(b);
    }});
  }} catch (err) {{
    out.error = String(err);
  }}
  document.getElementById("layout").textContent = JSON.stringify(out);
}});
</script></body></html>
"""


def _run(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM, *_FLAGS, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)


def screenshot(html_path: Path, work_dir: Path) -> Path:
    """A PNG of the report's first screen (``WIDTH`` x ``HEIGHT``)."""
    png = work_dir / "report.png"
    _run([f"--user-data-dir={work_dir / 'chromium-profile'}", f"--screenshot={png}",
          f"--window-size={WIDTH},{HEIGHT}", html_path.resolve().as_uri()])
    return png


def first_screen_layout(html_path: Path, work_dir: Path) -> dict[str, Any]:
    """Where the report's answer blocks lie when it opens in a ``WIDTH`` x ``HEIGHT`` viewport:
    ``{"viewport": {...}, "answers": [{"lane", "state", "top", "bottom", "text", "headline": {...},
    "binding": {...}}, ...]}`` (rectangles in CSS pixels from the top of the first screen)."""
    wrapper = work_dir / "first-screen-probe.html"
    wrapper.write_text(_WRAPPER.format(src=html.escape(html_path.resolve().as_uri()), w=WIDTH, h=HEIGHT),
                       encoding="utf-8")
    done = _run([f"--user-data-dir={work_dir / 'chromium-probe-profile'}", "--allow-file-access-from-files",
                 "--virtual-time-budget=10000", f"--window-size={WIDTH},{HEIGHT + 200}", "--dump-dom",
                 wrapper.resolve().as_uri()])
    found = re.search(r'<pre id="layout">(.*?)</pre>', done.stdout, re.S)
    if not found or not found.group(1).strip():
        raise AssertionError(f"chromium printed no layout (rc {done.returncode}): {done.stderr[-1500:]}")
    layout: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    if layout.get("error"):
        raise AssertionError(f"the probe could not read the report: {layout['error']}")
    return layout


def non_white_fraction(png: Path) -> tuple[tuple[int, int], float]:
    with Image.open(png) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=np.int16)
        size = img.size
    non_white = (pixels.min(axis=2) < 235).mean()
    return size, float(non_white)
