"""``satbench fingerprint-key --node N``: the key node N's exporter signs its fingerprint series with.

The fleet key stays with the recommender (``SATBENCH_RECOMMENDER_FINGERPRINT_KEY`` or
``--fingerprint-key-file``); each node's exporter gets only its own key, derived from it
(``core.fingerprint_signature.node_key``), so a node taken over can sign for itself only. The fleet key is
read from ``--fleet-key-file`` or that variable, never a flag's value; the node's key is printed on stdout for
the operator to put in the node's Secret (``--out FILE`` writes it to a file made readable by its owner only).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from satbench.core.lanes import NAME_PATTERN

__all__ = ["FLEET_KEY_ENV", "configure", "main"]

FLEET_KEY_ENV = "SATBENCH_RECOMMENDER_FINGERPRINT_KEY"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", required=True, help="the node's name (its node target label; 'local' for a "
                        "lane that names no node)")
    parser.add_argument("--fleet-key-file", type=Path, default=None, metavar="PATH",
                        help=f"a file holding the fleet key (default: ${FLEET_KEY_ENV})")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write the node's key to FILE (mode 0600) instead of stdout")


def main(args: argparse.Namespace) -> int:
    import re

    from satbench.core.fingerprint_signature import node_key

    def refuse(why: str) -> int:
        print(f"satbench fingerprint-key: {why}", file=sys.stderr)
        return 2

    if not re.fullmatch(NAME_PATTERN, args.node):
        return refuse(f"--node {args.node!r} is not a node name ({NAME_PATTERN})")
    if args.fleet_key_file is not None:
        try:
            fleet = args.fleet_key_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            return refuse(f"--fleet-key-file {args.fleet_key_file}: {getattr(exc, 'strerror', None) or exc}")
    else:
        fleet = os.environ.get(FLEET_KEY_ENV, "").strip()
    if len(fleet) < 16:
        return refuse(f"the fleet key (--fleet-key-file or ${FLEET_KEY_ENV}) must be at least 16 characters")
    key = node_key(fleet.encode(), args.node).decode()
    if args.out is None:
        print(key)
        return 0
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(key + "\n")
    except OSError as exc:
        return refuse(f"--out {args.out}: {exc.strerror or exc}")
    return 0
