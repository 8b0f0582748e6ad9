"""One colour per policy name, the same in every plot of every run.

A reader comparing two figures (two runs, a CDF beside a sweep) should recognise a
policy by its colour alone, so the colour is a function of the name only, never of
the policy's position in a list. Colours come from CARTO's colour-blind-safe "Safe"
qualitative palette. Each system fixes its policies' colours in its registration
(``System.colours``, distinct within the system); ``random``, which every system may
list, is the neutral grey; any other name is hashed (sha256) into the palette, which is
stable but may give two names one colour.
"""

from __future__ import annotations

import hashlib

PALETTE: tuple[str, ...] = (
    "#88ccee", "#cc6677", "#ddcc77", "#117733", "#332288", "#aa4499",
    "#44aa99", "#999933", "#882255", "#661100", "#6699cc", "#888888",
)
"""CARTO "Safe" (12 colours, distinguishable under the common colour-vision deficiencies)."""

#: The colour of the policy every system may list.
SHARED: dict[str, str] = {"random": "#888888"}


def policy_colour(name: str) -> str:
    """The hex colour (``#rrggbb``) of policy ``name``: its fixed entry (shared, or its
    system's), else a palette entry picked by the name's sha256, so it never depends on
    which other policies a plot shows or in what order."""
    from testbed.registry import policy_colours

    fixed = SHARED.get(name) or policy_colours().get(name)
    if fixed is not None:
        return fixed
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return PALETTE[int.from_bytes(digest[:8], "big") % len(PALETTE)]
