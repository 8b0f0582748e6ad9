"""The claims ledger: claims files beside reports, the index built from them, and the
committed index kept equal to what its claims files give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.errors import TestbedError
from testbed.reports.claims_index import (
    Claim,
    anchor,
    claims_path,
    read_claims,
    render_index,
    write_claims,
    write_index,
)

ROOT = Path(__file__).resolve().parents[2]


def _two_papers(root: Path) -> None:
    (root / "b").mkdir(parents=True)
    (root / "a").mkdir(parents=True)
    write_claims(root / "b" / "README.md", "002: second", "testbed experiment two",
                 [Claim("1", "x beats y", "fails", "Claim 1: x beats y"),
                  Claim("2", "z | w", "holds only for sim", "Claim 2: z | w")])
    write_claims(root / "a" / "one.md", "001: first", "testbed experiment one",
                 [Claim("P1", "p is lowest", "holds", "Conclusion")])


def test_index_groups_claims_by_paper_with_links_and_commands(tmp_path: Path) -> None:
    _two_papers(tmp_path)
    assert claims_path(tmp_path / "a" / "one.md") == tmp_path / "a" / "one.claims.json"
    text = render_index(tmp_path)
    assert text.index("## 001: first") < text.index("## 002: second")
    assert "| P1. p is lowest | holds | [a/one.md](a/one.md#conclusion) |" in text
    assert "(b/README.md#claim-1-x-beats-y)" in text
    assert "| 2. z \\| w | holds only for sim |" in text  # a pipe stays inside its cell
    assert "- [b/README.md](b/README.md): `testbed experiment two`" in text
    assert write_index(tmp_path).read_text() == text
    assert "Reports that judge no claim" not in text


def test_reports_without_claims_are_listed_apart(tmp_path: Path) -> None:
    _two_papers(tmp_path)
    (tmp_path / "a" / "one.md").write_text("# One\n")
    (tmp_path / "a" / "storage.md").write_text("intro\n# Storage layer\n")
    text = render_index(tmp_path)
    assert "## Reports that judge no claim" in text
    assert "- [a/storage.md](a/storage.md): Storage layer" in text
    assert "- [a/one.md]" not in text.split("judge no claim")[1]  # it has claims
    write_index(tmp_path)
    assert "README.md" not in render_index(tmp_path).split("judge no claim")[1]


def test_anchor_follows_the_renderers_rule() -> None:
    assert anchor("Claim 1: hybrid beats the strongest static baseline") == \
        "claim-1-hybrid-beats-the-strongest-static-baseline"
    assert anchor("Claim P3: priority's reduction grows") == "claim-p3-prioritys-reduction-grows"


@pytest.mark.parametrize("doc, field", [
    ({"format": 2}, "format"),
    ({"format": 1, "paper": "", "report": "r.md", "command": "c", "claims": []}, "paper"),
    ({"format": 1, "paper": "p", "report": "r.md", "command": "c", "claims": []}, "claims"),
    ({"format": 1, "paper": "p", "report": "r.md", "command": "c",
      "claims": [{"key": "1", "claim": "c", "verdict": 3, "section": "s"}]},
     "claims[0].verdict"),
])
def test_a_bad_claims_file_is_named_with_its_field(tmp_path: Path, doc, field) -> None:
    path = tmp_path / "x.claims.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TestbedError) as err:
        read_claims(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_a_folder_without_claims_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="no \\*.claims.json"):
        render_index(tmp_path)


def test_cli_writes_the_index(tmp_path: Path, capsys) -> None:
    _two_papers(tmp_path)
    assert main(["claims-index", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text() == render_index(tmp_path)
    assert "README.md" in capsys.readouterr().out


def test_the_committed_index_is_what_its_claims_files_give() -> None:
    """docs/results/README.md is regenerated whenever a report's claims change."""
    root = ROOT / "docs" / "results"
    assert (root / "README.md").read_text() == render_index(root)
    for path in root.rglob("*.claims.json"):
        doc = read_claims(path)
        report = path.with_name(doc["report"])
        text = report.read_text()
        for claim in doc["claims"]:  # every linked section is a heading of the report
            assert any(line.lstrip("#").strip() == claim["section"]
                       for line in text.splitlines() if line.startswith("#")), \
                (report, claim["section"])
            assert claim["verdict"].split(" ")[0] in ("holds", "fails", "not")


def test_one_verdict_rule_for_every_report() -> None:
    """The shared rule: all passed holds, none fails, some names them; no check is
    ``empty``; each system's wrapper gives the same words."""
    from testbed.reports.claim import Claim, Condition
    from testbed.reports.claims_index import verdict
    from testbed.systems.armada.verdicts import verdict as armada_verdict

    assert verdict([("a", True), ("b", True)]) == "holds"
    assert verdict([("a", False), ("b", False)]) == "fails"
    assert verdict([("a", True), ("b", False), ("c", True)]) == "holds only for a, c"
    assert verdict([]) == "not run"
    assert verdict([], empty="fails") == "fails"
    assert armada_verdict({}) == "fails"
    assert armada_verdict({"x": True, "y": False}) == "holds only for x"
    conditions = (Condition("0.4", True, "sim"), Condition("0.9", True, "sim"),
                  Condition("0.9", True, "emulation"), Condition("0.2", False, "emulation"))
    assert Claim("1", "c", "r", conditions).verdict == \
        "holds only for sim: 0.4, 0.9; emulation: 0.9"
