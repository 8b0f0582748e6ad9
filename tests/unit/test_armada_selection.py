"""The candidate-list algorithm (the paper's Algorithm 1, ``nodes.armada.selection``)."""

from __future__ import annotations

from nodes.armada.geo import bounds, encode
from nodes.armada.selection import Replica, select_candidates

USER = (40.1000, -88.2000)  # precision-5 cells here are about 4.9 km x 4.9 km


def ids(candidates: list) -> list[str]:
    return [c.replica.task_id for c in candidates]


def test_node_across_a_cell_edge_stays_in() -> None:
    """A nearby node in a neighbouring cell is a candidate like one in the user's cell."""
    cell = bounds(encode(*USER, 5))
    user = (USER[0], cell.lon_max - 0.01)  # near the cell's east edge
    across = Replica("across", USER[0], cell.lon_max + 0.02)  # ~2.5 km away, next cell
    assert encode(across.lat, across.lon, 5) != encode(*user, 5)
    far = Replica("far", 41.5, -87.6)  # Chicago, ~160 km
    got = select_candidates([far, across], *user)
    assert ids(got)[0] == "across" and got[0].reason == "area"
    assert got[1].replica.task_id == "far" and got[1].reason != "area"


def test_inside_the_area_distance_does_not_decide() -> None:
    """The nearest node is not preferred over a farther, less utilised one in the area."""
    nearest = Replica("nearest", 40.1001, -88.2001, utilisation=0.5)
    farther = Replica("farther", 40.1100, -88.1600, utilisation=0.05)
    got = select_candidates([nearest, farther], *USER, topn=1)
    assert ids(got) == ["farther"]
    # Utilisation ranks in steps of 0.1: small differences leave distance to decide.
    nearest = Replica("nearest", 40.1001, -88.2001, utilisation=0.12)
    farther = Replica("farther", 40.1100, -88.1600, utilisation=0.11)
    assert ids(select_candidates([farther, nearest], *USER, topn=1)) == ["nearest"]


def test_overloaded_replicas_are_excluded() -> None:
    busy = Replica("busy", 40.1001, -88.2001, utilisation=0.95)
    others = [Replica(f"r{i}", 40.10 + i * 0.01, -88.19, utilisation=0.3) for i in range(3)]
    got = select_candidates([busy, *others], *USER)
    assert "busy" not in ids(got) and len(got) == 3


def test_overloaded_replica_beats_none() -> None:
    busy = Replica("busy", 40.1001, -88.2001, utilisation=0.95)
    got = select_candidates([busy], *USER, overload=0.8)
    assert ids(got) == ["busy"] and got[0].reason == "overloaded"


def test_affiliated_replicas_come_first() -> None:
    plain = Replica("plain", 40.1001, -88.2001)
    same_isp = Replica("isp", 40.1200, -88.1700, tags=frozenset({"isp-a"}))
    other_isp = Replica("other", 40.1100, -88.1800, tags=frozenset({"isp-b"}))
    assert ids(select_candidates([plain, other_isp, same_isp], *USER, tags=["isp-a"]))[0] == "isp"
    assert ids(select_candidates([plain, other_isp, same_isp], *USER, topn=1)) == ["plain"]


def test_at_most_topn_candidates_without_duplicates() -> None:
    replicas = [Replica(f"r{i}", 40.09 + i * 0.002, -88.2) for i in range(7)]
    got = select_candidates(replicas, *USER)
    assert len(got) == 3 and len(set(ids(got))) == 3
    assert len(select_candidates(replicas, *USER, topn=5)) == 5


def test_fallbacks_widen_then_take_anything() -> None:
    near = Replica("near", 40.1001, -88.2001)
    region = Replica("region", 40.6, -88.9)  # ~80 km: outside the precision-5 area
    antipode = Replica("antipode", -40.1, 91.8)
    got = select_candidates([antipode, region, near], *USER)
    assert ids(got) == ["near", "region", "antipode"]
    assert got[0].reason == "area"
    assert got[1].reason.startswith("wider:")
    assert got[2].reason == "anywhere"
    assert got[0].distance_km < 1 < got[1].distance_km < got[2].distance_km


def test_only_running_replicas_and_empty_list() -> None:
    stopped = Replica("stopped", 40.1001, -88.2001, running=False)
    assert select_candidates([stopped], *USER) == []
    assert select_candidates([], *USER) == []


def test_unmeasured_replica_counts_as_idle() -> None:
    fresh = Replica("fresh", 40.1200, -88.1700, utilisation=None)
    used = Replica("used", 40.1001, -88.2001, utilisation=0.4)
    assert ids(select_candidates([used, fresh], *USER, topn=1)) == ["fresh"]
