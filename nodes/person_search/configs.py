"""The parameters of the person-search programs, importable without aiohttp or numpy.

The scenario loader checks a ``person_search.*`` service's ``params`` against these
dataclasses (:mod:`nodes.config`); the programs' command lines are generated from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.config import option

#: The response model's two readings of concurrent analyses (the model's
#: ``SHARING_MODES``; a unit test keeps the two equal).
SHARING_MODES = ("paper", "processor-sharing")
#: The readings of Eq. 7-8 in the durations (the model's ``ACCOUNTINGS``; the same unit
#: test keeps them equal).
ACCOUNTINGS = ("plain", "compensated")


@dataclass(frozen=True)
class CoordinatorParams:
    """``python -m nodes.person_search.coordinator``: the edge servers it may contact and
    the accounting of a run that names none; everything else comes per run (``POST
    /runs``)."""

    server: tuple[str, ...] = option(repeat=True, metavar="URL",
                                     help="an edge server's base URL, http://host:port "
                                          "(repeatable; a run may use only these)")
    accounting: str = option("plain", choices=ACCOUNTINGS,
                             help="Eq. 7-8 in the durations of a run whose body names no "
                                  "accounting: plain (left out) or compensated (Tc l_i)")


@dataclass(frozen=True)
class EdgeServerParams:
    """``python -m nodes.person_search.edge_server``: one edge data server."""

    server_index: int = option(required=True, lo=0, help="this server's index S (its items "
                                                         "are S*slots .. S*slots+slots-1)")
    tc: float = option(10.0, gt=0, help="model seconds of one analysis on an idle server")
    time_scale: float = option(500.0, lo=1, help="model seconds per wall second "
                                                 "(500: Tc = 10 is 20 ms)")
    sharing: str = option("paper", choices=SHARING_MODES,
                          help="paper: Tc * factor * (k + 1) fixed at admission; "
                               "processor-sharing: running analyses share the server")
