"""The CLI's registry plumbing, without root: list, experiment options, executor checks.

Experiments run through the registered ``echo`` system of the test tree (simulator
only here), so every check goes through the same generic code a real system uses.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.registry import register
from tests.testsystem import SCENARIO, SYSTEM

ROOT = Path(__file__).resolve().parents[2]


def _err(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_list_json_names_every_kind_with_its_system(capsys: pytest.CaptureFixture) -> None:
    assert main(["list", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found) == {"scenarios", "experiments", "calibrations", "policies",
                          "generators"}
    (detector,) = [c for c in found["calibrations"] if c["name"] == "armada-detector"]
    assert detector["system"] == "armada" and detector["sizes"] == ["small", "full"]
    assert "armada-detector" not in {e["name"] for e in found["experiments"]}
    for exp in found["experiments"]:
        for size, files in exp["studies"].items():
            assert size in exp["sizes"] and files
            assert all((ROOT / f).is_file() and not f.startswith("/") for f in files)
    systems = {item["system"] for kind in found.values() for item in kind}
    assert {"offloading", "armada", "person-search"} <= systems
    continuum = next(s for s in found["scenarios"] if s["name"] == "continuum")
    assert continuum["system"] == "offloading" and continuum["description"]
    assert all(item["description"] for kind in found.values() for item in kind)


def test_list_text_has_a_section_per_kind(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for section in ("scenarios:", "experiments:", "calibrations:", "policies:",
                    "generators:"):
        assert section in out


@pytest.mark.parametrize("argv, says", [
    (["calibrate", "armada-detectr"], ("calibrate: expected the link calibration (no "
                                        "name) or one of armada-detector, found "
                                        "'armada-detectr'")),
    (["calibrate", "armada-detector", "--size", "medium"],
     "--size: armada-detector has small, full, found 'medium'"),
    (["calibrate", "--size", "small"],
     "--size, --out and --report belong to a system's calibration"),
])
def test_a_calibration_is_named_or_refused_in_one_line(argv: list[str], says: str,
                                                       capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    assert _err(capsys).startswith(f"testbed: {says}")


def test_a_policies_typo_is_reported_against_the_option(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "continuum", "--policies", "jsq,jsqq", "--executor", "sim"]) == 2
    err = _err(capsys)
    assert err.startswith("testbed: --policies:") and "'jsqq'" in err


@pytest.mark.usefixtures("echo_plugin")
def test_an_experiment_of_study_files_runs_resumes_and_writes_its_report(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["experiment", "echo-compare", "--executors", "sim", "--out", str(tmp_path / "out"),
            "--report", str(tmp_path / "rep")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "2 finished before" not in first and "claim E1: holds" in first
    text = (tmp_path / "rep" / "echo.md").read_text()
    assert (f"`testbed experiment echo-compare --size small --executors sim --report "
            f"{tmp_path / 'rep'}`") in text
    assert "| E1. first answers faster than round-robin | holds | 2 |" in text
    assert (tmp_path / "out" / "rules" / "summary.parquet").is_file()
    claims = json.loads((tmp_path / "rep" / "echo.claims.json").read_text())["claims"]
    assert claims[0]["verdict"] == "holds" and claims[0]["replications"] == 2
    assert main(argv) == 0  # the same folders again: nothing runs, the same report
    again = capsys.readouterr().out
    assert "3 finished before, 0 to run" in again and "4 finished before, 0 to run" in again
    assert (tmp_path / "rep" / "echo.md").read_text() == text


@pytest.mark.usefixtures("echo_plugin")
@pytest.mark.parametrize(("argv", "message"), [
    (["--size", "medium"], "--size: echo-compare has small, full, found 'medium'"),
    (["--executors", "gpu"], "--executors: echo-compare runs on sim and emulation"),
    (["--task-runtime", "docker"], "--task-runtime: echo-compare takes no such option"),
])
def test_experiment_arguments_are_checked(argv: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    assert main(["experiment", "echo-compare", *argv, "--out", str(tmp_path / "o")]) == 2
    assert message in _err(capsys)
    assert not (tmp_path / "o").exists()


def test_an_emulation_only_experiment_refuses_the_simulator(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["experiment", "armada-selection", "--executors", "sim",
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert "--executors: armada-selection runs on emulation" in _err(capsys)
    assert not (tmp_path / "o").exists()


def test_an_option_of_another_experiment_is_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["experiment", "offloading", "--cargo-runtime", "docker"]) == 2
    assert "--cargo-runtime: offloading takes no such option" in _err(capsys)


def test_a_default_executor_the_system_lacks_names_the_file(
        capsys: pytest.CaptureFixture) -> None:
    remove = register(replace(SYSTEM, simulate=None))
    try:
        assert main(["run", SCENARIO]) == 2
    finally:
        remove()
    err = _err(capsys)
    assert f"{SCENARIO}: executor.default sim: the echo system has no simulator" in err


def test_run_takes_time_scale_and_task_timeout(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "continuum", "--executor", "sim", "--duration", "10",
                 "--time-scale", "40", "--task-timeout", "30", "--out", str(out)]) == 0
    resolved = json.loads((out / "metadata.json").read_text())["scenario"]
    assert resolved["time_scale"] == 40 and resolved["task_timeout"] == 30
