"""The one report of every experiment: its claims, its measurements and its studies.

An experiment written as data hands this module what it ran (each study's settings,
table and cell records), its metrics (a JSON mapping; its ``tables`` entry holds the
measurement tables the metric function chose to show, its optional ``setup`` the
paragraphs saying what was run) and its judged claims; the module
writes ``<report>.md``, ``<report>.html`` (the same blocks as a page) and
``<report>.claims.json`` (for ``testbed claims-index``). Nothing here knows an
experiment: the words that are not the experiment's own data are the same for all, and
nothing depends on the clock, so the same cells give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.reports import claims_index, document
from testbed.reports.claim import Claim, Table
from testbed.reports.document import Block, Heading, Paragraph

EXECUTOR_TITLES = {"sim": "simulation", "emulation": "emulation"}


@dataclass(frozen=True)
class StudyPart:
    """What the report shows of one study: its file's name, ``study.json``, its table
    (``summary.parquet``) and its cells' records."""

    name: str
    about: Mapping[str, Any]
    summary: pd.DataFrame
    records: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class ReportInput:
    """Everything the report is written from."""

    title: str
    description: str
    paper: str
    command: str
    size: str
    executors: tuple[str, ...]
    studies: Sequence[StudyPart]
    metrics: Mapping[str, Any]
    claims: Sequence[Claim]


def _with_interval(row: Mapping[str, Any], value: str, low: str, high: str,
                   sign: bool = False) -> str:
    v, lo, hi = row.get(value), row.get(low), row.get(high)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    fmt = "+.1f" if sign else ".1f"
    text = f"{float(v):{fmt}}"
    if lo is None or hi is None or math.isnan(float(lo)) or math.isnan(float(hi)):
        return text
    return f"{text} [{float(lo):{fmt}}, {float(hi):{fmt}}]"


def _grid_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _short(path: str) -> str:
    """A grid path's last two segments (``params.workers``)."""
    return ".".join(path.split(".")[-2:])


def study_table(part: StudyPart) -> Table:
    """Per point, executor and policy: replications, mean and p95 latency (ms) with
    their 95 % intervals, the difference to the baseline, failures and the method."""
    grid = list(part.about.get("grid") or [])
    shown = [p for p in grid if p in part.summary.columns]
    columns = (*(_short(p) for p in shown), "executor", "policy", "replications",
               "mean ms [95 % CI]", "p95 ms [95 % CI]",
               f"- {part.about.get('baseline', 'baseline')} ms [95 % CI]",
               "failed tasks", "degraded cells", "method")
    rows = []
    for _, row in part.summary.iterrows():
        r = row.to_dict()
        rows.append((*(_grid_text(r[p]) for p in shown),
                     EXECUTOR_TITLES.get(str(r["executor"]), str(r["executor"])),
                     str(r["policy"]), str(int(r["replications"])),
                     _with_interval(r, "mean_ms", "mean_ci_low_ms", "mean_ci_high_ms"),
                     _with_interval(r, "p95_ms", "p95_ci_low_ms", "p95_ci_high_ms"),
                     "-" if r["policy"] == part.about.get("baseline") else
                     _with_interval(r, "diff_vs_baseline_ms", "diff_ci_low_ms",
                                    "diff_ci_high_ms", sign=True),
                     str(int(r["failed_tasks"])), str(int(r["degraded_cells"])),
                     str(r["method"])))
    return Table("", columns, tuple(rows),
                 note=f"Estimand: {_estimands(part.summary)}.")


def _estimands(summary: pd.DataFrame) -> str:
    names = sorted({str(e) for e in summary.get("estimand", pd.Series(dtype=str))})
    return "; ".join(names) if names else "-"


def _study_line(part: StudyPart) -> str:
    about = part.about
    grid = about.get("grid") or []
    points = about.get("points") or [{}]
    axes = ", ".join(f"`{p}` in " + ", ".join(sorted({_grid_text(pt.get(p)) for pt in points},
                                                   key=lambda v: (len(v), v)))
                     for p in grid) or "none (one point)"
    records = list(part.records)
    finished = sum(r.get("status") in ("ok", "incomplete") for r in records)
    degraded = sum(bool(r.get("degraded")) for r in records)
    scenario = Path(str(about.get("scenario", ""))).name
    seeds = about.get("seeds") or {}
    seeding = (f"study seed {about.get('seed')}" if seeds.get("rule", "hash") == "hash" else
               f"replication r's seed is {about.get('seed')} + r at every point")
    if seeds.get("over"):
        seeding += (", replication seeds hashed over "
                    + ", ".join(f"`{path}`" for path in seeds["over"].values())
                    + " only (points that differ elsewhere share their traces)")
    seeding += "".join(f", also set as `{p}`" for p in seeds.get("also", []))
    return (f"Scenario `{scenario}`; grid: {axes}; {about.get('replications')} "
            f"replication(s) per point ({seeding}), each its own "
            f"trace replayed by every policy; executors "
            f"{', '.join(EXECUTOR_TITLES.get(e, e) for e in about.get('executors', []))}; "
            f"{finished} of {len(records)} cells finished, {degraded} degraded; baseline "
            f"`{about.get('baseline')}`.")


def _fidelity(parts: Sequence[StudyPart]) -> list[Block]:
    blocks: list[Block] = []
    rows = []
    for part in parts:
        for r in part.records:
            if r.get("degraded") or r.get("degraded_policies"):
                why = list(r.get("reasons") or []) + [
                    f"{p}: {reason}" for p, reason in (r.get("degraded_policies") or {}).items()]
                rows.append((part.name, str(r.get("label")), str(r.get("replication")),
                             EXECUTOR_TITLES.get(str(r.get("executor")), str(r.get("executor"))),
                             "cell" if r.get("degraded") else "policies",
                             "; ".join(map(str, why))))
            elif r.get("status") not in ("ok",):
                rows.append((part.name, str(r.get("label")), str(r.get("replication")),
                             EXECUTOR_TITLES.get(str(r.get("executor")), str(r.get("executor"))),
                             str(r.get("status")), str(r.get("error") or "policies failed: "
                                                      + ", ".join(sorted({
                                                          f.get("policy", "?") for f in
                                                          r.get("failed") or []})))))
    emulated = sum(r.get("executor") == "emulation" for p in parts for r in p.records)
    if not emulated and not rows:
        return blocks
    blocks.append(Heading("Fidelity and failures"))
    if rows:
        blocks.append(Paragraph(f"{len(rows)} cell(s) degraded, incomplete or failed "
                                "(`docs/fidelity.md`); degraded cells and policies are left "
                                "out of the study tables' statistics and counted in their "
                                "`degraded cells` column.", note=True))
        blocks.append(Table("", ("study", "point", "replication", "executor", "what",
                                 "reasons"), tuple(rows)))
    else:
        blocks.append(Paragraph(f"All {emulated} emulated cells passed the fidelity guard "
                                "(`docs/fidelity.md`); no cell failed."))
    return blocks


def _sentence(text: str) -> str:
    """``text`` with a capital first letter and a full stop."""
    text = text.strip()
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def _claim_blocks(claim: Claim) -> list[Block]:
    blocks: list[Block] = [Heading(claim.section)]
    if claim.paper:
        blocks.append(Paragraph(f"Paper: {claim.paper}"))
    blocks += list(claim.tables)
    blocks.append(Paragraph(f"Rule: {_sentence(claim.rule)}"))
    behind = ("" if claim.replications is None else
              f" ({claim.replications} independent replication(s) behind each condition)")
    blocks.append(Paragraph(f"**Verdict: {claim.verdict}**{behind}."))
    if claim.effect:
        blocks.append(Paragraph(f"Effect: {claim.effect}"))
    if claim.why:
        blocks.append(Paragraph(f"Why: {claim.why}"))
    return blocks


def metric_tables(metrics: Mapping[str, Any]) -> list[Table]:
    """The measurement tables a metric function put under ``tables`` (as JSON)."""
    out = []
    for i, t in enumerate(metrics.get("tables") or []):
        try:
            out.append(Table(str(t.get("title", "")), tuple(map(str, t["columns"])),
                             tuple(tuple(map(str, row)) for row in t["rows"]),
                             str(t.get("note", ""))))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"metrics: tables[{i}]: expected {{title, columns, rows, note}}"
                             f", found {t!r}") from exc
    return out


def blocks(report: ReportInput) -> list[Block]:
    """The whole report as blocks (what both renderings show)."""
    out: list[Block] = [
        Heading(report.title, 1),
        Paragraph(f"Generated by `{report.command}`; do not edit by hand. "
                  f"{report.description} Size `{report.size}`, executors "
                  f"{', '.join(EXECUTOR_TITLES.get(e, e) for e in report.executors)}, "
                  f"{len(report.studies)} study file(s). Every number below is computed "
                  "from the studies' cells; intervals are 95 % t-intervals across "
                  "independent replications unless the method column says otherwise "
                  "(`docs/statistics.md`)."),
    ]
    setup = [str(p) for p in report.metrics.get("setup") or []]
    if setup:
        out.append(Heading("Set-up"))
        out += [Paragraph(p) for p in setup]
    if report.claims:
        out.append(Heading("Verdicts"))
        out.append(Table("", ("claim", "verdict", "replications"), tuple(
            (f"{c.key}. {c.claim}", c.verdict,
             "-" if c.replications is None else str(c.replications)) for c in report.claims)))
        for claim in report.claims:
            out += _claim_blocks(claim)
    tables = metric_tables(report.metrics)
    if tables:
        out.append(Heading("Measurements"))
        for table in tables:
            out += [Heading(table.title, 3), Table("", table.columns, table.rows, table.note)]
    out.append(Heading("Studies"))
    for part in report.studies:
        description = part.about.get("description") or ""
        out += [Heading(f"Study `{part.name}`" + (f": {description}" if description else ""), 3),
                Paragraph(_study_line(part)), study_table(part)]
    out += _fidelity(report.studies)
    return out


def write_report(report: ReportInput, path: Path) -> list[Path]:
    """Write the Markdown report at ``path``, its HTML page beside it and, when the
    experiment judges claims, its claims file; returns the files written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = blocks(report)
    path.write_text(document.markdown(parts), encoding="utf-8")
    page = path.with_suffix(".html")
    page.write_text(document.page(parts), encoding="utf-8")
    written = [path, page]
    if report.claims:
        written.append(claims_index.write_claims(path, report.paper, report.command, [
            {"key": c.key, "claim": c.claim, "verdict": c.verdict, "section": c.section,
             "replications": c.replications, "effect": c.effect} for c in report.claims]))
    return written
