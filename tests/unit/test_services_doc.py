"""``docs/services.md``'s table of entry points names every registered program with the
module the executor starts, so a reader finds a service wherever its module lives."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from testbed.registry import HARNESS_PROGRAMS, systems

DOC = Path(__file__).resolve().parents[2] / "docs" / "services.md"
ROW = re.compile(r"^\| `([a-z_.]+)` \| `python -m ([a-z_.]+)` \| (.+) \|$")


def documented() -> dict[str, tuple[str, str]]:
    """Program -> (module, system) from the table."""
    return {m.group(1): (m.group(2), m.group(3))
            for line in DOC.read_text().splitlines() if (m := ROW.match(line))}


def test_every_program_is_listed_with_the_module_it_runs() -> None:
    registered = {p.name: (p.module, s.name) for s in systems().values() for p in s.programs}
    table = documented()
    assert {name: module for name, (module, _) in table.items() if name in registered} == \
        {name: module for name, (module, _) in registered.items()}
    assert {name: system for name, (_, system) in table.items() if name in registered} == \
        {name: system for name, (_, system) in registered.items()}
    for program in HARNESS_PROGRAMS:
        assert table[program.name][0] == program.module
    assert set(table) == set(registered) | {p.name for p in HARNESS_PROGRAMS}


def test_every_listed_module_can_be_run() -> None:
    for module, _ in documented().values():
        spec = importlib.util.find_spec(module)
        assert spec is not None, module
        if spec.submodule_search_locations is not None:  # a package runs its __main__
            assert importlib.util.find_spec(f"{module}.__main__") is not None, module


def test_the_table_check_can_fail() -> None:
    assert ROW.match("| `tier_server` | `python -m nodes.tier_server` | offloading |")
    assert not ROW.match("| tier_server | python -m nodes.tier_server | offloading |")
