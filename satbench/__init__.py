"""satbench: how much concurrency is useful per model lane of a llama.cpp-compatible runtime."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
