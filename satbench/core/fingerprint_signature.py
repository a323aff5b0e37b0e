"""Fingerprint series the store cannot forge: each exporter signs its ``runtime_fingerprint_info`` labels.

Why a signature, and not a store the recommender trusts: every site's Prometheus or agent holds the store's
write credentials, and the validity of every answer is decided by what the store holds. One forged import of
an old fingerprint turned a correctly stale answer back to ``valid`` (so ``--remeasure`` skipped it). The
exporter is the only party that reads the node; so it signs what it publishes, and the recommender, holding
the key, takes only series that verify. Cross-checking each answer against its exporter's live
``/fingerprint`` was the other choice: it needs the recommender to reach every exporter of the fleet (a hole
in each site's network policy) and says nothing of the past, where a posted run's fingerprint is read from
the store at its first window's start. A signature travels with the series, through any store, for any time.

The message: the series' own labels (``SIGNED_LABELS``: the fingerprint's ``INFO_LABELS``, ``model_path`` on a
router, and ``fingerprint_since``), sorted, empty values left out (Prometheus drops an empty label, so a
series read back has none), as compact JSON; the MAC is HMAC-SHA256 in hex, published as the label
``fingerprint_mac``. Target labels (``lane``, ``node``, ``job``, ``instance``, a site's external labels) are
not the exporter's to sign; they are ignored, except ``node``, which chooses the key.

Keys: one fleet key, held only by the recommender; each node's exporter holds ``node_key(fleet_key, node)``
(HMAC of the node name under the fleet key), so an exporter or site taken over can sign for its own node
only, not for another (a series labelled ``node="b"`` verifies only under ``b``'s key). A lane that names no
node is node ``local``.

Replays: a genuine old series, read back and imported again with a fresh timestamp, still verifies. So the
exporter signs ``fingerprint_since`` too, the time (Unix seconds) it first published that exact fingerprint,
and among the series of a lane that verify the newest ``since`` decides: an exporter that publishes the
node's current fingerprint outranks any replay of an older one. What no signature can tell is a replay while
the exporter publishes nothing (down, not scraped): then the replayed fingerprint is what the node last said.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

from satbench.core.fingerprint_labels import INFO_LABELS

__all__ = ["MAC_LABEL", "SIGNED_LABELS", "SINCE_LABEL", "node_key", "sign", "signed_since", "verify"]

MAC_LABEL = "fingerprint_mac"
SINCE_LABEL = "fingerprint_since"
SIGNED_LABELS = frozenset((*INFO_LABELS, "model_path", SINCE_LABEL))
_NODE_CONTEXT = b"satbench.fingerprint/node:"


def node_key(fleet_key: bytes, node: str) -> bytes:
    """The key node ``node``'s exporter signs with (hex text, as it is written to the exporter's key file)."""
    return hmac.new(fleet_key, _NODE_CONTEXT + node.encode(), hashlib.sha256).hexdigest().encode()


def _message(labels: Mapping[str, str]) -> bytes:
    kept = sorted((name, value) for name, value in labels.items() if name in SIGNED_LABELS and value)
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode()


def sign(labels: Mapping[str, str], key: bytes) -> str:
    """The MAC of a series' own labels (``fingerprint_since`` among them), as ``fingerprint_mac`` carries it."""
    return hmac.new(key, _message(labels), hashlib.sha256).hexdigest()


def verify(labels: Mapping[str, str], key: bytes) -> bool:
    """Whether the series' ``fingerprint_mac`` is the MAC of its own labels under ``key``."""
    mac = labels.get(MAC_LABEL, "")
    return bool(mac) and hmac.compare_digest(mac, sign(labels, key))


def signed_since(labels: Mapping[str, str]) -> float:
    """The series' ``fingerprint_since`` (Unix seconds); -inf where it has none or it is not a number."""
    try:
        return float(labels.get(SINCE_LABEL, ""))
    except ValueError:
        return float("-inf")
