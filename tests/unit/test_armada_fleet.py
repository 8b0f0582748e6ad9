"""The pure parts of the Armada fleet experiments: generated scenarios, schedules,
interval metrics and the baseline clients' choices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.armada.geo import haversine_km
from nodes.armada.sdk.choice import Candidate
from nodes.armada.user import BaselineClient
from testbed.errors import TestbedError
from testbed.systems.armada.churn_experiment import churn_schedule
from testbed.systems.armada.failures_experiment import failure_order
from testbed.systems.armada.fleet import (
    Action,
    Fleet,
    StreamPlan,
    fleet_layout,
    fleet_scenario,
    intervals,
    largest_gaps,
    latency_stats,
    served_where,
)
from testbed.systems.armada.load_experiment import load_schedule
from testbed.systems.armada.scalability_experiment import (
    _scale_summary,
    co_switches,
    spread,
)


@pytest.mark.parametrize("nodes,users,cloud", [(3, 1, False), (20, 30, False), (6, 10, True)])
def test_generated_scenario_is_valid_and_within_the_hosts_cpu(nodes: int, users: int,
                                                              cloud: bool) -> None:
    fleet = Fleet(nodes=nodes, users=users, cloud=cloud)
    scenario = fleet_scenario(fleet)
    by_name = {n.name: n for n in scenario.topology.nodes}
    servers = [n for n in scenario.topology.nodes if n.role == "server" and n.tier != "control"]
    assert len(servers) == nodes + cloud
    assert sum(n.cpu for n in servers) * 2 <= 1.5  # node cpu is a share of 2 cores
    captains = [s for s in scenario.services if s.program == "armada.captain"]
    assert sorted(s.node for s in captains) == sorted(n.name for n in servers)
    for cap in captains:  # the Captain offers exactly its node's limit
        assert cap.params["cpu"] == pytest.approx(by_name[cap.node].cpu * 2)
    # every user shares a site LAN (one hop) with exactly one edge node
    links = scenario.topology.links
    for user in fleet.user_names:
        (site,) = [lk.b for lk in links if lk.a == user]
        assert [lk.a for lk in links if lk.b == site and lk.a.startswith("e")]
    assert len(scenario.clients()) == users


def test_layout_is_seeded() -> None:
    assert fleet_layout(Fleet(8, 8)) == fleet_layout(Fleet(8, 8))
    assert fleet_layout(Fleet(8, 8)) != fleet_layout(Fleet(8, 8, seed=2))
    lay = fleet_layout(Fleet(8, 8))
    assert len(set(lay["deploy_at"])) == 3
    for site, lat, lon in lay["users"]:  # users sit within a few hundred metres of their site
        assert haversine_km(lat, lon, *lay["sites"][site]) < 0.3


def test_fleet_refuses_what_the_host_cannot_honour() -> None:
    with pytest.raises(ValueError, match="1.5 cores"):
        Fleet(nodes=30, users=1)
    with pytest.raises(ValueError, match="at least 3"):
        Fleet(nodes=2, users=1)
    with pytest.raises(ValueError, match="policy"):
        StreamPlan("nearest-ish", 5.0)


def _scalability_points(size: str) -> list[tuple[int, int]]:
    """(edge nodes, users) of each point of ``armada-scalability``'s study at ``size``."""
    from testbed.study.spec import load_study

    study = load_study(Path(__file__).resolve().parents[2] / "testbed" / "systems" / "armada"
                       / "studies" / "scalability" / size / "scalability.yaml")
    return [(p.as_dict()["build.params.nodes"], p.as_dict()["build.params.users"])
            for p in study.points()]


def test_scalability_sizes_reach_the_papers_ranges() -> None:
    full = _scalability_points("full")
    users = sorted(u for n, u in full if n == 20)
    nodes = sorted(n for n, u in full if u == 10)
    assert users[0] == 1 and users[-1] >= 30 and nodes[0] == 3 and nodes[-1] >= 20
    assert len(set(full)) == len(full)  # the point the sweeps share runs once
    assert _scalability_points("small") == [(3, 1), (3, 4), (5, 4)]


def test_churn_schedule_takes_a_share_of_volunteers_and_brings_some_back() -> None:
    nodes = [f"e{i:02d}" for i in range(1, 11)]
    volunteers = nodes[:6]
    actions = churn_schedule(nodes, volunteers, 60.0, 0.3, 0.5, seed=3)
    leaves = [a for a in actions if a.action == "leave"]
    joins = [a for a in actions if a.action == "join"]
    assert len(leaves) == 3 and {a.target for a in leaves} <= set(volunteers)
    assert len(joins) == 1
    (join,) = joins
    left_at = next(a.offset_s for a in leaves if a.target == join.target)
    assert left_at < join.offset_s < 60.0
    assert all(9.0 <= a.offset_s <= 36.0 for a in leaves)
    assert actions == churn_schedule(nodes, volunteers, 60.0, 0.3, 0.5, seed=3)
    with pytest.raises(TestbedError, match="volunteers"):
        churn_schedule(nodes, volunteers[:2], 60.0, 0.3, 0.5, seed=3)


def test_load_schedule_alternates_and_fits() -> None:
    actions = load_schedule(3, 10.0, 80.0, seed=1, cpu=0.5)
    assert [a.target for a in actions] == ["serving:u01", "last:load"] * 3
    assert [a.params["cpu"] for a in actions] == [0.5, 0.0] * 3
    times = [a.offset_s for a in actions]
    assert times == sorted(times) and times[-1] <= 80.0 - 5.0
    for on, off in zip(actions[0::2], actions[1::2], strict=True):
        assert off.offset_s - on.offset_s == pytest.approx(10.0)
    with pytest.raises(TestbedError, match="do not fit"):
        load_schedule(5, 20.0, 60.0, seed=1, cpu=0.5)


def test_failure_order_is_seeded_and_distinct() -> None:
    nodes = ["e01", "e02", "e03", "e04", "e05"]
    order = failure_order(nodes, 4, seed=1)
    assert len(set(order)) == 4 and set(order) <= set(nodes)
    assert order == failure_order(nodes, 4, seed=1)


def _row(client: str, t: float, target: str, tier: str, ok: bool = True,
         latency: float = 0.1) -> dict:
    return {"client": client, "dispatch_wall": t, "response_wall": t + latency,
            "target": target, "tier": tier, "outcome": "ok" if ok else "timeout",
            "latency_s": latency}


def test_intervals_count_users_served_at_the_edge() -> None:
    rows = [_row("u1", 1.0, "e1", "edge"), _row("u2", 1.5, "e2", "edge"),
            _row("u1", 11.0, "cloud", "cloud", latency=0.3), _row("u2", 11.0, "e3", "edge"),
            _row("u2", 12.0, "e3", "edge", ok=False)]
    first, second = intervals(rows, [10.0], ["u1", "u2", "u3"])
    assert (first["users_at_edge"], first["users_elsewhere"], first["users_unserved"]) == (2, 0, 1)
    assert (second["users_at_edge"], second["users_elsewhere"]) == (1, 1)
    assert second["lost"] == 1 and second["mean_ms"] == pytest.approx(200.0)
    assert served_where(rows) == {"u1": "cloud", "u2": "edge"}  # a tie is not the edge
    assert largest_gaps(rows) == {"u1": pytest.approx(10.2), "u2": pytest.approx(9.5)}
    assert latency_stats([])["mean_ms"] is None


def _baseline(policy: str) -> BaselineClient:
    client = BaselineClient("http://127.0.0.1:1", "det", 40.0, -88.0, probe_payload=b"",
                            policy=policy, cloud_nodes=["cloud"], seed=5)
    client.candidates = [Candidate("t-near", "http://a", "e1"), Candidate("t-far", "http://b", "e2"),
                         Candidate("t-cloud", "http://c", "cloud")]
    client.distance_km = {"t-near": 1.0, "t-far": 5.0, "t-cloud": 0.5}  # cloud "nearer"
    return client


def test_geo_nearest_takes_the_nearest_and_fails_over_to_the_next() -> None:
    client = _baseline("geo-nearest")
    assert client.choose("probe").task_id == "t-cloud"
    assert client.failed(client.current, "reset").task_id == "t-near"


def test_edge_to_cloud_stays_at_the_edge_until_a_failure_then_the_cloud() -> None:
    client = _baseline("edge-to-cloud")
    assert client.choose("probe").task_id == "t-near"  # the cloud is not an edge choice
    assert client.failed(client.current, "reset").task_id == "t-cloud"
    client.candidates[0].failed = False  # the edge node came back: still the cloud
    assert client.choose("probe").task_id == "t-cloud"


def test_random_draws_among_working_candidates_and_is_seeded() -> None:
    picks = []
    for _ in range(2):
        client = _baseline("random")
        drawn = []
        for _ in range(20):
            client.current = None
            drawn.append(client.choose("probe").task_id)
        picks.append(drawn)
    assert picks[0] == picks[1] and len(set(picks[0])) == 3
    client = _baseline("random")
    first = client.choose("probe")
    again = client.failed(first, "reset")
    assert again is not None and again.task_id != first.task_id


def test_action_params_default_to_empty() -> None:
    assert Action(1.0, "crash", "e01").params == {}


def test_scaling_summary_counts_each_action() -> None:
    assert _scale_summary(["up", "up", "down", "up"]) == "3 up, 1 down"
    assert _scale_summary([]) == ""


def test_spread_counts_the_busiest_node_and_switches_per_user() -> None:
    rows = [{"outcome": "ok", "target": t} for t in ("e1", "e1", "e1", "e2")]
    rows.append({"outcome": "timeout", "target": "e3"})
    got = spread(rows, {"switches": {"u1": 1, "u2": 3}})
    assert got == {"busiest_share": 0.75, "nodes_used": 2, "switches_per_user": 2.0}


def test_co_switches_counts_other_users_moving_to_the_same_replica(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()

    def switch(t: float, target: str, reason: str = "probe", source: str | None = "a") -> dict:
        return {"t": t, "kind": "switch",
                "detail": {"target": target, "reason": reason, "source": source}}

    logs = {"u1": [switch(0.0, "x", source=None), switch(10.0, "r1"), switch(20.0, "r2")],
            "u2": [switch(10.5, "r1"), switch(15.0, "r2", reason="failover")],
            "u3": [switch(30.0, "r1")]}
    for user, events in logs.items():
        (work / f"result-0-armada-{user}.json").write_text(json.dumps({"events": events}))
    got = co_switches(tmp_path, 0, "armada")
    # re-probe switches: u1 r1@10, u1 r2@20, u2 r1@10.5, u3 r1@30; only the two at 10 s pair
    assert got["reprobe_switches"] == 4
    assert got["co_switches"] == pytest.approx(2 / 4)
    # 3 others x (2 x 2 s / 20 s span) / 2 replicas
    assert got["co_switches_chance"] == pytest.approx(3 * 0.2 / 2)
