"""Bundled simulator profiles (TOML): ``dense``, ``moe`` and ``starving``; see ``simulator.profile``."""
