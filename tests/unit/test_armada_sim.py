"""The Armada simulator (:mod:`testbed.systems.armada.sim`) and its calibration, on small fleets.

A hand-made calibration (constant or two-level service times) stands in for the
measured one, so latencies can be computed by hand; the decision code is the emulation's
own (Selection, BaselineSelection, answer_candidates, plan_scaling, rank_nodes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testbed.errors import TestbedError
from testbed.scenario import scenario_from_dict
from testbed.systems.armada.sim import Link, Network
from testbed.systems.armada.sim_calibration import (
    Calibration,
    ShareSamples,
    load_calibration,
    parse_calibration,
    quantile,
)
from testbed.systems.armada.sim_replay import fleet_params, replay_one, sim_links

FLEET = {"nodes": 4, "users": 3, "node_cores": [0.1, 0.12, 0.15], "duration": 20.0,
         "seed": 3}


def calibration(frame_s: float = 0.05, startup_s: float = 2.0, probe_s: float = 0.01
                ) -> Calibration:
    """Constant times at every share (the simulator draws a request's demand at one
    core and throttles it with the node's quota)."""
    shares = [ShareSamples(0.1, (startup_s,), (frame_s,), (probe_s,)),
              ShareSamples(1.0, (startup_s,), (frame_s,), (probe_s,))]
    return Calibration("<test>", 10_000.0, 2_000.0, tuple(shares), {"cpus": 2})


def fleet_scenario(policies: list[str], **params: Any) -> Any:
    return scenario_from_dict({"name": "sim-fleet", "policies": policies,
                               "build": {"builder": "armada-fleet",
                                         "params": {**FLEET, **params}}})


def frames_of(scenario: Any, fps: float = 1.0) -> dict[str, list[dict[str, Any]]]:
    """One frame per second per user, like the frame-stream generator with phase zero."""
    out: dict[str, list[dict[str, Any]]] = {}
    task = 0
    for client in scenario.clients():
        out[client.name] = []
        for k in range(int(scenario.duration * fps)):
            out[client.name].append({"task_id": task, "arrival": k / fps, "size": 0.0054,
                                     "cls": "frame"})
            task += 1
    return out


def replay(policies: list[str], policy: str, cal: Calibration | None = None,
           **params: Any) -> dict[str, Any]:
    scenario = fleet_scenario(policies, **params)
    return replay_one(scenario, policy, 0, cal or calibration(), frames_of(scenario))


# ------------------------------------------------------------------ calibration


def test_quantiles_and_interpolation_between_shares() -> None:
    assert quantile((1.0, 3.0), 0.5) == pytest.approx(2.0)
    assert quantile((1.0, 2.0, 4.0), 1.0) == 4.0
    cal = Calibration("<t>", 1.0, 1.0, (ShareSamples(0.1, (1.0,), (0.1,), (0.01,)),
                                        ShareSamples(0.4, (1.0,), (0.025,), (0.01,))), {})
    # log-log: halfway between 0.1 and 0.4 cores (0.2) is halfway between the log-times
    assert cal.service_s("frame", 0.2, 0.5) == pytest.approx(0.05)
    assert cal.service_s("frame", 0.05, 0.5) == 0.1  # below the range: the smallest share
    assert cal.service_s("frame", 2.0, 0.5) == 0.025  # above it: the largest
    with pytest.raises(TestbedError, match="no samples of 'x'"):
        cal.service_s("x", 0.2, 0.5)


@pytest.mark.parametrize(("doc", "field"), [
    ([], "expected a JSON object"),
    ({"format": 2}, "format: expected 1"),
    ({"format": 1, "frame": {"bytes": 1, "probe_small_bytes": 1}, "shares": []},
     "shares: expected a non-empty list"),
    ({"format": 1, "frame": {"bytes": -1, "probe_small_bytes": 1},
      "shares": [{"cores": 1, "startup_s": [1], "frame_s": [1], "probe_small_s": [1]}]},
     "frame.bytes: expected a positive number"),
    ({"format": 1, "frame": {"bytes": 1, "probe_small_bytes": 1},
      "shares": [{"cores": 1, "startup_s": [1], "frame_s": [0, 1], "probe_small_s": [1]}]},
     r"shares\[0\].frame_s: expected a non-empty list of positive seconds"),
])
def test_a_bad_calibration_names_its_file_and_field(doc: Any, field: str) -> None:
    with pytest.raises(TestbedError, match=f"cal.json: {field}"):
        parse_calibration(doc, Path("cal.json"))


def test_a_missing_or_broken_calibration_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="missing.json: cannot read the Armada calibration"):
        load_calibration(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(TestbedError, match="broken.json: expected JSON"):
        load_calibration(broken)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"format": 1, "frame": {"bytes": 9000, "probe_small_bytes": 2000},
                                "shares": [{"cores": 0.1, "startup_s": [3, 2],
                                            "frame_s": [0.2, 0.1], "probe_small_s": [0.01]}]}))
    assert load_calibration(good).shares[0].frame_s == (0.1, 0.2)


# ------------------------------------------------------------------ the model


def test_network_times_follow_the_shortest_delay_path() -> None:
    net = Network([Link("u", "s", 0.001, 8e6), Link("s", "n", 0.002, 80e6),
                   Link("u", "n", 0.050, None)])
    # 1000 bytes: 1 ms + 1 ms of transmission, then 2 ms + 0.1 ms: the switched path wins
    assert net.one_way("u", "n", 1000) == pytest.approx(0.0041)
    assert net.one_way("n", "u") == pytest.approx(0.003)
    with pytest.raises(TestbedError, match="no path between u and x"):
        net.one_way("u", "x")


def test_every_frame_gets_one_row_and_an_idle_frame_costs_its_path_and_service() -> None:
    scenario = fleet_scenario(["armada"], node_cores=[1.0, 2.0], host_cores=None)
    done = replay_one(scenario, "armada", 0, calibration(), frames_of(scenario))
    rows = done["rows"]
    assert len(rows) == 3 * 20
    assert all(r["outcome"] == "ok" for r in rows)
    from testbed.systems.armada.sim import Network as Net

    net = Net(sim_links(scenario))
    for user in ("u01", "u02", "u03"):
        mine = [r for r in rows if r["client"] == user]
        node = mine[-1]["target"]
        expected = net.one_way(user, node, 10_000.0) + 0.05 + net.one_way(node, user)
        fastest = min(r["latency_s"] for r in mine if r["target"] == node)
        assert fastest == pytest.approx(expected, abs=1e-9)
        assert all(r["latency_s"] >= r["service_s"] > 0 for r in mine)
    details = done["details"]
    assert set(details["picks"]) == {"u01", "u02", "u03"}
    assert all(n >= 3 for n in details["rounds"].values())  # first round + re-probes


def test_a_replay_is_reproducible_and_its_seeds_are_the_emulations() -> None:
    first, second = replay(["armada"], "armada"), replay(["armada"], "armada")
    assert first["rows"] == second["rows"]
    assert first["details"]["picks"] == second["details"]["picks"]


def test_probes_steer_the_sdk_off_slow_replicas_which_geo_nearest_keeps() -> None:
    # one-core nodes; from 2 s on, a burner next to u01's replica halves its speed, so a
    # frame of 0.3 s takes 0.6 s there
    slow = calibration(frame_s=0.3)
    load = [{"at": 2.0, "action": "load", "target": "serving:u01", "params": {"cpu": 0.5}}]
    runs = {p: replay(["armada-light", "geo-nearest"], p, cal=slow, seed=1,
                      node_cores=[1.0], replica_cpu=1.0, host_cores=None, actions=load)
            for p in ("armada-light", "geo-nearest")}
    on_slow = {p: sum(r["service_s"] > 0.45 for r in d["rows"]) for p, d in runs.items()}
    assert on_slow["geo-nearest"] > 0  # some user's nearest replica is a slow one
    assert on_slow["armada-light"] < on_slow["geo-nearest"]
    u01 = {p: [r["latency_s"] for r in d["rows"] if r["client"] == "u01"
               and r["dispatch_model"] > 4.0] for p, d in runs.items()}
    mean = {p: sum(v) / len(v) for p, v in u01.items()}
    assert mean["armada-light"] < mean["geo-nearest"]
    # both register as users every round (the Application Manager sees them alike)
    assert all(n >= 3 for d in runs.values() for n in d["details"]["rounds"].values())


def test_a_crash_of_the_serving_node_loses_no_frame_with_the_sdk() -> None:
    actions = [{"at": 8.0, "action": "crash", "target": "serving:u01"}]
    done = replay(["armada"], "armada", actions=actions)
    rows = [r for r in done["rows"] if r["client"] == "u01"]
    crashed = done["details"]["applied"][0]["target"]
    assert crashed is not None and done["details"]["applied"][0]["error"] is None
    assert all(r["outcome"] == "ok" for r in rows)
    after = [r for r in rows if r["dispatch_model"] > 8.5]
    assert after and all(r["target"] != crashed for r in after)
    assert done["details"]["switches"]["u01"] >= 2  # the first pick, then away from the crash


def test_a_leave_times_requests_out_and_the_spinner_replaces_the_replica() -> None:
    actions = [{"at": 6.0, "action": "leave", "target": "serving:u01"}]
    done = replay(["geo-nearest"], "geo-nearest", actions=actions)
    left = done["details"]["applied"][0]["target"]
    rows = [r for r in done["rows"] if r["client"] == "u01"]
    late = [r for r in rows if 6.0 <= r["dispatch_model"] < 7.0]
    # the frame sent into the departed node waited for the 2 s request timeout
    assert late and late[0]["outcome"] == "ok" and late[0]["latency_s"] > 2.0
    after = done["details"]["replicas_after"]
    assert all(v["node_id"] != left for v in after if v["status"] in ("starting", "running"))


def test_users_crowding_a_site_make_the_manager_scale_up() -> None:
    done = replay(["armada"], "armada", users_per_replica=1, users=6)
    ups = [e for e in done["details"]["scaling_after"] if e["action"] == "up"]
    assert ups and all(e["reason"] in ("users", "load") for e in ups)
    running = [v for v in done["details"]["replicas_before"] if v["status"] == "running"]
    assert len(running) > 3


def test_only_fleets_and_the_simulated_policies_replay() -> None:
    hand = fleet_scenario(["armada"])
    hand.raw["build"] = {"builder": "armada-storage", "params": {}}
    with pytest.raises(TestbedError, match="replays scenarios built by armada-fleet only"):
        fleet_params(hand)
    scenario = fleet_scenario(["server-reconnect"])
    with pytest.raises(TestbedError, match="policy 'server-reconnect'"):
        replay_one(scenario, "server-reconnect", 0, calibration(), frames_of(scenario))


def test_a_fleet_runs_through_testbed_run_on_the_simulator(tmp_path: Path) -> None:
    """The generic path: the committed calibration, the materialised trace, a results
    folder like the emulation's (rows, metadata with each stream's details)."""
    from testbed.analysis.traces import read_traces
    from testbed.runner import run_scenario

    scenario = fleet_scenario(["armada", "geo-nearest"])
    out = run_scenario(scenario, out=tmp_path / "run", executor="sim",
                       progress=lambda _line: None)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["executor"] == "sim" and not meta.get("failed")
    streams = meta["driver"]["streams"]
    assert [s["policy"] for s in streams] == ["armada", "geo-nearest"]
    assert meta["driver"]["calibration"].endswith("armada-calibration.json")
    df = read_traces(out)
    for policy in ("armada", "geo-nearest"):
        mine = df[df["policy"] == policy]
        assert len(mine) == 3 * 20  # every frame of the trace, once
        assert set(mine["client"]) == {"u01", "u02", "u03"}


# ------------------------------------------------------------------ spreading near-equal users


def _probed(near_equal: float, seed: int, current: str | None = None) -> str | None:
    from nodes.armada.sdk.choice import Selection

    sel = Selection("sim://b", "det", 40.0, -88.0, probe_payload=b"", seed=seed,
                    near_equal=near_equal)
    sel.adopt({"candidates": [{"task_id": t, "url": f"sim://{t}"} for t in ("a", "b", "c")]})
    if current is not None:
        sel.current = next(c for c in sel.candidates if c.task_id == current)
    sel.probed([(c, lat, None) for c, lat in zip(sel.candidates, (0.100, 0.105, 0.2),
                                                   strict=True)])
    return sel.current.task_id if sel.current else None


def test_near_equal_spreads_a_move_over_candidates_that_probed_alike() -> None:
    assert {_probed(0.0, seed) for seed in range(20)} == {"a"}  # off: always the fastest
    assert {_probed(0.1, seed) for seed in range(20)} == {"a", "b"}  # never the slow "c"
    assert {_probed(0.1, seed, current="b") for seed in range(20)} == {"b"}  # no move
    with pytest.raises(ValueError, match="near_equal must be in"):
        _probed(1.0, 0)


def test_armada_policy_entries_take_near_equal_only_for_the_sdk() -> None:
    from testbed.systems.armada.model import check_policy_params

    assert check_policy_params("armada", {"near_equal": 0.2}) == {"near_equal": 0.2}
    with pytest.raises(ValueError, match=r"params.near_equal: expected a number in \[0, 1\)"):
        check_policy_params("armada-light", {"near_equal": 1.5})
    with pytest.raises(ValueError, match="params.x: expected near_equal"):
        check_policy_params("armada", {"x": 1})
    with pytest.raises(ValueError, match="params.near_equal: expected task_runtime, "
                       "task_images .policy geo-nearest"):
        check_policy_params("geo-nearest", {"near_equal": 0.1})


def test_every_policy_entry_may_set_its_deployment() -> None:
    from testbed.systems.armada.model import check_policy_params, deployment_of

    got = check_policy_params("geo-nearest", {"task_runtime": "docker",
                                              "task_images": "fresh"})
    assert got == {"task_runtime": "docker", "task_images": "fresh"}
    mixed = check_policy_params("armada", {"near_equal": 0.1, "task_runtime": "process"})
    assert deployment_of(mixed) == {"task_runtime": "process"}
    assert deployment_of({"near_equal": 0.1}) == {}
    with pytest.raises(ValueError, match="params.task_images: expected one of cached, "
                       "fresh, found 'warm'"):
        check_policy_params("armada", {"task_images": "warm"})


def test_a_labelled_sdk_entry_replays_with_its_parameters() -> None:
    scenario = scenario_from_dict({
        "name": "spread", "build": {"builder": "armada-fleet", "params": FLEET},
        "policies": ["armada", {"name": "armada", "label": "armada-spread",
                                "params": {"near_equal": 0.5}}]})
    plain = replay_one(scenario, "armada", 0, calibration(), frames_of(scenario))
    spread = replay_one(scenario, "armada-spread", 0, calibration(), frames_of(scenario))
    assert {r["policy"] for r in spread["rows"]} == {"armada-spread"}
    assert len(spread["rows"]) == len(plain["rows"])


def test_the_cfs_quota_throttles_sustained_load_only() -> None:
    from testbed.systems.armada.sim import CFS_PERIOD_S, cfs_finish

    # a quarter of a core: 25 ms per 100 ms period; 12 ms alone runs at one core's speed
    end, period_end, used = cfs_finish(0.0, 0.012, 0.25, 0.0, 0.0)
    assert end == pytest.approx(0.012) and period_end == pytest.approx(CFS_PERIOD_S)
    # two more back to back: the second fits (24 ms), the third waits for the next period
    end, period_end, used = cfs_finish(end, 0.012, 0.25, period_end, used)
    assert end == pytest.approx(0.024)
    end, period_end, used = cfs_finish(end, 0.012, 0.25, period_end, used)
    assert end == pytest.approx(0.1 + 0.011) and used == pytest.approx(0.011)
    # after idle periods the quota is whole again
    end, _, _ = cfs_finish(1.05, 0.02, 0.25, period_end, used)
    assert end == pytest.approx(1.07)
    assert cfs_finish(0.0, 0.5, 1.0, 0.0, 0.0)[0] == pytest.approx(0.5)


def test_replayed_back_to_back_the_quota_model_gives_the_measured_shares() -> None:
    """The calibration measured requests back to back at each share; the model, fed the
    one-core demands in the same way, gives each share's measured median within one
    quota period where the quota binds (at most 0.25 cores) and its mean within 50 %
    (the model is pessimistic: the kernel's 5 ms quota slices let a group run a little
    past its quota)."""
    from statistics import median

    from testbed.systems.armada.sim import CFS_PERIOD_S
    from testbed.systems.armada.sim_quota_check import check, table

    rows = check(load_calibration())
    assert len(table(rows)) == len(rows) + 2
    for row in rows:
        if row.cores > 0.25:
            continue
        assert abs(median(row.modelled) - median(row.measured)) < CFS_PERIOD_S, row.cores
        mean_took = sum(row.modelled) / len(row.modelled)
        mean_measured = sum(row.measured) / len(row.measured)
        assert mean_took == pytest.approx(mean_measured, rel=0.5), row.cores
