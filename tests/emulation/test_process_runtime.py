"""Process-runtime services run inside their host's namespace and cgroup limits."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testbed.emulation.executor import bring_up
from testbed.emulation.ledger import Ledger, is_running, process_start_time
from testbed.emulation.names import reserve_prefix
from testbed.emulation.network import stop_network
from testbed.errors import EmulationError
from testbed.scenario.loader import scenario_from_dict
from testbed.scenario.model import Scenario

pytestmark = pytest.mark.emulation
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _scenario(name: str, **limits: object) -> Scenario:
    """A client and a server host running one tier server (with the node ``limits``), one
    1 ms link, shaped by the userspace delayer."""
    return scenario_from_dict({
        "name": name,
        "topology": {
            "nodes": [{"name": "c1", "role": "client"},
                      {"name": "srv", "role": "server", "tier": "edge", **limits}],
            "links": [{"a": "c1", "b": "srv", "delay_ms": 1}],
        },
        "services": [{"name": "edge", "program": "tier_server", "node": "srv",
                      "params": {"workers": 1, "mu": 1.0}}],
        "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": 1.0}},
        "policies": ["jsq"],
        "duration": 5,
        "executor": {"shaping": "userspace"},
    })


def test_namespace_cgroup_and_background_load(tmp_path: Path) -> None:
    scenario = _scenario("limits", cpu=0.2, memory_mb=200)
    ledger = Ledger(f"tbt-proc-{os.getpid()}-{time.time_ns()}", root=tmp_path / "ledgers")
    work = tmp_path / "work"
    work.mkdir()
    topo = None
    try:
        topo = bring_up(scenario, ledger, work, reserve_prefix(ledger),
                        progress=lambda _l: None)
        srv = topo.net.hosts["srv"]
        pid = topo.services["edge"].pid
        # The service shares its host's network namespace, not the harness's.
        netns = os.readlink(f"/proc/{pid}/ns/net")
        assert netns == os.readlink(f"/proc/{srv.pid}/ns/net")
        assert netns != os.readlink("/proc/self/ns/net")
        # It sits in the node's cgroups, which hold the node's limits.
        cgroup = topo.net.cgroups["srv"]
        membership = Path(f"/proc/{pid}/cgroup").read_text()
        for path in cgroup.paths:
            assert str(path).split("/edge-testbed/", 1)[1] in membership
        # A full background load (the whole machine) is held to the node's 0.2 share.
        topo.set_load("srv", 1.0)
        burners = [r.pid for r in topo.loads["srv"]]
        starts = [process_start_time(b) for b in burners]
        before = sum(_cpu_seconds(b) for b in burners)
        t0 = time.monotonic()
        time.sleep(2.0)  # measuring a rate over a fixed window
        used = sum(_cpu_seconds(b) for b in burners) - before
        cores = used / (time.monotonic() - t0)
        assert 0.3 < cores < 0.5, cores  # 0.2 of 2 cores = 0.4 of a core
        topo.set_load("srv", 0.0)
        assert "srv" not in topo.loads
        assert not any(is_running(b, s) for b, s in zip(burners, starts))
    finally:
        if topo is not None:
            stop_network(topo.net)
        assert ledger.teardown() == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a partition needs 2 CPUs")
def test_a_cpu_partition_gives_the_delayer_and_the_services_cpus_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``TESTBED_SHAPER_CPUS`` confines the delayer to the CPUs it names and the launcher,
    so every service it forks, to the others; a value naming no usable CPU stops the
    bring-up before anything is made, with a line naming the variable."""
    last = max(os.sched_getaffinity(0))
    hosts = set(os.sched_getaffinity(0)) - {last}
    monkeypatch.setenv("TESTBED_SHAPER_CPUS", str(last))
    ledger = Ledger(f"tbt-cpus-{os.getpid()}-{time.time_ns()}", root=tmp_path / "ledgers")
    work = tmp_path / "work"
    work.mkdir()
    topo = None
    try:
        topo = bring_up(_scenario("cpus"), ledger, work, reserve_prefix(ledger),
                        progress=lambda _l: None)
        assert topo.infra.partition is not None
        assert topo.infra.partition.as_dict() == {"shaper": [last], "hosts": sorted(hosts)}
        assert topo.infra.delayer.ping()["cpus"] == topo.infra.partition.as_dict()
        delayer = topo.infra.delayer.pid
        for tid in os.listdir(f"/proc/{delayer}/task"):
            assert os.sched_getaffinity(int(tid)) == {last}
        assert os.sched_getaffinity(topo.services["edge"].pid) == hosts
    finally:
        if topo is not None:
            stop_network(topo.net)
        assert ledger.teardown() == []
    monkeypatch.setenv("TESTBED_SHAPER_CPUS", "0-4095")
    refused = Ledger(f"tbt-cpus-bad-{os.getpid()}-{time.time_ns()}", root=tmp_path / "ledgers")
    with pytest.raises(EmulationError, match="TESTBED_SHAPER_CPUS: CPU .* is not one this"):
        bring_up(_scenario("cpus-bad"), refused, work, reserve_prefix(refused),
                 progress=lambda _l: None)
    assert [e.kind for e in refused.open_entries()] in ([], ["prefix"])
    assert refused.teardown() == []
