"""The ``testbed`` command as a user runs it: calibrate's JSON, bad input, clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.calibrate import JSON_KEYS
from testbed.emulation.ledger import clean_stale, is_running
from testbed.emulation.names import release_stale_prefixes, reserved_by
from testbed.poll import wait_until
from testbed.scenario.loader import builtin_scenarios

pytestmark = pytest.mark.emulation
PROJECT = Path(__file__).resolve().parents[2]


def _testbed(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], cwd=PROJECT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


@pytest.mark.timing
def test_calibrate_json_has_one_object_per_case() -> None:
    res = _testbed("calibrate", "--json", "--probes", "200")
    assert res.returncode == 0, res.stderr
    cases = json.loads(res.stdout)
    assert all(tuple(case) == JSON_KEYS for case in cases)
    engines = {c["backend"] for c in cases}  # every shaping engine present is calibrated
    assert "delayer-py" in engines, engines
    for engine in engines:
        mine = [c for c in cases if c["backend"] == engine]
        delays = {c["configured_delay_ms"]: c for c in mine if c["rtt_p50_ms"] is not None}
        for delay in (5.0, 20.0, 100.0):
            case = delays[delay]
            assert case["expected_rtt_ms"] == 2 * delay
            assert abs(case["rtt_p50_ms"] - 2 * delay) <= max(0.05 * 2 * delay, 0.5), case
            assert case["configured_bw_mbit"] is None and case["measured_bw_mbit"] is None
        bws = {c["configured_bw_mbit"]: c for c in mine if c["configured_bw_mbit"] is not None}
        for bw in (10.0, 100.0):
            assert abs(bws[bw]["measured_bw_mbit"] - bw) <= 0.1 * bw, bws[bw]
            assert bws[bw]["rtt_p50_ms"] is None


def test_bad_scenario_builds_nothing(tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(builtin_scenarios()["continuum"]).read_text())
    doc["time_scale"] = 5000  # pushes service times below the 1 ms timing floor
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    before = _links()
    ledgers = tmp_path / "ledgers"
    res = _testbed("run", str(bad), "--out", str(tmp_path / "out"),
                   env={"TESTBED_LEDGER_ROOT": str(ledgers)})
    assert res.returncode == 2
    assert str(bad) in res.stderr and "time_scale" in res.stderr
    assert not (tmp_path / "out").exists()
    assert not ledgers.exists() or not list(ledgers.iterdir())
    assert _links() == before


def test_clean_removes_only_what_a_killed_run_listed(tmp_path: Path) -> None:
    ledgers = tmp_path / "ledgers"
    env = {"TESTBED_LEDGER_ROOT": str(ledgers)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", "continuum", "--duration", "400",
         "--out", str(tmp_path / "run")],
        cwd=PROJECT, env={**os.environ, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if "services answering" in line:
                break
        proc.kill()  # SIGKILL: no teardown runs, the ledger stays behind
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        (path,) = ledgers.glob("*.jsonl")
        listed = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        names = {e["data"]["name"] for e in listed if e.get("kind") in ("link", "bridge")}
        procs = [(e["data"]["pid"], e["data"]["start"]) for e in listed if e.get("kind") == "process"]
        assert names and names <= _links()
        # Mininet shells die with their pty; the launcher, services and delayer live on.
        assert procs and any(is_running(pid, start) for pid, start in procs)
        res = _testbed("clean", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "cleaned" in res.stdout
        assert not names & _links()
        assert not any(is_running(pid, start) for pid, start in procs)
        assert not list(ledgers.iterdir())
    finally:
        clean_stale(ledgers)  # whatever the assertions say, leave nothing behind
    res = _testbed("clean", env=env)
    assert "nothing to clean" in res.stdout


def _confirmed_bridge(ledgers: Path) -> dict | None:
    """The confirmed bridge entry of the one ledger under ``ledgers``, once there is one."""
    bridges: dict[int, dict] = {}
    for path in ledgers.glob("*.jsonl"):
        for line in path.read_text().splitlines()[1:]:
            obj = json.loads(line)
            if obj.get("kind") == "bridge":
                bridges[obj["seq"]] = dict(obj["data"])
            elif obj.get("confirm") in bridges:
                bridges[obj["confirm"]].update(obj["data"])
    return next((b for b in bridges.values() if "ifindex" in b), None)


def test_clean_frees_the_prefix_of_a_killed_calibration(tmp_path: Path) -> None:
    ledgers, prefixes = tmp_path / "ledgers", tmp_path / "prefixes"
    env = {"TESTBED_LEDGER_ROOT": str(ledgers), "TESTBED_PREFIX_ROOT": str(prefixes)}
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "calibrate"], cwd=PROJECT,
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        try:
            bridge = wait_until(lambda: _confirmed_bridge(ledgers), 60, "calibration's bridge")
        finally:
            proc.kill()  # SIGKILL: no teardown, the ledger and the reservation stay
            proc.wait(timeout=30)
        prefix = bridge["prefix"]
        assert bridge["name"] == f"{prefix}s1" and bridge["name"] in _links()
        assert (ledger := next(ledgers.glob("*.jsonl"))).name.startswith("calibrate-")
        assert reserved_by(prefix, root=prefixes) == ledger.stem  # stale, still held back
        res = _testbed("clean", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"run prefixes freed: {prefix}" in res.stdout
        assert not {n for n in _links() if n.startswith(prefix)}
        assert reserved_by(prefix, root=prefixes) is None and not list(ledgers.iterdir())
    finally:
        clean_stale(ledgers)  # whatever the assertions say, leave nothing behind
        release_stale_prefixes(prefixes)
