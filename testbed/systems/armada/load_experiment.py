"""Armada: re-selection under background load (``armada-load``), as data.

Background (non-Armada) CPU load hits the node serving a user at seeded random periods;
how long the SDK's periodic probing takes to move the user, and the latency before, on
the loaded node and after moving. The study files are ``studies/load/<size>/`` (the
episodes written out by :func:`load_schedule`); :func:`metrics` reads each cell's
traces and the episodes the harness applied (the run's driver details), :func:`claims`
judges claim A6 over every episode of every replication. Report:
``docs/results/armada/load.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim, Condition
from testbed.systems.armada.fleet import REPROBE_S, Action
from testbed.systems.armada.verdicts import Conclusion, count_of, plural, table_number, verdict

# ------------------------------------------------------------------ background load


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


def load_episodes(applied: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                  user: str = "u01") -> list[dict[str, Any]]:
    """Per load episode (the ``applied`` load actions of a stream, on and off in turn):
    the loaded node, how long until ``user``'s frames (trace ``rows``) were served
    elsewhere (None: never during the episode), and latency before / during / after."""
    rows = sorted((r for r in rows if r["client"] == user and r["outcome"] == "ok"),
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


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Every replication's episodes (:func:`load_episodes` of the SDK stream of each
    finished cell) with the stream's frame rate and the host's CPU idle share."""
    runs = []
    for result in results.values():
        for cell in sorted(result.finished(), key=lambda c: c.replication):
            driver = cell.metadata()["driver"]
            stream = driver["streams"][0]
            runs.append({"replication": cell.replication, "degraded": cell.degraded,
                         "fps": driver["fleet"]["fps"], "host": driver["host"],
                         "episodes": load_episodes(stream["applied"],
                                                   cell.traces().to_dict("records"))})
    return {"size": size, "runs": runs, "tables": [_episode_table(runs)]}


def _episode_table(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    rows = []
    for run in runs:
        for e in run["episodes"]:
            moved = "not within the episode" if e["moved_after_s"] is None else \
                f"{e['moved_after_s']:.1f}"
            rows.append([str(run["replication"]), e["node"], f"{e['end'] - e['start']:.0f}",
                         moved, e["moved_to"] or "-", table_number(e["mean_before_ms"]),
                         table_number(e["mean_on_loaded_ms"]),
                         table_number(e["mean_after_move_ms"])])
    idle = ", ".join(f"{r['host']['idle_share']:.0%}" for r in runs if r.get("host"))
    return {"title": "Load episodes", "columns": [
        "replication", "loaded node", "load s", "moved after s", "moved to", "mean ms before",
        "mean ms on the loaded node", "mean ms after moving"], "rows": rows,
        "note": ("CPU burners (not Armada tasks) start inside the node serving u01 and stop "
                 "again; the SDK re-probes its TopN candidates every 5-7 s with a frame and "
                 f"switches past a 20 % margin. Host CPU idle share per run: {idle or '-'}.")}


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Claim A6 over every episode of every replication (:func:`load_conclusion`)."""
    episodes = [e for run in found["runs"] for e in run["episodes"]]
    fps = found["runs"][0]["fps"] if found["runs"] else 1.0
    conclusion = load_conclusion(episodes, fps)
    return [Claim("A6", "under background load on the serving node the SDK moves the user "
                  "to a faster node", rule=LOAD_RULE, paper=LOAD_CLAIM,
                  conditions=tuple(Condition(f"episode {k + 1}", _episode_ok(e))
                                   for k, e in enumerate(episodes)),
                  why=" ".join(conclusion.sentences),
                  replications=len(found["runs"]) if episodes else None)]
