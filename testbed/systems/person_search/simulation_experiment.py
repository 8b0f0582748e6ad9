"""Person search in the simulator (``person-search``): Fig. 3, Fig. 4, the 2-D grid and the
straight movers, as data.

The study files (``studies/simulation/<size>/``) run the ``search.scenario.yaml`` world
on the simulator, ten worlds per point whose seeds hash only the point's layout,
movement and N, so every accounting, policy, ``w`` and reading of a point searches the
same worlds and their differences are paired:

* ``fig3.yaml``: the four compared policies, and the priority policy with two of the
  paper's gaps closed another way, per accounting, movement and N;
* ``fig4.yaml``: the priority policy (both candidate-set rules) at each ``w``;
* ``grid.yaml`` and ``grid-compensated.yaml``: a side x side grid beside the line of
  the same N;
* ``reflect.yaml`` and ``mu0.yaml``: the straight movers with a choice the paper leaves
  open made the other way.

:func:`metrics` reads the cells back into rows
(:func:`~testbed.systems.person_search.simulation_rows.study_rows`: the replays'
numbers as the simulator wrote them) and the report's tables and set-up
(:mod:`~testbed.systems.person_search.simulation_tables`); :func:`claims` judges the
paper's six claims of its evaluation under each reading (accounting x candidate-set
rule, :mod:`~testbed.systems.person_search.claim_checks`). Report:
``docs/results/person-search/simulation.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nodes.person_search.model import ACCOUNTINGS, CANDIDATE_RULE_TEXT, PriorityParams
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim
from testbed.systems.person_search.claim_checks import judge
from testbed.systems.person_search.simulation_rows import (
    GRID_READINGS,
    POLICY_LABELS,
    study_rows,
)
from testbed.systems.person_search.simulation_tables import (
    SimData,
    reading_name,
    readings,
    setup,
    tables,
)
from workloads.person_search import DEFAULTS

#: The two choices the straight movers are rerun with (``sensitivity`` rows)
SENSITIVITY_TEXT = {
    "reflect": "targets reflected at the ends of the line (boundary reflect) instead of "
               "stopped there (clip)",
    "continuous-mu0": "the first mu_L at the target's continuous T_0 position mu_0 instead "
                      "of its T_0 server",
}
#: The candidate-set rule each priority label ranks with (``studies/search.scenario.yaml``)
RULES = {"priority": "unanalysed", "priority-after-discovery": "after-discovery"}
WORLD_SEED_RULE = ("first 4 bytes of sha256 of [study seed, {layout, movement, servers}, "
                   "replication] as JSON, 31 bits")


def _params(results: Mapping[str, StudyResult], rows: Mapping[str, list[dict[str, Any]]]
            ) -> dict[str, Any]:
    """What the studies ran, in the terms the tables use."""
    first = next(iter(results.values()))
    build = first.study.scenario_doc["build"]["params"]
    return {
        "targets": build["targets"],
        "servers": sorted({r["servers"] for r in rows["fig3"]}),
        "ws": sorted({r["w"] for r in rows["fig4"]}),
        "grid_sides": sorted({r["side"] for r in rows["grid"]}),
        "world_seeds": max((s.study.replications for s in results.values()), default=0),
        "world_seed_rule": WORLD_SEED_RULE,
        "policies": {label: {"options": {"candidates": RULES[label]} if label in RULES
                             else {}} for label in POLICY_LABELS},
        "candidate_rules": dict(CANDIDATE_RULE_TEXT),
        "accountings": list(ACCOUNTINGS),
        "grid_readings": [{"label": label} for label, *_ in GRID_READINGS
                          if any(r["reading"] == label for r in rows["grid"])],
        "sensitivities": [{"label": k, "text": v} for k, v in SENSITIVITY_TEXT.items()
                          if any(r["sensitivity"] == k for r in rows["sensitivity"])],
        "world": {k: v for k, v in DEFAULTS.items() if k not in ("servers", "targets")},
        "priority": dataclasses.asdict(PriorityParams()),
    }


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """The rows of every study, what they ran, the report's tables and set-up."""
    rows = study_rows(results)
    seed = next(iter(results.values())).study.seed
    doc = {"size": size, "seed": seed, "params": _params(results, rows), **rows}
    complete = all(rows[k] for k in ("fig3", "fig4", "grid", "variants", "alone",
                                     "sensitivity"))
    if complete:
        data = SimData(doc)
        doc["setup"] = setup(data)
        doc["tables"] = tables(data)
    return doc


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """The paper's claims P1-P6, each judged under every reading (accounting x
    candidate-set rule); none without the Fig. 3 and Fig. 4 rows."""
    if not found.get("fig3") or not found.get("fig4") or not found.get("alone"):
        return []
    data = SimData(found)
    return judge(data, readings(), lambda acc, label: reading_name(data, acc, label))
