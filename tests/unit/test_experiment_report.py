"""The one claim type and the one report layer, on hand-made claims, metrics and studies."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from testbed.reports import document
from testbed.reports.claim import Claim, Condition, Table
from testbed.reports.claims_index import read_claims
from testbed.reports.experiment_report import (
    ReportInput,
    StudyPart,
    metric_tables,
    write_report,
)


def _claim(*passed: tuple[str, bool, str]) -> Claim:
    return Claim("1", "hybrid wins", "rule", tuple(Condition(w, p, e) for w, p, e in passed))


def test_the_verdict_follows_the_conditions() -> None:
    assert _claim().verdict == "not run"
    assert _claim(("load 0.2", True, "sim"), ("load 0.8", True, "sim")).verdict == "holds"
    assert _claim(("load 0.2", False, "sim")).verdict == "fails"
    mixed = _claim(("load 0.2", True, "simulation"), ("load 0.8", False, "simulation"),
                   ("load 0.9", True, "emulation"), ("load 0.2", True, "emulation"))
    assert mixed.verdict == "holds only for simulation: load 0.2; emulation: load 0.9, load 0.2"
    plain = _claim(("w 0.3", True, ""), ("w 1", False, ""))
    assert plain.verdict == "holds only for w 0.3"


def test_a_table_row_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match=r"table 'x': row 1 has 1 cells, expected 2 \(a, b\)"):
        Table("x", ("a", "b"), (("1", "2"), ("3",)))


def test_metric_tables_must_have_their_fields() -> None:
    assert metric_tables({"tables": [{"title": "t", "columns": ["a"], "rows": [[1]]}]})[0] \
        == Table("t", ("a",), (("1",),))
    with pytest.raises(ValueError, match=r"metrics: tables\[0\]: expected"):
        metric_tables({"tables": [{"title": "t"}]})


def test_markdown_and_html_render_the_same_blocks() -> None:
    blocks = [document.Heading("T", 1), document.Paragraph("a `x` and **b** <c>"),
              Table("cap", ("p|q", "r"), (("1", "2"),), note="n"),
              document.Paragraph("careful", note=True)]
    md = document.markdown(blocks)
    assert md.startswith("# T\n\na `x` and **b** <c>\n\n**cap**\n\n| p\\|q | r |")
    assert "> careful" in md
    page = document.page(blocks)
    assert "<title>T</title>" in page and "<code>x</code>" in page
    assert "<strong>b</strong> &lt;c&gt;" in page and '<p class="note">careful</p>' in page


def _study() -> StudyPart:
    summary = pd.DataFrame([
        {"workload.params.rate": 1.5, "executor": "sim", "policy": p, "replications": 3,
         "mean_ms": m, "mean_ci_low_ms": m - 1, "mean_ci_high_ms": m + 1, "p95_ms": 2 * m,
         "p95_ci_low_ms": float("nan"), "p95_ci_high_ms": float("nan"),
         "diff_vs_baseline_ms": d, "diff_ci_low_ms": d - 1, "diff_ci_high_ms": d + 1,
         "failed_tasks": 0, "degraded_cells": 0, "method": "t across 3 replications",
         "estimand": "mean of a run as configured"}
        for p, m, d in (("a", 10.0, 0.0), ("b", 12.0, 2.0))])
    about = {"grid": ["workload.params.rate"], "baseline": "a", "replications": 3, "seed": 1,
             "executors": ["sim", "emulation"], "scenario": "/x/continuum.yaml",
             "points": [{"workload.params.rate": 1.5}], "description": "d"}
    records = [{"status": "ok", "executor": "sim", "label": "r=1.5", "replication": 0},
               {"status": "ok", "executor": "emulation", "degraded": True, "label": "r=1.5",
                "replication": 0, "reasons": ["host CPU saturated"]}]
    return StudyPart("load", about, summary, records)


def test_the_report_shows_claims_measurements_studies_and_fidelity(tmp_path: Path) -> None:
    claim = Claim("1", "b is slower", "b minus a above zero",
                  (Condition("rate 1.5", True, "simulation"),), why="by 2 ms",
                  replications=3, effect="+2.0 [+1.0, +3.0] ms")
    report = ReportInput("Paper: exp", "What it does.", "Paper", "testbed experiment exp",
                         "small", ("sim", "emulation"), [_study()],
                         {"tables": [{"title": "extra", "columns": ["k"], "rows": [["v"]]}]},
                         [claim])
    md_path, html_path, claims_path = write_report(report, tmp_path / "exp.md")
    text = md_path.read_text()
    assert "| 1. b is slower | holds | 3 |" in text
    assert "**Verdict: holds** (3 independent replication(s) behind each condition)." in text
    assert "Effect: +2.0 [+1.0, +3.0] ms" in text and "### extra" in text
    assert "| 1.5 | simulation | b | 3 | 12.0 [11.0, 13.0] | 24.0 | +2.0 [+1.0, +3.0] |" in text
    assert "| load | r=1.5 | 0 | emulation | cell | host CPU saturated |" in text
    assert html_path.read_text().count("<table>") == 4
    doc = read_claims(claims_path)
    assert doc["claims"][0] == {"key": "1", "claim": "b is slower", "verdict": "holds",
                                "section": "Claim 1: b is slower", "replications": 3,
                                "effect": "+2.0 [+1.0, +3.0] ms"}
    assert json.loads(claims_path.read_text())["paper"] == "Paper"
    write_report(report, tmp_path / "exp.md")
    assert md_path.read_text() == text  # deterministic
