"""The checklist "adding an experiment" (``docs/design.md``), exercised.

The toy system of ``test_adding_a_system`` is laid out in a temporary folder with its
experiment, which is nothing but data and two functions: two study files per size under
``testbed/systems/toy/studies/<size>/``, a metric function and a claim function in
``experiment.py``, and one ``Experiment(studies=, metrics=, claims=)`` entry in its
registration. ``testbed experiment`` then runs it through the generic engine (study
cells, resume), its metrics and claims, and writes the generic report; no generic module
knows it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed import registry
from testbed.cli import main
from testbed.experiments import files
from tests.unit.test_adding_a_system import toy  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("toy")


def _run(tmp_path: Path, capsys: pytest.CaptureFixture) -> str:
    code = main(["experiment", "toy-compare", "--executors", "sim", "--serial",
                 "--out", str(tmp_path / "out"), "--report", str(tmp_path / "rep")])
    assert code == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_the_added_experiment_is_found_with_its_study_files(toy: Path) -> None:  # noqa: F811
    exp = registry.experiments()["toy-compare"][1]
    assert files.sizes(exp) == ("small", "full")
    assert [p.name for p in files.study_files(exp, "small")] == ["rules.yaml", "servers.yaml"]
    assert files.executors(exp) == ("sim", "emulation")
    listed = files.listed_studies(exp, toy)
    assert listed["small"] == ["testbed/systems/toy/studies/small/rules.yaml",
                               "testbed/systems/toy/studies/small/servers.yaml"]


def test_the_added_experiment_runs_judges_and_reports_then_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = _run(tmp_path, capsys)
    assert "claim E1: holds" in out
    report = tmp_path / "rep" / "toy.md"
    text = report.read_text()
    assert "## Claim E1: first answers faster than round-robin" in text
    assert "### Study `servers`: first against round-robin as servers are added" in text
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert {d["study"] for d in metrics["differences"]} == {"rules", "servers"}
    assert all(d["diff_ms"] > 0 for d in metrics["differences"])
    assert {d["study"]: d["replications"] for d in metrics["differences"]} == {
        "rules": 3, "servers": 2}
    page = (tmp_path / "rep" / "toy.html").read_text()
    assert "<h2>Claim E1: first answers faster than round-robin</h2>" in page
    again = _run(tmp_path, capsys)  # the same folders: every cell finished before
    assert again.count("finished before, 0 to run") == 2
    assert report.read_text() == text  # the same cells give the same bytes


def test_a_size_the_experiment_lacks_names_the_sizes_it_has(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["experiment", "toy-compare", "--size", "medium", "--out",
                 str(tmp_path / "o")]) == 2
    assert "--size: toy-compare has small, full, found 'medium'" in capsys.readouterr().err
