"""One colour per policy name, the same in every plot of every run.

A reader comparing two figures (two runs, a CDF beside a sweep) should recognise a
policy by its colour alone, so the colour is a function of the name only, never of
the policy's position in a list. Colours come from CARTO's colour-blind-safe "Safe"
qualitative palette. The policies the built-in systems ship have fixed entries, chosen
so that the policies of one system never share a colour; any other name is hashed
(sha256) into the palette, which is stable but may give two names one colour.
"""

from __future__ import annotations

import hashlib

PALETTE: tuple[str, ...] = (
    "#88ccee", "#cc6677", "#ddcc77", "#117733", "#332288", "#aa4499",
    "#44aa99", "#999933", "#882255", "#661100", "#6699cc", "#888888",
)
"""CARTO "Safe" (12 colours, distinguishable under the common colour-vision deficiencies)."""

FIXED: dict[str, str] = {
    # shared by every system: the neutral grey
    "random": "#888888",
    # one system's placement policies (10 with random, all distinct)
    "edge-first": "#cc6677", "jsq": "#332288", "jsq-s": "#88ccee",
    "model-only": "#ddcc77", "queue-only": "#999933", "hybrid": "#117733",
    "hybrid-global-rate": "#44aa99", "hybrid-fixed-beta": "#aa4499", "oracle": "#661100",
    # one system's selection and storage policies (8 with random, all distinct)
    "armada": "#117733", "armada-light": "#44aa99", "geo-nearest": "#332288",
    "edge-to-cloud": "#cc6677", "server-reconnect": "#aa4499", "nearest": "#6699cc",
    "eventual": "#ddcc77",
    # one system's search policies (3 with random)
    "priority": "#882255", "load-balance": "#6699cc",
}
"""Fixed colours of the shipped policy names (each a :data:`PALETTE` entry)."""


def policy_colour(name: str) -> str:
    """The hex colour (``#rrggbb``) of policy ``name``: its fixed entry, else a palette
    entry picked by the name's sha256, so it never depends on which other policies a
    plot shows or in what order."""
    fixed = FIXED.get(name)
    if fixed is not None:
        return fixed
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return PALETTE[int.from_bytes(digest[:8], "big") % len(PALETTE)]
