"""Armada: re-selection under background load (``armada-load``).

Background (non-Armada) CPU load hits the node serving a user at seeded random periods;
how long the SDK's periodic probing takes to move the user, and the latency before, on
the loaded node and after moving. Report: ``docs/results/armada/load.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.experiments.emulated import host_line, report_header
from testbed.experiments.sizes import size_plan
from testbed.systems.armada.builders import Fleet
from testbed.systems.armada.control import Progress
from testbed.systems.armada.fleet import (
    REPROBE_S,
    SMALL_NODES,
    Action,
    run_fleet,
)
from testbed.systems.armada.fleet_report import fleet_json, fleet_setup, trace_rows
from testbed.systems.armada.verdicts import Conclusion, count_of, plural, record_claims, verdict

# ------------------------------------------------------------------ background load


@dataclasses.dataclass(frozen=True)
class LoadSize:
    nodes: int
    users: int
    episodes: int
    episode_s: float
    duration_s: float
    cpu: float = 0.5  # share of the machine the load asks for; the node's limit caps it
    fps: float = 1.0
    node_cores: tuple[float, ...] = SMALL_NODES


LOAD_SIZES = {"small": LoadSize(nodes=3, users=2, episodes=1, episode_s=14.0, duration_s=26.0),
              "full": LoadSize(nodes=4, users=3, episodes=4, episode_s=15.0, duration_s=110.0)}


def load_schedule(episodes: int, episode_s: float, duration_s: float, seed: int,
                  cpu: float, user: str = "u01") -> list[Action]:
    """``episodes`` loads of ``episode_s`` on the node serving ``user``, at seeded random
    instants with at least 5 s without load between them and after the last."""
    rng = np.random.default_rng([seed, 41])
    free = duration_s - episodes * (episode_s + 5.0) - 3.0
    if free < 0:
        raise TestbedError(f"load: {episodes} episodes of {episode_s:g} s do not fit in "
                           f"{duration_s:g} s")
    gaps = np.diff(np.sort(rng.uniform(0, free, episodes)), prepend=0.0)
    actions, at = [], 3.0
    for gap in gaps:
        at += float(gap)
        actions += [Action(round(at, 2), "load", f"serving:{user}", {"cpu": cpu}),
                    Action(round(at + episode_s, 2), "load", "last:load", {"cpu": 0.0})]
        at += episode_s + 5.0
    return actions


def run_load(size: str, out: Path, progress: Progress = print,
             ledger_root: Path | None = None, task_runtime: str = "process") -> Path:
    """Background load on u01's serving node during one SDK stream (module docstring);
    ``task_runtime``: how Captains run replicas (``process`` or ``docker``)."""
    plan = size_plan(size, LOAD_SIZES)
    fleet = Fleet(nodes=plan.nodes, users=plan.users, fps=plan.fps, node_cores=plan.node_cores,
                  duration=plan.duration_s, task_runtime=task_runtime)
    actions = load_schedule(plan.episodes, plan.episode_s, plan.duration_s, fleet.seed,
                            plan.cpu)
    fleet = dataclasses.replace(fleet, actions=tuple(a.to_event() for a in actions))
    run_fleet(fleet, ["armada"], out, "armada-load", size, progress, ledger_root)
    return out


def load_episodes(run: Path, user: str = "u01") -> list[dict[str, Any]]:
    """Per load episode: the loaded node, how long until ``user``'s frames were served
    elsewhere (None: never during the episode), and latency before / during / after."""
    fleet = fleet_json(run)
    applied = fleet["streams"][0]["applied"]
    rows = sorted((r for r in trace_rows(run) if r["client"] == user and r["outcome"] == "ok"),
                  key=lambda r: r["dispatch_wall"])
    found = []
    for on, off in zip(applied[0::2], applied[1::2], strict=False):
        node, start, end = on["target"], on["at"], off["at"]
        during = [r for r in rows if start <= r["dispatch_wall"] < end]
        moved = next((r for r in during if r["target"] != node), None)
        before = [r for r in rows if start - 5.0 <= r["dispatch_wall"] < start]
        stayed = [r for r in during if moved is None or r["dispatch_wall"] < moved["dispatch_wall"]]

        def mean(part: list[dict[str, Any]]) -> float | None:
            return float(np.mean([r["latency_s"] for r in part]) * 1e3) if part else None

        found.append({"node": node, "start": start, "end": end,
                      "moved_after_s": None if moved is None else moved["dispatch_wall"] - start,
                      "moved_to": None if moved is None else moved["target"],
                      "mean_before_ms": mean(before), "mean_on_loaded_ms": mean(stayed),
                      "mean_after_move_ms": mean([r for r in during if moved is not None
                                                  and r["dispatch_wall"] >= moved["dispatch_wall"]])})
    return found


LOAD_CLAIM = ("When background (non-Armada) load hits the serving node, the SDK's periodic "
              "end-to-end probing detects the slowdown and moves the user to a better node; "
              "a replica's own status alone would not show it.")
LOAD_RULE = ("holds for an episode when the user's frames went to another node before the "
             "load ended and were answered faster there than on the loaded node; holds when "
             "it does for every episode")


def _episode_ok(e: Mapping[str, Any]) -> bool:
    """Moved off the loaded node during the episode, and faster after the move."""
    return (e["moved_after_s"] is not None and e["mean_after_move_ms"] is not None
            and (e["mean_on_loaded_ms"] is None
                 or e["mean_after_move_ms"] < e["mean_on_loaded_ms"]))


def move_bound_s(fps: float) -> float:
    """The longest a move can take when the SDK learns of the load at its next probe
    round: the longest re-probe period plus one frame period."""
    return REPROBE_S[1] + 1.0 / fps


def bound_sentence(moved: Sequence[float], bound: float) -> str:
    """Whether every move came within ``bound`` seconds, naming the ones that did not."""
    late = [m for m in moved if m > bound]
    rule = (f"the longest re-probe period plus one frame period ({bound:g} s), the latest "
            "the SDK can learn of the load at a probe round")
    if not late:
        return f"Every move came within {max(moved):.1f} s, inside {rule}."
    return (f"{plural(len(late), 'move')} of {len(moved)} took longer "
            f"({', '.join(f'{m:.1f} s' for m in late)}) than {rule}.")


def load_conclusion(episodes: Sequence[Mapping[str, Any]], fps: float) -> Conclusion:
    """The load claim's verdict and sentences, from :func:`load_episodes`."""
    checks = {f"episode {k + 1}": _episode_ok(e) for k, e in enumerate(episodes)}
    moved = [e["moved_after_s"] for e in episodes if e["moved_after_s"] is not None]
    faster = [e for e in episodes if e["mean_after_move_ms"] is not None
              and e["mean_on_loaded_ms"] is not None]
    bound = move_bound_s(fps)
    count = count_of([e["moved_after_s"] is not None for e in episodes])
    sentences = [f"The SDK moved the user off the loaded node in {count} episodes"
                 + (f", after {', '.join(f'{m:.1f} s' for m in moved)}." if moved else ".")]
    if faster:
        sentences.append(
            f"Its frames were answered faster after the move than on the loaded node in "
            f"{count_of([e['mean_after_move_ms'] < e['mean_on_loaded_ms'] for e in faster])} "
            "episodes that measured both (" + ", ".join(
                f"{e['mean_on_loaded_ms']:.0f} to {e['mean_after_move_ms']:.0f} ms"
                for e in faster) + ").")
    if moved:
        sentences.append(bound_sentence(moved, bound))
    return Conclusion(verdict(checks), LOAD_RULE, tuple(sentences))


def write_load_report(out: Path, report: Path, command: str) -> Path:
    """The Markdown report of a ``run_load`` folder."""
    fleet = fleet_json(out)
    found = load_episodes(out)
    conclusion = load_conclusion(found, fleet["fleet"]["fps"])
    lines = report_header("Armada: re-selection under background load (`armada-load`)", command, out,
                    f"{fleet['fleet']['users']} users stream at {fleet['fleet']['fps']:g} fps "
                    f"through the SDK (re-probe every 5-7 s, switch margin 20 %); at seeded "
                    "random instants CPU burners (not Armada tasks) start inside the node "
                    "serving u01, within that node's CPU limit, and stop again.")

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    lines += [fleet_setup(out), "", "## Episodes", "",
              ("| loaded node | load s | moved after s | moved to | mean ms before | "
               "mean ms on the loaded node | mean ms after moving |"),
              "|---|---|---|---|---|---|---|"]
    for e in found:
        moved = "not within the episode" if e["moved_after_s"] is None else \
            f"{e['moved_after_s']:.1f}"
        lines.append(f"| {e['node']} | {e['end'] - e['start']:.0f} | {moved} | "
                     f"{e['moved_to'] or '-'} | {fmt(e['mean_before_ms'])} | "
                     f"{fmt(e['mean_on_loaded_ms'])} | {fmt(e['mean_after_move_ms'])} |")
    moved = [e["moved_after_s"] for e in found if e["moved_after_s"] is not None]
    lines += ["", "## Host fidelity", "", host_line({"load": fleet["host"]}), "",
              "## The paper's claim beside ours", "", "| paper (seed) | this run | verdict |",
              "|---|---|---|",
              (f"| {LOAD_CLAIM} | moved away in {len(moved)} of {len(found)} episodes, after "
               + (", ".join(f"{m:.1f} s" for m in moved) or "-")
               + f" | {conclusion.verdict} |"), "",
              "## Conclusion", "", conclusion.paragraph(), ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    record_claims(report, command, [
        ("A6",
         ("under background load on the serving node the SDK moves the user to "
         "a faster node"),
         conclusion)])
    return report
