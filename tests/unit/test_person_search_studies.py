"""The simulator's person-search experiment as study files gives the sweeps' numbers, bit
for bit.

The study files of ``testbed/systems/person_search/studies/simulation/small/`` are shrunk
(20 searches, one N, two values of w, two replications) into a temporary package and run
through the generic engine on the simulator; :func:`~testbed.systems.person_search.
simulation_rows.study_rows` must read back exactly the rows of
``data/person_search_sweeps.json``: what the hand-written sweeps the study files replaced
computed for the same worlds, every float equal, not close. This is what lets the
committed report regenerate from the study files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.experiments.engine import run_studies
from testbed.experiments.results import StudyResult
from testbed.registry import Experiment
from testbed.systems.person_search.simulation_experiment import claims, metrics
from testbed.systems.person_search.simulation_rows import study_rows

STUDIES = Path(__file__).resolve().parents[2] / "testbed/systems/person_search/studies"
TARGETS, SERVERS, SQUARE, WS, REPLICATIONS = 20, [10], 9, (0.001, 0.3), 2


def _shrunk(doc: dict[str, Any]) -> dict[str, Any]:
    doc["replications"] = REPLICATIONS
    doc["set"]["build.params.targets"] = TARGETS
    grid = doc["grid"]
    square = grid.get("build.params.layout") is not None or \
        doc["set"].get("build.params.accounting") == "compensated"
    grid["build.params.servers"] = [SQUARE] if square else SERVERS
    if doc["study"].endswith("fig4"):
        doc["policies"] = [p for p in doc["policies"] if p["params"]["w"] in WS]
    return doc


@pytest.fixture(scope="module")
def studied(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StudyResult]:
    root = tmp_path_factory.mktemp("bridge")
    package = root / "ps_bridge"
    (package / "studies" / "small").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "search.scenario.yaml").write_text(
        (STUDIES / "search.scenario.yaml").read_text())
    for path in sorted((STUDIES / "simulation" / "small").glob("*.yaml")):
        doc = _shrunk(yaml.safe_load(path.read_text()))
        (package / "studies" / "small" / path.name).write_text(yaml.safe_dump(doc))
    sys.path.insert(0, str(root))
    try:
        exp = Experiment("ps-bridge", "bridge", studies="ps_bridge:studies")
        results, incomplete = run_studies(exp, "small", ("sim",), root / "out", serial=True,
                                          progress=lambda _line: None)
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("ps_bridge", None)
    assert not incomplete
    return results


@pytest.fixture(scope="module")
def bridged(studied: dict[str, StudyResult]) -> dict[str, list[dict[str, Any]]]:
    return study_rows(studied)


@pytest.fixture(scope="module")
def swept() -> dict[str, list[dict[str, Any]]]:
    return json.loads((Path(__file__).parent / "data" / "person_search_sweeps.json")
                      .read_text())


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


@pytest.mark.parametrize("table", ["fig3", "fig4", "grid", "variants", "alone",
                                   "sensitivity"])
def test_the_studies_give_the_sweeps_rows_bit_for_bit(
        table: str, bridged: dict[str, list[dict[str, Any]]],
        swept: dict[str, list[dict[str, Any]]]) -> None:
    assert bridged[table], f"the studies gave no {table} rows"
    assert _canonical(bridged[table]) == _canonical(swept[table])


def test_the_metrics_give_every_table_and_the_claims_every_reading(
        studied: dict[str, StudyResult]) -> None:
    found = json.loads(json.dumps(metrics(studied, "small")))  # as metrics.json holds it
    assert found["params"]["servers"] == SERVERS and found["params"]["ws"] == list(WS)
    assert found["params"]["grid_sides"] == [3] and found["params"]["world_seeds"] == 2
    titles = [t["title"] for t in found["tables"]]
    assert titles[0].startswith("Fig. 3: total response time of 20 searches")
    assert "Fig. 4: the paper's numbers beside ours" in titles
    assert titles[-1] == "Straight movement at small N: what the paper leaves open"
    for table in found["tables"]:
        assert all(len(row) == len(table["columns"]) for row in table["rows"]), table["title"]
    assert any("k_i + 1" in p for p in found["setup"])
    judged = claims(found)
    assert [c.key for c in judged] == ["P1", "P2", "P3", "P4", "P5", "P6"]
    for claim in judged:
        assert claim.replications == REPLICATIONS
        assert {c.what for c in claim.conditions} <= {
            "plain, unanalysed", "plain, after-discovery", "compensated, unanalysed",
            "compensated, after-discovery"}
        passed = [c.what for c in claim.conditions if c.passed]
        if 0 < len(passed) < len(claim.conditions):
            assert claim.verdict == "holds only for " + "; ".join(passed)
