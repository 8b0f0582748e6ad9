"""Run limits: a run this machine cannot hold is refused in one line with the numbers,
before anything is generated or built; node memory limits above the machine's memory
are refused at load; commands that need root say so in one line when run without it."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.errors import ScenarioError, TestbedError
from testbed.limits import ROW_BYTES, TRACE_BYTES, check_run, estimate, expected_tasks
from testbed.machine import GIB, MIB, Memory, memory
from testbed.runner import RESULTS_ROOT, run_scenario
from testbed.scenario import builtin_scenarios, load_scenario, scenario_from_dict
from testbed.scenario.loader import read_yaml
from testbed.scenario.model import Scenario

ROOT = Path(__file__).resolve().parents[2]
CONTINUUM = builtin_scenarios()["continuum"]


def continuum(rate: float, duration: float) -> dict[str, Any]:
    """The built-in continuum scenario's document with another per-client rate and
    duration (its topology inlined, so the document stands anywhere)."""
    doc = copy.deepcopy(read_yaml(CONTINUUM))
    doc["topology"] = load_scenario("continuum").topology.to_dict()
    doc["workload"]["params"]["rate"] = rate
    doc["duration"] = duration
    return doc


def scenario(doc: dict[str, Any]) -> Scenario:
    return scenario_from_dict(doc, source="<limits test>")


def fleet(servers: int) -> dict[str, Any]:
    """One client and ``servers`` servers, each with a tier server, on one switch."""
    nodes = [{"name": "c1", "role": "client", "tier": "local"}, {"name": "sw", "role": "switch"}]
    nodes += [{"name": f"s{i}", "role": "server", "tier": "edge"} for i in range(servers)]
    return {
        "name": "fleet",
        "topology": {"nodes": nodes,
                     "links": [{"a": n["name"], "b": "sw"} for n in nodes if n["name"] != "sw"]},
        "services": [{"name": f"t{i}", "program": "tier_server", "node": f"s{i}",
                      "params": {"workers": 1, "mu": 1.0}} for i in range(servers)],
        "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": 1.0}},
        "policies": ["random"],
        "duration": 10,
    }


# --- the workload ------------------------------------------------------------------------


def test_a_rate_of_1e9_is_refused_with_numbers_before_the_trace_is_made(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(TestbedError) as caught:
        run_scenario(scenario(continuum(1e9, 60)), out=out, executor="sim",
                     progress=lambda _line: None)
    message = str(caught.value)
    assert "\n" not in message
    assert "1.8e+11 tasks" in message  # 1e9 x 2 clients x 60 s x 1.5 (bursts)
    assert "GiB available" in message and "lower the workload's rate or duration" in message
    assert not out.exists()  # nothing was generated or written


def test_a_rate_of_1e7_for_5_s_is_refused_on_this_machine() -> None:
    with pytest.raises(TestbedError, match=r"1\.5e\+08 tasks x 2 replay\(s\) 558\.8 GiB"):
        check_run(scenario(continuum(1e7, 5)), "sim")


def test_a_rate_of_1e5_for_5_s_is_refused_under_a_4_gib_cap_and_fits_here() -> None:
    run = scenario(continuum(1e5, 5))
    capped = Memory(total=64 * GIB, available=4 * GIB, bound_by="cgroup memory limit")
    for executor in ("sim", "emulation"):
        with pytest.raises(TestbedError, match=r"1\.5e\+06 tasks .* more than the 4\.0 GiB "
                                               r"available \(cgroup memory limit"):
            check_run(run, executor, capped)
    needs = estimate(run, "sim").total_bytes
    assert 5 * GIB < needs < 7 * GIB  # 1.5e6 x (400 B + 2 x 1800 B) + 300 MiB
    if memory().available > needs:
        assert check_run(run, "sim").tasks == pytest.approx(1.5e6)


def test_the_address_space_limit_of_the_process_is_honoured(tmp_path: Path) -> None:
    """The real reading: the CLI under ``prlimit --as`` 4 GiB refuses the 1e5 x 5 s run."""
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit is not installed")
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(continuum(1e5, 5)))
    res = subprocess.run(["prlimit", f"--as={4 * GIB}", "--", sys.executable, "-m",
                          "testbed.cli", "run", str(path), "--executor", "sim", "--out",
                          str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and "address-space limit" in res.stderr
    assert not (tmp_path / "run").exists()


def test_generators_count_their_tasks_without_generating_them() -> None:
    from testbed.registry import generators

    for name in builtin_scenarios():
        found = load_scenario(name)
        counted = expected_tasks(found)
        assert counted is not None, name
        clients = [n.name for n in found.clients()]
        made = len(generators()[found.workload.generator].generate(
            found.workload.params, clients, found.duration, found.workload.seed))
        # exact for deterministic generators, the Poisson mean for random ones
        assert abs(made - counted) <= max(1.0, 5 * counted ** 0.5), (name, made, counted)


def test_the_estimate_adds_measured_costs_per_task_and_process() -> None:
    run = scenario(continuum(2.0, 60))  # 360 tasks, 2 policies
    sim = estimate(run, "sim")
    assert sim.workload_bytes == pytest.approx(360 * (TRACE_BYTES + 2 * ROW_BYTES))
    emu = estimate(run, "emulation")
    assert (emu.hosts, emu.services, emu.clients) == (4, 4, 2)
    assert emu.emulation_bytes > 4 * 10 * MIB


def test_every_builtin_scenario_fits_this_machine() -> None:
    for name in builtin_scenarios():
        for executor in ("sim", "emulation"):
            assert check_run(load_scenario(name), executor).total_bytes < 1 * GIB


# --- hosts -------------------------------------------------------------------------------


def test_too_many_hosts_are_refused_with_an_estimate() -> None:
    run = scenario(fleet(200))
    small = Memory(total=4 * GIB, available=1 * GIB)
    with pytest.raises(TestbedError, match=r"emulation 404 processes \(201 hosts, 200 "
                                           r"services, 1 clients, 2 helpers\) 2\.\d GiB.*"
                                           r"use fewer hosts, services or clients"):
        check_run(run, "emulation", small)
    assert check_run(run, "sim", small).hosts == 0  # the simulator starts no process


def test_more_processes_than_the_kernel_can_give_out_are_refused() -> None:
    with pytest.raises(TestbedError, match=r"starts about 404 processes \(201 hosts, 200 "
                                           r"services, 1 clients, 2 helpers\), more than "
                                           r"the 300 the kernel can still give out"):
        check_run(scenario(fleet(200)), "emulation", room=300)
    assert check_run(scenario(fleet(200)), "emulation", room=404).processes == 404


def test_more_hosts_than_this_machine_holds_are_refused() -> None:
    servers = int(1.25 * memory().available / (10.5 * MIB))  # room for memory freed meanwhile
    with pytest.raises(TestbedError, match=rf"\({servers + 1} hosts, {servers} services"):
        check_run(scenario(fleet(servers)), "emulation")


# --- node memory limits ------------------------------------------------------------------


@pytest.mark.parametrize("memory_mb", [1048576, "machine + 1"])
def test_a_node_memory_limit_above_the_machine_is_refused_at_load(memory_mb: Any) -> None:
    total_mb = memory().total // MIB
    value = total_mb + 1 if memory_mb == "machine + 1" else memory_mb
    if value <= total_mb:
        pytest.skip("this machine has more memory than the limit tested")
    doc = fleet(1)
    doc["topology"]["nodes"][2]["memory_mb"] = value
    with pytest.raises(ScenarioError) as caught:
        scenario(doc)
    text = str(caught.value)
    assert "topology.nodes[2].memory_mb" in text and str(value) in text
    assert f"at most {total_mb} MiB" in text


def test_a_node_memory_limit_within_the_machine_loads() -> None:
    doc = fleet(1)
    doc["topology"]["nodes"][2]["memory_mb"] = 256
    assert scenario(doc).node("s0").memory_mb == 256


# --- commands that need root, run as an ordinary user ------------------------------------


def _as_nobody(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """``testbed ARGS`` as user nobody, in a subprocess."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to switch to an ordinary user")
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home / "mpl")}
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           sys.executable, "-m", "testbed.cli", *args], cwd=home, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder every user can enter (pytest's own tmp folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="testbed-limits-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def home(scratch: Path) -> Path:
    """A folder user nobody owns."""
    folder = scratch / "home"
    folder.mkdir()
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)
    return folder


def _one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    return res.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["calibrate"], "calibrate needs root"),
    (["clean"], "clean needs root"),
    (["run", "continuum"], "emulation needs root"),
])
def test_commands_that_need_root_say_so_in_one_line(args: list[str], says: str,
                                                    home: Path) -> None:
    assert says in _one_line(_as_nobody(args, home))


def test_sim_without_out_names_the_results_folder_it_cannot_write(home: Path) -> None:
    if RESULTS_ROOT.exists() and RESULTS_ROOT.stat().st_mode & 0o002:
        pytest.skip("the results folder is writable by everyone here")
    message = _one_line(_as_nobody(["run", "continuum", "--executor", "sim"], home))
    assert f"results folder {RESULTS_ROOT}/continuum-" in message and "--out" in message


def test_sim_into_an_unwritable_out_names_it(home: Path, scratch: Path) -> None:
    locked = scratch / "locked"
    locked.mkdir(mode=0o755)
    message = _one_line(_as_nobody(["run", "continuum", "--executor", "sim", "--out",
                                    str(locked / "run")], home))
    assert f"--out {locked / 'run'}: cannot write there" in message


def test_sim_as_an_ordinary_user_runs_into_a_writable_out(home: Path) -> None:
    res = _as_nobody(["run", "continuum", "--executor", "sim", "--duration", "10", "--out",
                      str(home / "run")], home)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (home / "run" / "summary.json").is_file()


def test_a_study_point_this_machine_cannot_hold_is_refused_before_any_cell_runs() -> None:
    from testbed.study.spec import study_from_dict

    with pytest.raises(TestbedError, match=r"1\.8e\+11 tasks"):
        study_from_dict({"study": "big", "scenario": "continuum", "executors": ["sim"],
                         "grid": {"workload.params.rate": [2.0, 1e9]}})
