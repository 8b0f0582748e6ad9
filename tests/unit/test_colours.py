"""policy_colour: one colour per name, whatever the order, process or plot."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from testbed.registry import systems
from testbed.reports.colours import PALETTE, SHARED, policy_colour

NAMES = ["random", "jsq", "hybrid", "some-new-policy", "policy/with spaces", "ünïcode"]


def test_colour_is_a_palette_hex_colour():
    for name in NAMES:
        colour = policy_colour(name)
        assert re.fullmatch(r"#[0-9a-f]{6}", colour)
        assert colour in PALETTE


def test_colour_does_not_depend_on_order_or_company():
    forward = {n: policy_colour(n) for n in NAMES}
    backward = {n: policy_colour(n) for n in reversed(NAMES)}
    alone = {n: policy_colour(n) for n in NAMES[2:3]}
    assert forward == backward
    assert alone == {NAMES[2]: forward[NAMES[2]]}


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_colour_is_the_same_in_another_process(seed):
    code = ("from testbed.reports.colours import policy_colour; "
            f"print(','.join(policy_colour(n) for n in {NAMES!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
    assert out.strip().split(",") == [policy_colour(n) for n in NAMES]


def test_fixed_colours_are_palette_entries():
    assert set(SHARED.values()) <= set(PALETTE)
    for system in systems().values():
        assert set(system.colours.values()) <= set(PALETTE), system.name
        assert set(system.colours) <= set(system.policies), system.name


def test_the_policies_of_one_shipped_system_have_distinct_colours():
    for system in systems().values():
        fixed = [p for p in system.policies if p in system.colours or p in SHARED]
        colours = [policy_colour(p) for p in fixed]
        assert len(fixed) >= 2, system.name
        assert len(set(colours)) == len(colours), system.name
        assert all(policy_colour(p) == system.colours[p] for p in system.colours)
