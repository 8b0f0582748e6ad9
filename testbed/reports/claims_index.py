"""The claims ledger: every report's verdicts in one index.

A report writer that judges a paper's claims also writes ``<report>.claims.json`` beside
its Markdown (:func:`write_claims`): the paper, the command that produced the report and,
per claim, its statement, its verdict and the report section that gives the evidence.
``testbed claims-index`` (:func:`write_index`) gathers every such file under a folder
(``docs/results`` by default) into that folder's ``README.md``, so the index quotes only
verdicts that a report computed and never drifts from them: rerunning the command after a
report changes rewrites the line.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from testbed.errors import TestbedError

FORMAT = 1
SUFFIX = ".claims.json"
INDEX_NAME = "README.md"
HOLDS = "holds"
FAILS = "fails"
NOT_RUN = "not run"
HOLDS_ONLY_FOR = "holds only for "

Check = TypeVar("Check")


def verdict(checks: Iterable[tuple[Check, bool]], *, empty: str = NOT_RUN,
            name: Callable[[list[Check]], str] = ", ".join) -> str:  # type: ignore[assignment]
    """The one verdict rule every report applies to a claim's checks (name, passed):
    ``holds`` when all passed, ``fails`` when none did, else ``holds only for`` the
    passed ones as ``name`` writes them; ``empty`` when there is no check at all.

    One rule for all reports keeps the index's verdicts comparable across papers."""
    checks = list(checks)
    if not checks:
        return empty
    passed = [what for what, ok in checks if ok]
    if len(passed) == len(checks):
        return HOLDS
    if not passed:
        return FAILS
    return HOLDS_ONLY_FOR + name(passed)


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim as a report judged it: ``section`` is the heading of the report section
    with the evidence (the index links to it)."""

    key: str
    claim: str
    verdict: str
    section: str


def anchor(heading: str) -> str:
    """The fragment a Markdown renderer gives ``heading`` (lower case, punctuation other
    than ``-`` and ``_`` dropped, spaces to ``-``)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def claims_path(report: Path) -> Path:
    """Where the claims of ``report`` (a Markdown file) go."""
    return report.with_name(report.stem + SUFFIX)


def write_claims(report: Path, paper: str, command: str,
                 claims: Sequence[Claim | Mapping[str, Any]]) -> Path:
    """Write the claims of ``report`` beside it; returns the file. Each claim is an index
    entry or a mapping with at least its fields (``key``, ``claim``, ``verdict``,
    ``section``) and optionally more (``replications``, ``effect``)."""
    doc = {"format": FORMAT, "paper": paper, "report": report.name, "command": command,
           "claims": [dict(c) if isinstance(c, Mapping) else dataclasses.asdict(c)
                      for c in claims]}
    path = claims_path(report)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def read_claims(path: Path) -> dict[str, Any]:
    """One claims file, checked; a bad one is a :class:`TestbedError` naming it."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{path}: expected a claims file (JSON), found: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TestbedError(f"{path}: format: expected {FORMAT}, found "
                           f"{doc.get('format') if isinstance(doc, dict) else doc!r}")
    for field in ("paper", "report", "command"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            raise TestbedError(f"{path}: {field}: expected a non-empty string")
    claims = doc.get("claims")
    if not isinstance(claims, list) or not claims:
        raise TestbedError(f"{path}: claims: expected a non-empty list")
    for i, claim in enumerate(claims):
        for field in ("key", "claim", "verdict", "section"):
            if not isinstance(claim, dict) or not isinstance(claim.get(field), str):
                raise TestbedError(f"{path}: claims[{i}].{field}: expected a string")
    return doc


def render_index(root: Path) -> str:
    """The index of every claims file under ``root``, grouped by paper (in name order),
    each paper's claims in key order and its reports' commands in path order."""
    files = sorted(root.rglob("*" + SUFFIX))
    if not files:
        raise TestbedError(f"{root}: no *{SUFFIX} file under it (a report writes one "
                           "beside its Markdown)")
    by_paper: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in files:
        doc = read_claims(path)
        by_paper.setdefault(doc["paper"], []).append((path, doc))
    lines = ["# The papers' claims, checked", "",
             ("Generated by `testbed claims-index` from the `*.claims.json` file each report "
             "writes beside itself; do not edit by hand. A verdict is the report's own, "
             "computed from its numbers: *holds*, *fails* or *holds only for* the "
             "conditions named. Follow a link for the numbers, the rule and why."), ""]
    for paper in sorted(by_paper):
        lines += [f"## {paper}", "", "| claim | verdict | evidence |", "|---|---|---|"]
        commands, rows = [], []
        for path, doc in by_paper[paper]:
            report = path.with_name(doc["report"]).relative_to(root).as_posix()
            commands.append(f"- [{report}]({report}): `{doc['command']}`")
            for c in doc["claims"]:
                link = f"[{report}]({report}#{anchor(c['section'])})"
                rows.append((c["key"], (f"| {c['key']}. {_cell(c['claim'])} | "
                                       f"{_cell(c['verdict'])} | {link} |")))
        lines += [row for _key, row in sorted(rows)]
        lines += ["", "Commands:", "", *commands, ""]
    judged = {path.with_name(read_claims(path)["report"]) for path in files}
    others = [md for md in sorted(root.rglob("*.md"))
              if md not in judged and md != root / INDEX_NAME]
    if others:
        lines += ["## Reports that judge no claim", "",
                  ("Measurements without a claims file: a report written before its writer "
                   "recorded verdicts, or one whose paper states no claim for it (its text "
                   "says which)."), "",
                  *(f"- [{md.relative_to(root).as_posix()}]({md.relative_to(root).as_posix()}):"
                    f" {_title(md)}" for md in others), ""]
    return "\n".join(lines)


def _title(report: Path) -> str:
    """The first heading of a Markdown report."""
    for line in report.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return report.stem


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def write_index(root: Path) -> Path:
    """Write ``root/README.md`` from the claims files under ``root``; returns it."""
    path = root / INDEX_NAME
    path.write_text(render_index(root), encoding="utf-8")
    return path
