"""The ``person-search`` scenario builder: a coordinator and N edge data servers.

A scenario file names it with parameters::

    build: {builder: person-search, params: {servers: 10, targets: 100, time_scale: 200}}

and gets the deployment of the paper's person search: a ``cloud`` node running the
search coordinator (``person_search.coordinator``) behind a WAN switch, and ``N`` edge
nodes (``e001`` ...), each running an edge data server (``person_search.edge_server``,
``server_index`` 0 .. N-1) behind its own link to the switch, its one-way delay drawn
uniformly from ``edge_delay_ms`` with ``seed``. The workload is the ``person-search``
generator over the same ``N`` servers (one search per target, all at time 0), placed
as ``layout`` says (``line``, or ``grid``: ``sqrt(N) x sqrt(N)``, N a perfect square;
the network stays a star either way) with targets that stop at the region's ends or
turn back there (``boundary``: ``clip`` or ``reflect``), seeded by the scenario's seed:
``seed`` unless the file or ``--seed`` gives another, which then draws another world
and other policy streams over the same links. The servers' ``Tc`` and the workload's
``tc_s`` are the same number, the servers take the scenario's ``time_scale`` (their
registered context), and ``accounting`` (Eq. 7-8 in the durations: ``plain`` or
``compensated``) is the coordinator's, so the simulator and the emulation run the same
model.

Pure: a function of its parameters (no I/O, numpy only for the seeded delays). A bad
parameter raises ``ValueError("params.<field>: expected ..., found ...")``, which the
scenario loader reports at ``build.params.<field>`` of the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from nodes.person_search.model import ACCOUNTINGS, SHARING_MODES
from nodes.person_search.policies import SEARCH_POLICIES
from testbed.checks import is_int, is_number
from workloads.person_search import BOUNDARIES, LAYOUTS, MAX_SLOTS, MAX_TARGETS, MOVEMENTS

COORDINATOR_PORT = 9000
EDGE_PORT = 9100
MAX_SERVERS = 999  # host names e001 .. e999
MAX_DELAY_MS = 60_000.0
#: ``spawn_key`` of the link delays' stream (the world uses 0 and 1 of the same seed)
_DELAY_STREAM = 7

#: The builder's parameters and their defaults.
DEFAULTS: dict[str, Any] = {
    "servers": 10,
    "targets": 100,
    "movement": "normal",
    "layout": "line",
    "boundary": "clip",
    "slots": 5,
    "tc": 10.0,
    "time_scale": 200.0,
    "sharing": "paper",
    "accounting": "plain",
    "seed": 0,
    "cloud_delay_ms": 10.0,
    "edge_delay_ms": [1.0, 5.0],
}


def edge_name(server: int) -> str:
    """Host name of edge server ``server`` (0-based): ``e001`` for server 0."""
    return f"e{server + 1:03d}"


def _integer(value: Any, field: str, low: int, high: int) -> int:
    if not is_int(value) or not low <= value <= high:
        raise ValueError(f"params.{field}: expected an integer in [{low}, {high}], "
                         f"found {value!r}")
    return int(value)


def _number(value: Any, field: str, low: float, *, open_low: bool = False,
            high: float = math.inf) -> float:
    ok = is_number(value, finite=True) and (value > low if open_low else value >= low) \
        and value <= high
    if not ok:
        bound = f"> {low:g}" if open_low else f">= {low:g}"
        limit = "" if math.isinf(high) else f" and <= {high:g}"
        raise ValueError(f"params.{field}: expected a finite number {bound}{limit}, "
                         f"found {value!r}")
    return float(value)


def _choice(value: Any, field: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"params.{field}: expected one of {', '.join(allowed)}, "
                         f"found {value!r}")
    return str(value)


def _delay_range(value: Any, field: str) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"params.{field}: expected [low, high] in ms, found {value!r}")
    low = _number(value[0], f"{field}[0]", 0.0, high=MAX_DELAY_MS)
    high = _number(value[1], f"{field}[1]", low, high=MAX_DELAY_MS)
    return low, high


_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "servers": lambda v, f: _integer(v, f, 1, MAX_SERVERS),
    "targets": lambda v, f: _integer(v, f, 1, MAX_TARGETS),
    "movement": lambda v, f: _choice(v, f, MOVEMENTS),
    "layout": lambda v, f: _choice(v, f, LAYOUTS),
    "boundary": lambda v, f: _choice(v, f, BOUNDARIES),
    "slots": lambda v, f: _integer(v, f, 1, MAX_SLOTS),
    "tc": lambda v, f: _number(v, f, 0.0, open_low=True),
    "time_scale": lambda v, f: _number(v, f, 1.0),
    "sharing": lambda v, f: _choice(v, f, SHARING_MODES),
    "accounting": lambda v, f: _choice(v, f, ACCOUNTINGS),
    "seed": lambda v, f: _integer(v, f, 0, 2**63 - 1),
    "cloud_delay_ms": lambda v, f: _number(v, f, 0.0, high=MAX_DELAY_MS),
    "edge_delay_ms": _delay_range,
}


def line_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` checked and completed with :data:`DEFAULTS` (a ``ValueError`` if bad)."""
    if not isinstance(params, Mapping):
        # The builder contract reports every bad parameter as ValueError.
        raise ValueError(f"params: expected a mapping, found {params!r}")  # noqa: TRY004
    unknown = sorted(set(params) - set(_CHECKS), key=str)
    if unknown:
        raise ValueError(f"params.{unknown[0]}: expected one of the builder's parameters "
                         f"({', '.join(_CHECKS)}), found an unknown one")
    checked = {k: check(params.get(k, DEFAULTS[k]), k) for k, check in _CHECKS.items()}
    if checked["layout"] == "grid" and math.isqrt(checked["servers"]) ** 2 != checked["servers"]:
        raise ValueError(f"params.servers: expected a perfect square for the grid layout, "
                         f"found {checked['servers']!r}")
    return checked


def person_search_line(params: Mapping[str, Any]) -> dict[str, Any]:
    """The partial scenario document of ``N`` edge servers and a coordinator (see module)."""
    p = line_params(params)
    n, seed = p["servers"], p["seed"]
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_DELAY_STREAM,)))
    nodes: list[dict[str, Any]] = [{"name": "cloud", "role": "client", "tier": "cloud"},
                                   {"name": "wan", "role": "switch"}]
    links: list[dict[str, Any]] = [{"a": "cloud", "b": "wan", "delay_ms": p["cloud_delay_ms"],
                                    "bw_mbit": 1000}]
    services: list[dict[str, Any]] = [
        {"name": "coordinator", "program": "person_search.coordinator", "node": "cloud",
         "port": COORDINATOR_PORT, "params": {"server": [
             f"http://{{ip:{edge_name(s)}}}:{EDGE_PORT}" for s in range(n)],
             "accounting": p["accounting"]}}]
    for s in range(n):
        name = edge_name(s)
        nodes.append({"name": name, "role": "server", "tier": "edge"})
        links.append({"a": name, "b": "wan",
                      "delay_ms": round(float(rng.uniform(*p["edge_delay_ms"])), 2),
                      "bw_mbit": 100})
        services.append({"name": f"data-{name}", "program": "person_search.edge_server",
                         "node": name, "port": EDGE_PORT,
                         "params": {"server_index": s, "tc": p["tc"], "sharing": p["sharing"]}})
    where = "on a line" if p["layout"] == "line" else f"on a {math.isqrt(n)} x {math.isqrt(n)} grid"
    return {
        "description": f"person search over {n} edge servers {where}, "
                       f"{p['targets']} searches ({p['movement']} movement)",
        "seed": seed,
        "topology": {"nodes": nodes, "links": links},
        "services": services,
        "workload": {"generator": "person-search",
                     "params": {"servers": n, "movement": p["movement"],
                                "targets": p["targets"], "layout": p["layout"],
                                "boundary": p["boundary"], "slots": p["slots"],
                                "tc_s": p["tc"]}},
        "policies": list(SEARCH_POLICIES),
        "duration": 1.0,
        "time_scale": p["time_scale"],
    }
