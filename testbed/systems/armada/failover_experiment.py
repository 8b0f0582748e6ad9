"""Armada experiment 3 part 1 (``armada-failover``): failover without downtime, as data.

The built-in scenario ``armada-failover`` (``topologies/armada-failover.yaml``) puts the
control plane on a control node and a Captain on each of three edge nodes (one detector
replica each); users ua and ub share a LAN with edge node ea. Each policy (the Armada
SDK, then the server-reconnect baseline, each from a fresh deployment) streams the same
frames from both users, and the scenario's event crashes ea through the harness
mid-stream (its Captain SIGKILLed, its detect task dies with it). The study files are
``studies/failover/<size>/``; :func:`metrics` scores every user's frames around the
crash (:func:`failover_metrics`) per policy, :func:`claims` judges claim A3 for each user
of each replication against the same user under server-reconnect. Report:
``docs/results/armada/failover.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim
from testbed.systems.armada.verdicts import (
    Conclusion,
    replicated_claim,
    rose_or_fell,
    table_number,
    verdict,
)

SDK, BASELINE = "armada", "server-reconnect"


def failover_metrics(rows: Sequence[Mapping[str, Any]], crash_at: float,
                     crashed: str, ended_at: float | None = None) -> dict[str, Any]:
    """What one client's frames show about a crash of node ``crashed`` at ``crash_at``.

    ``rows`` are the client's frame rows (any order). Returns the frame and ok counts,
    ``lost`` (frames without an ok row) and their indices, ``largest_gap_s`` between
    consecutive ok completions (``response_wall`` in time order) and where it started
    relative to the crash (``largest_gap_after_crash_s``), ``to_other_node_s`` (crash to
    the first completion served by another node; None when none was), ``failover_gap_s``
    (from the last completion before that one to it: the silence the failover caused,
    one frame period when it cost nothing), the nodes serving
    before and after the crash, and latency medians before and after (ms).
    ``served_after`` counts frames sent once the crashed node's replica had ended
    (``ended_at``, default ``crash_at``): a frame already there when it died may still
    have been answered.
    """
    ok = sorted((r for r in rows if r["outcome"] == "ok"), key=lambda r: r["response_wall"])
    lost = sorted(r["frame_index"] for r in rows if r["outcome"] != "ok")
    done = np.array([r["response_wall"] for r in ok])
    gaps = np.diff(done) if len(done) > 1 else np.array([])
    k = int(np.argmax(gaps)) if len(gaps) else None
    other = [r for r in ok if r["response_wall"] >= crash_at and r["target"] != crashed]
    before = [r for r in ok if r["response_wall"] < crash_at]
    first = ok.index(other[0]) if other else 0
    after = [r for r in ok if r["response_wall"] >= crash_at]

    def median_ms(part: list[Mapping[str, Any]]) -> float | None:
        return float(np.median([r["latency_s"] for r in part]) * 1e3) if part else None

    return {
        "frames": len(rows), "ok": len(ok), "lost": len(lost), "lost_frames": lost,
        "largest_gap_s": float(gaps[k]) if k is not None else None,
        "largest_gap_after_crash_s": float(done[k] - crash_at) if k is not None else None,
        "to_other_node_s": other[0]["response_wall"] - crash_at if other else None,
        "failover_gap_s": float(done[first] - done[first - 1]) if first > 0 else None,
        "served_before": sorted({r["target"] for r in before}),
        "served_after": sorted({r["target"] for r in ok
                                if r["dispatch_wall"] >= (crash_at if ended_at is None
                                                          else ended_at)}),
        "median_before_ms": median_ms(before), "median_after_ms": median_ms(after),
        "max_latency_ms": float(max(r["latency_s"] for r in ok) * 1e3) if ok else None,
    }



# ------------------------------------------------------------------ claims

PAPER_CLAIM = ("When the connected edge node suddenly fails or leaves, the Armada client "
               "immediately switches to a backup node and prevents service downtime, "
               "compared to a server re-connect approach (Fig. 10 (a)); users experience "
               "zero downtime upon node failure.")


FAILOVER_RULE = ("three checks per user: the SDK lost no frame; its largest gap between "
                 "answers stayed within two frame periods; and, the user having met the same "
                 "failure under both policies (served by the crashed node when it came), it "
                 "lost fewer frames than under server-reconnect, or as many with a shorter "
                 "largest gap")


def _gap_ms(client: Mapping[str, Any]) -> float:
    return math.inf if client["largest_gap_s"] is None else client["largest_gap_s"] * 1e3


def failover_checks(sdk: Mapping[str, Any], base: Mapping[str, Any], period_s: float,
                    same_failure: bool) -> dict[str, bool]:
    """The three checks of :data:`FAILOVER_RULE` for one user."""
    period = period_s * 1e3
    return {"no frame lost": sdk["lost"] == 0,
            "no gap beyond two frame periods": _gap_ms(sdk) <= 2 * period,
            "better than server-reconnect": same_failure
            and (sdk["lost"], _gap_ms(sdk)) < (base["lost"], _gap_ms(base))}


def failover_conclusion(sdk: Mapping[str, Any], base: Mapping[str, Any], period_s: float,
                        same_failure: bool) -> Conclusion:
    """The Fig. 10 (a) claim's verdict and sentences, from :func:`failover_metrics` of
    the SDK client and the server-reconnect client."""
    period = period_s * 1e3
    checks = failover_checks(sdk, base, period_s, same_failure)
    sentences = [
        (f"The SDK lost {sdk['lost']} of {sdk['frames']} frames and its largest gap between "
         f"answers was {_gap_ms(sdk):.0f} ms ({_gap_ms(sdk) / period:.1f} frame periods of "
         f"{period:.0f} ms); server-reconnect lost {base['lost']} of {base['frames']} and its "
         f"largest gap was {_gap_ms(base):.0f} ms ({_gap_ms(base) / period:.1f} periods)."),
        _other_node_sentence(sdk, base)]
    if not same_failure:
        sentences.append("The user was not served by the crashed node under both policies "
                         "when it came, so they did not meet the same failure and the "
                         "comparison fails by rule.")
    return Conclusion(verdict(checks), FAILOVER_RULE, tuple(sentences))


def _other_node_sentence(sdk: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """When each client was first answered by another node after the crash."""
    def when(client: Mapping[str, Any]) -> str:
        t = client["to_other_node_s"]
        return "never" if t is None else f"{t * 1e3:.0f} ms after the crash"

    return (f"The first frame answered by another node came {when(sdk)} for the SDK and "
            f"{when(base)} for server-reconnect.")


def bump_sentence(sdk: Mapping[str, Any], crash: Mapping[str, Any],
                  replicas_after: Sequence[Mapping[str, Any]]) -> str:
    """How the SDK's median latency changed across the crash, and whether a re-placed
    replica became ready on a node serving it afterwards (a start-up shares that node's
    CPU with the replica serving there)."""
    before, after = sdk["median_before_ms"], sdk["median_after_ms"]
    if before is None or after is None:
        return ""
    starts = [r for r in replicas_after if r.get("ready_at") and r["ready_at"] > crash["at"]
              and r["node_id"] in sdk["served_after"]]
    return (f"The SDK's median latency {rose_or_fell(before, after)} from {before:.0f} ms "
            f"before the crash to {after:.0f} ms after it"
            + ("; " + ", ".join(f"{r['task_id']}, re-placed on {r['node_id']}, became ready "
                                f"{r['ready_at'] - crash['at']:.1f} s after the crash" for r in starts)
               + ", on a node that served the SDK afterwards (its start-up shares that node's CPU)"
               if starts else "") + ".")


def _on_crashed(rows: Sequence[Mapping[str, Any]], crash: Mapping[str, Any]) -> bool:
    """Whether the latest frame answered before the crash came from the crashed node."""
    before = [r for r in rows if r["outcome"] == "ok" and r["response_wall"] < crash["at"]]
    return bool(before) and max(before, key=lambda r: r["response_wall"])["target"] == \
        crash["target"]


def replication_result(driver: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                       fps: float) -> dict[str, Any]:
    """Per policy and user: :func:`failover_metrics` around the stream's crash, and
    whether the user was on the crashed node when it came; per policy the crash and the
    replicas after the stream."""
    policies: dict[str, Any] = {}
    for stream in driver["streams"]:
        (crash,) = [a for a in stream["applied"] if a["action"] == "crash"]
        mine = [r for r in rows if r["policy"] == stream["policy"]]
        users = sorted({r["client"] for r in mine})
        policies[stream["policy"]] = {
            "crash": {"target": crash["target"], "at": crash["at"],
                      "into_stream_s": crash["at"] - stream["start_at"]},
            "replicas_after": stream["replicas_after"],
            "users": {u: {**failover_metrics([r for r in mine if r["client"] == u],
                                             crash["at"], crash["target"]),
                          "on_crashed": _on_crashed([r for r in mine if r["client"] == u],
                                                    crash)}
                      for u in users}}
    return {"fps": fps, "policies": policies, "host": driver["host"]}


def _judged(found: Mapping[str, Any]) -> tuple[dict[str, bool], list[str]]:
    """Every user's checks (named by user) and sentences: the SDK against the same user
    under server-reconnect, the same failure when both were on the crashed node."""
    checks: dict[str, bool] = {}
    sentences: list[str] = []
    sdk_run, base_run = found["policies"][SDK], found["policies"][BASELINE]
    for user, sdk in sdk_run["users"].items():
        base = base_run["users"][user]
        same = sdk["on_crashed"] and base["on_crashed"]
        period = 1.0 / found["fps"]
        checks.update({f"{user}: {k}": v
                       for k, v in failover_checks(sdk, base, period, same).items()})
        conclusion = failover_conclusion(sdk, base, period, same)
        sentences += [f"{user}:", *conclusion.sentences]
        bump = bump_sentence(sdk, sdk_run["crash"], sdk_run["replicas_after"])
        sentences += [bump] if bump else []
    return checks, sentences


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (replication): :func:`replication_result`, the claim's checks
    and sentences, and the report's table."""
    runs = []
    for result in results.values():
        for cell in sorted(result.finished(), key=lambda c: c.replication):
            meta = cell.metadata()
            found = replication_result(meta["driver"], cell.traces().to_dict("records"),
                                       float(meta["scenario"]["workload"]["params"]["fps"]))
            checks, sentences = _judged(found)
            found.update(replication=cell.replication, degraded=cell.degraded,
                         checks=checks, sentences=sentences)
            runs.append(found)
    return {"size": size, "runs": runs, "tables": [_table(runs)] if runs else []}


def _table(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    rows = []
    for run in runs:
        for policy in (SDK, BASELINE):
            part = run["policies"][policy]
            for user, c in part["users"].items():
                rows.append([str(run["replication"]), policy, user, str(c["frames"]),
                             str(c["lost"]), table_number(c["largest_gap_s"], scale=1e3),
                             table_number(c["failover_gap_s"], scale=1e3),
                             table_number(c["to_other_node_s"], scale=1e3),
                             f"{', '.join(c['served_before'])} / {', '.join(c['served_after'])}",
                             " / ".join(table_number(c[k]) for k in ("median_before_ms",
                                                                     "median_after_ms")),
                             "yes" if c["on_crashed"] else "no"])
    periods = sorted({f"{1e3 / r['fps']:.0f}" for r in runs})
    crashes = "; ".join(f"replication {r['replication']} {p}: {c['crash']['target']} "
                        f"{c['crash']['into_stream_s']:.2f} s in"
                        for r in runs for p, c in r["policies"].items())
    return {"title": "Around the crash, per user", "columns": [
        "replication", "policy", "user", "frames", "lost", "largest gap ms",
        "gap at the failover ms", "crash to another node ms", "served before / after",
        "median ms before / after", "on the crashed node"], "rows": rows,
        "note": ("Set-up (`topologies/armada-failover.yaml`): Beacon, Application Manager "
                 "and Spinner on a control node; a Captain on edge nodes ea, eb, ec (0.4 "
                 "cores each), one detection replica per node. Users ua and ub share a LAN "
                 "with ea (2 ms round trip; eb 24 ms and ec 30 ms away). Each policy streams "
                 "the same frames from both users from a fresh deployment: the Armada SDK "
                 "(TopN candidates probed, connections kept, failover on any send error) "
                 "and a server-reconnect client (one node; on an error the frame is lost, "
                 "it queries the Beacon again and connects to another candidate). Crashes: "
                 f"{crashes}. The gap at the failover runs from the last completion before "
                 "the first frame served by another node to it; the crash-to-other-node "
                 "time includes waiting for the next frame to be due (frame period "
                 f"{', '.join(periods)} ms). A node cut off silently, which would leave both "
                 "clients waiting for the request timeout, is not tested here.")}


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Claim A3 judged for every user of every replication (:func:`failover_checks`)."""
    return [replicated_claim("A3", "a failing edge node costs the SDK user no downtime (it "
                             "switches to a backup)", FAILOVER_RULE, PAPER_CLAIM,
                             found["runs"])]
