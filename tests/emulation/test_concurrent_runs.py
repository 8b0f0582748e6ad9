"""Two live runs never share a name prefix, and no run deletes what it did not make.

A live `testbed run` child holds its prefix while a second run in this process is forced
to try the same prefix first; an interface made outside the harness under a run's names
is never built over nor deleted.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from pathlib import Path

import pytest

from testbed.emulation import names
from testbed.emulation.executor import emulated_topology
from testbed.emulation.ledger import Ledger, ifindex, read_ledger
from testbed.errors import EmulationError
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario
from testbed.systems.offloading.driver import DispatchDriver
from tests.emulation.live_run import start_continuum

pytestmark = pytest.mark.emulation


def _forced(monkeypatch: pytest.MonkeyPatch, *prefixes: str) -> None:
    """The next reservation tries these prefixes first, then random ones."""
    original = names.candidates
    monkeypatch.setattr(names, "candidates", lambda: itertools.chain(prefixes, original()))


def _free_prefix() -> str:
    """A prefix no run holds and no interface starts with (not reserved: the test
    makes an interface under it as something outside the harness would)."""
    while True:
        prefix = names.random_prefix()
        if names.reserved_by(prefix) is None and \
                not any(n.startswith(prefix) for n in os.listdir("/sys/class/net")):
            return prefix


def test_second_run_forced_onto_a_live_runs_prefix_gets_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = start_continuum(tmp_path / "a", tmp_path / "ledgers-a")
    try:
        (ledger_a,) = (tmp_path / "ledgers-a").glob("*.jsonl")
        entries = [e for e in read_ledger(ledger_a)[1] if e.kind == "bridge"]
        bridges = {e.data["name"]: e.data["ifindex"] for e in entries}
        prefix_a = entries[0].data["prefix"]
        assert names.reserved_by(prefix_a) == ledger_a.stem

        seen: list[str] = []
        real = DispatchDriver.replay

        def spy(self, topo, *args, **kwargs):
            seen.append(topo.infra.prefix)
            return real(self, topo, *args, **kwargs)

        monkeypatch.setattr(DispatchDriver, "replay", spy)
        _forced(monkeypatch, prefix_a)
        scenario = load_scenario("continuum").with_overrides(duration=2, policies=["jsq"])
        run_scenario(scenario, out=tmp_path / "b", progress=lambda _l: None,
                     ledger_root=tmp_path / "ledgers-b")
        assert seen and seen[0] != prefix_a
        # The first run's bridges are still the very ones it made, and it still runs.
        assert {name: ifindex(name) for name in bridges} == bridges
        assert first.poll() is None
        assert names.reserved_by(prefix_a) == ledger_a.stem
        assert names.reserved_by(seen[0]) is None  # the second gave its prefix back
        first.send_signal(signal.SIGINT)
        rest, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130, rest
    assert all(ifindex(name) is None for name in bridges)
    assert names.reserved_by(prefix_a) is None


def test_an_existing_interface_is_never_built_over_nor_deleted(tmp_path: Path) -> None:
    """A bridge named like the run's first switch exists before the build (made outside
    the harness): the build refuses in one line and the bridge survives, untouched."""
    prefix = _free_prefix()
    foreign = f"{prefix}s0"
    subprocess.run(["ip", "link", "add", foreign, "type", "bridge"], check=True)
    try:
        before = ifindex(foreign)
        ledger = Ledger("foreign-bridge", root=tmp_path / "ledgers")
        scenario = load_scenario("continuum").with_overrides(duration=2, policies=["jsq"])
        errors: list[str] = []
        with pytest.raises(EmulationError, match=f"interface {foreign} already exists") \
                as info, emulated_topology(scenario, ledger, tmp_path / "work", prefix,
                                           lambda _l: None, errors):
            pass
        assert "\n" not in str(info.value)
        assert errors == []
        assert ifindex(foreign) == before
        assert not ledger.path.exists()  # the helpers started before the build are gone
    finally:
        subprocess.run(["ip", "link", "del", foreign], check=False)


def test_reservation_skips_a_prefix_some_interface_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used, spare = _free_prefix(), _free_prefix()
    subprocess.run(["ip", "link", "add", f"{used}x", "type", "bridge"], check=True)
    try:
        ledger = Ledger("skips", root=tmp_path / "ledgers")
        _forced(monkeypatch, used, spare)
        assert names.reserve_prefix(ledger) == spare
        assert names.reserved_by(used) is None
        assert ledger.teardown() == []
        assert names.reserved_by(spare) is None
    finally:
        subprocess.run(["ip", "link", "del", f"{used}x"], check=False)
