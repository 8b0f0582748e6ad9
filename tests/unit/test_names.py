"""Run prefixes are reserved on the machine; interface names are checked before a build.

Real lock files and real owner processes under a temporary prefix folder; no root needed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emulation import names
from testbed.emulation.ledger import Ledger, clean_stale
from testbed.errors import EmulationError
from testbed.scenario.model import Link, Node, Topology


def _forced(monkeypatch: pytest.MonkeyPatch, *prefixes: str) -> None:
    """Make the reservation try exactly these prefixes, in this order."""
    monkeypatch.setattr(names, "candidates", lambda: iter(prefixes))


def test_two_runs_forced_onto_one_prefix_get_two(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "prefixes"
    first = Ledger("first", root=tmp_path / "ledgers")
    second = Ledger("second", root=tmp_path / "ledgers")
    _forced(monkeypatch, "tbaaaa", "tbaaaa", "tbaaab")
    assert names.reserve_prefix(first, root=root) == "tbaaaa"
    assert names.reserve_prefix(second, root=root) == "tbaaab"
    assert names.reserved_by("tbaaaa", root=root) == "first"
    assert second.teardown() == [] and first.teardown() == []
    assert list(root.iterdir()) == []  # both given back once their ledgers were removed


def test_no_free_prefix_is_a_clear_error(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "prefixes"
    holder = Ledger("holder", root=tmp_path / "ledgers")
    _forced(monkeypatch, "tbaaaa")
    names.reserve_prefix(holder, root=root)
    late = Ledger("late", root=tmp_path / "ledgers")
    _forced(monkeypatch, "tbaaaa", "tbaaaa")
    with pytest.raises(EmulationError, match="no free run prefix after 2 tries"):
        names.reserve_prefix(late, root=root)
    assert not late.path.exists()  # the empty ledger went with the failure
    # A caller's ledger that already lists something (calibration's scratch folder) is
    # left to the caller's own teardown: nothing of it is removed behind its back.
    busy = Ledger("busy", root=tmp_path / "ledgers")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    busy.record("dir", path=str(scratch))
    _forced(monkeypatch, "tbaaaa")
    with pytest.raises(EmulationError, match="no free run prefix"):
        names.reserve_prefix(busy, root=root)
    assert busy.path.exists() and scratch.is_dir()
    assert busy.teardown() == [] and not scratch.exists()
    assert names.reserved_by("tbaaaa", root=root) == "holder"
    holder.teardown()


KILLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    from testbed.emulation import names
    from testbed.emulation.ledger import Ledger
    ledger = Ledger("killed", root=Path(sys.argv[1]))
    ledger.record("dir", path=sys.argv[3])
    print(names.reserve_prefix(ledger, root=Path(sys.argv[2])), flush=True)
    sys.stdin.read()
""")


def test_killed_runs_prefix_stays_reserved_until_clean(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ledgers, root, scratch = tmp_path / "ledgers", tmp_path / "prefixes", tmp_path / "scratch"
    scratch.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", KILLED, str(ledgers), str(root),
                              str(scratch)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        prefix = owner.stdout.readline().strip()
    finally:
        owner.kill()
        owner.wait()
    assert prefix.startswith("tb") and len(prefix) == 6
    # Dead owner, ledger not cleaned: the prefix is neither freed nor handed out again.
    assert names.release_stale_prefixes(root) == []
    _forced(monkeypatch, prefix, "tbaaac")
    assert names.reserve_prefix(Ledger("next", root=ledgers), root=root) == "tbaaac"
    assert clean_stale(ledgers) == {"killed": []}
    assert names.release_stale_prefixes(root) == [prefix]
    assert names.reserved_by(prefix, root=root) is None


def test_random_prefixes_fit_and_avoid_the_calibration_family() -> None:
    drawn = {names.random_prefix() for _ in range(500)}
    assert all(len(p) == 6 and p[:2] == "tb" and p[2] != "t" for p in drawn)
    assert all(set(p[2:]) <= set(names.ALPHABET) for p in drawn)
    assert len(drawn) > 490


def _star(hosts: int, switches: int = 1) -> Topology:
    nodes = [Node(f"s{i}", "switch", runtime=None) for i in range(switches)]
    nodes += [Node(f"h{i}", "server") for i in range(hosts)]
    links = [Link(f"h{i}", "s0") for i in range(hosts)]
    return Topology(nodes=tuple(nodes), links=tuple(links))


def test_interface_plan_names_every_end() -> None:
    plan = names.interface_plan(_star(2), "tbabcd")
    assert plan.switches == {"s0": "tbabcds0"}
    assert plan.links == (("h0-eth0", "tbabcds0-e0"), ("h1-eth0", "tbabcds0-e1"))
    assert plan.root_names == ["tbabcds0", "tbabcds0-e0", "tbabcds0-e1"]


def test_too_long_interface_name_is_refused_before_a_build() -> None:
    """A host with 1001 links: its port 1000 would be ``edgenode-eth1000`` (16)."""
    nodes = [Node("edgenode", "server"), *(Node(f"s{i}", "switch", runtime=None)
                                           for i in range(1001))]
    links = [Link("edgenode", f"s{i}") for i in range(1001)]
    with pytest.raises(EmulationError, match=r"'edgenode-eth1000' \(port 1000 of node "
                                             r"'edgenode'.* 16 characters; Linux allows 15"
                       ) as info:
        names.interface_plan(Topology(nodes=tuple(nodes), links=tuple(links)), "tbabcd")
    assert "\n" not in str(info.value)
    with pytest.raises(EmulationError, match="'tbtoolong1s0-e10'"):  # a prefix too long
        names.interface_plan(_star(11), "tbtoolong1")


def test_switch_within_the_port_limit_stays_one_bridge() -> None:
    plan = names.interface_plan(_star(4), "tbabcd", max_ports=4)
    assert plan.fabrics == {}
    assert plan.bridges == ["tbabcds0"]
    assert plan.attach == ((None, "tbabcds0"),) * 4


def test_switch_past_the_port_limit_becomes_a_fabric_of_leaves() -> None:
    plan = names.interface_plan(_star(6), "tbabcd", max_ports=3)
    fabric = plan.fabrics["s0"]
    assert fabric.root == plan.switches["s0"] == "tbabcds0"
    assert fabric.leaves == ("tbabcds0f0", "tbabcds0f1", "tbabcds0f2")
    assert fabric.trunks == (("tbabcds0f0-t", "tbabcds0-e0"), ("tbabcds0f1-t", "tbabcds0-e1"),
                             ("tbabcds0f2-t", "tbabcds0-e2"))
    # two hosts per leaf (its third port is the trunk), in link order
    assert [b for _, b in plan.attach] == ["tbabcds0f0", "tbabcds0f0", "tbabcds0f1",
                                           "tbabcds0f1", "tbabcds0f2", "tbabcds0f2"]
    assert [n for _, n in plan.links] == ["tbabcds0f0-e0", "tbabcds0f0-e1", "tbabcds0f1-e0",
                                          "tbabcds0f1-e1", "tbabcds0f2-e0", "tbabcds0f2-e1"]
    assert set(plan.root_names) >= {"tbabcds0", "tbabcds0f1", "tbabcds0f2-t", "tbabcds0-e2"}
    assert len(plan.root_names) == len(set(plan.root_names)) == 4 + 6 + 6


def test_thousand_hosts_past_one_bridge_fill_leaves_of_the_default_size() -> None:
    plan = names.interface_plan(_star(2500), "tbabcd")
    leaves = plan.fabrics["s0"].leaves
    assert len(leaves) == 3
    per_leaf = [sum(1 for _, b in plan.attach if b == leaf) for leaf in leaves]
    assert per_leaf == [names.BRIDGE_MAX_PORTS - 1] * 2 + [2500 - 2 * 999]
    assert max(len(n) for n in plan.root_names) <= names.IFNAMSIZ
    assert names.interface_plan(_star(2500), "tbabcd", max_ports=None).fabrics == {}


def test_bad_port_limit_and_too_many_leaves_are_refused() -> None:
    with pytest.raises(EmulationError, match="max_ports: expected an integer of at least 3"):
        names.interface_plan(_star(4), "tbabcd", max_ports=2)
    with pytest.raises(EmulationError, match="need 5 leaf bridges, more than a root bridge "
                                             "of 3 ports"):
        names.interface_plan(_star(10), "tbabcd", max_ports=3)
