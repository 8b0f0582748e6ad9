"""The fidelity guard: did an emulation run measure the scenario, or the host it ran on?

An emulation shares the machine's cores between the emulated nodes, the link shaper,
the clients and the harness. Once they run short, every latency includes delays the
scenario never asked for: tasks leave late, packets are released late, round trips grow.
The emulation executor measures four things while it runs
(:mod:`testbed.emulation.fidelity_watch`) and this module judges them:

* ``host_idle_share``: the idle share of all cores during the replays (``/proc/stat``,
  :class:`testbed.host_monitor.HostMonitor`);
* ``dispatch_lag``: how late each trace task was sent, ``dispatch_wall - arrival_wall``
  minus the policy's own ``state_fetch_s`` (a true-state policy's wait is its cost, not
  the harness's), over rows of the trace-replay kind (``task``); other kinds' wall
  columns follow their system's own meaning and are not judged;
* ``shaper_lateness``: how late the userspace delayer released frames against their due
  time, over every link (netem reports nothing);
* ``rtt``: per client-to-target path, the median of a few TCP connects at the start of
  the run against the round trip the topology's link delays configure;
* ``event_lateness``: how late each scheduled event of each replay took effect, in
  model seconds, from the event log (:mod:`testbed.event_log`).

A measure that could not be taken is ``None`` and judged by nothing ("absent", not
zero); ``absent`` says why. :func:`judge` returns the verdict ``metadata.json`` keeps as
``fidelity``; its thresholds are :class:`Thresholds` (documented in docs/fidelity.md with
the healthy and loaded values they were chosen from). Pure: no Mininet, aiohttp, Docker.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from testbed.event_log import APPLIED, FAILED, NOT_APPLIED, lateness_model_s
from testbed.scenario.model import Scenario

#: Row kinds whose ``arrival_wall`` is a scheduled send instant (``testbed.analysis.traces.CORE_KIND``,
#: kept as a literal so this module does not load pandas).
LAG_KINDS = ("task",)
#: At most this many client-to-target paths are probed (declaration order), so a large
#: topology's start-up stays short.
MAX_PROBED_PATHS = 64
#: The late events a measure lists (the latest first) and a reason names.
MAX_LATE_LISTED = 20
MAX_LATE_NAMED = 3


@dataclass(frozen=True)
class Thresholds:
    """Where a measure stops being a healthy run's.

    Chosen on the project's 2-core VM (docs/fidelity.md): healthy ``continuum`` runs
    stay well inside every bound, a run beside two busy loops falls below the idle one.
    """

    #: Degraded when the cores were idle less than this share of the replays.
    min_host_idle_share: float = 0.10
    #: Degraded when the 99th percentile of the dispatch lag exceeds this (wall ms).
    max_dispatch_lag_p99_ms: float = 10.0
    #: Degraded when the shaper's release lateness p99 exceeds this (wall ms).
    max_shaper_late_p99_ms: float = 1.0
    #: A path's measured RTT may differ from the configured one by
    #: ``max(rtt_slack_ms, rtt_slack_share * configured) + 2 * its jitter``.
    rtt_slack_ms: float = 2.0
    rtt_slack_share: float = 0.10
    #: A scheduled event is late when its change took effect more than this many model
    #: seconds after it was due, or more than this share of the scenario's duration
    #: where that is smaller.
    max_event_late_model_s: float = 1.0
    max_event_late_share: float = 0.01

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form, recorded beside the verdict."""
        return asdict(self)

    def event_allowance(self, duration: float) -> float:
        """How late (model seconds) an event of a scenario lasting ``duration`` may be."""
        return min(self.max_event_late_model_s, self.max_event_late_share * duration)


DEFAULT_THRESHOLDS = Thresholds()


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of non-empty ``values`` (an observed value)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def summarize_ms(values_s: Sequence[float]) -> dict[str, Any] | None:
    """``count``, ``p50_ms``, ``p99_ms`` and ``max_ms`` of durations given in seconds;
    ``None`` when there are none."""
    if not values_s:
        return None
    return {"count": len(values_s), "p50_ms": quantile(values_s, 0.5) * 1000,
            "p99_ms": quantile(values_s, 0.99) * 1000, "max_ms": max(values_s) * 1000}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def dispatch_lags(rows: Iterable[Mapping[str, Any]],
                  kinds: Sequence[str] = LAG_KINDS) -> dict[str, list[float]]:
    """Each scheduled row's lag in seconds, per policy: ``dispatch_wall - arrival_wall``
    minus its ``state_fetch_s`` (when set). Rows of other kinds or without both instants
    count not."""
    lags: dict[str, list[float]] = {}
    for row in rows:
        if row.get("kind") not in kinds:
            continue
        due, sent = row.get("arrival_wall"), row.get("dispatch_wall")
        if not (_finite(due) and _finite(sent)):
            continue
        fetch = row.get("state_fetch_s")
        lag = sent - due - (fetch if _finite(fetch) else 0.0)
        lags.setdefault(str(row.get("policy")), []).append(lag)
    return lags


def dispatch_lag(rows: Iterable[Mapping[str, Any]],
                 kinds: Sequence[str] = LAG_KINDS) -> dict[str, Any] | None:
    """The ``dispatch_lag`` measure: :func:`summarize_ms` of every lag, plus ``by_policy``
    (the same per policy, so a reader sees whose client fell behind); ``None`` when no
    row records a scheduled send."""
    per_policy = dispatch_lags(rows, kinds)
    summary = summarize_ms([lag for lags in per_policy.values() for lag in lags])
    if summary is not None:
        summary["by_policy"] = {policy: summarize_ms(lags)
                                for policy, lags in sorted(per_policy.items())}
    return summary


def _late_entry(line: Mapping[str, Any], late: float | None) -> dict[str, Any]:
    return {"policy": line.get("policy"), "repetition": line.get("repetition"),
            "action": line.get("action"), "target": line.get("target"), "at": line.get("at"),
            "late_model_s": late, "outcome": line.get("outcome")}


def event_lateness(lines: Sequence[Mapping[str, Any]], allowed_model_s: float
                   ) -> dict[str, Any] | None:
    """The ``event_lateness`` measure of a run's event log ``lines``; ``None`` without any.

    ``count`` lines, of which ``applied``, ``not_applied`` and ``failed``; ``p50`` and
    ``max_model_s`` of the applied ones' lateness; ``late``: how many took effect more
    than ``allowed_model_s`` after they were due, or never while due that long (the
    replay ended), or failed; ``by_policy`` the same two counts per policy; and
    ``late_events``, the latest :data:`MAX_LATE_LISTED` of them (failed first) naming
    policy, repetition, action, target, ``at``, ``late_model_s`` and outcome.
    """
    if not lines:
        return None
    late_lines: list[tuple[float, dict[str, Any]]] = []
    applied: list[float] = []
    by_policy: dict[str, dict[str, int]] = {}
    for line in lines:
        late = lateness_model_s(line)
        if late is not None and line.get("outcome") == APPLIED:
            applied.append(late)
        counts = by_policy.setdefault(str(line.get("policy")), {"count": 0, "late": 0})
        counts["count"] += 1
        if late is None or late > allowed_model_s:
            counts["late"] += 1
            late_lines.append((math.inf if late is None else late, _late_entry(line, late)))
    late_lines.sort(key=lambda item: -item[0])
    outcomes = [str(line.get("outcome")) for line in lines]
    return {"count": len(lines), "applied": outcomes.count(APPLIED),
            "not_applied": outcomes.count(NOT_APPLIED),
            "failed": sum(o.startswith(FAILED) for o in outcomes),
            "p50_model_s": quantile(applied, 0.5) if applied else None,
            "max_model_s": max(applied) if applied else None,
            "allowed_model_s": allowed_model_s, "late": len(late_lines),
            "by_policy": dict(sorted(by_policy.items())),
            "late_events": [entry for _, entry in late_lines[:MAX_LATE_LISTED]]}


def _describe_late(entry: Mapping[str, Any]) -> str:
    where = f"{entry['action']} {entry['target']} at {entry['at']:g} model s (policy " \
            f"{entry['policy']}, repetition {entry['repetition']})"
    late = entry["late_model_s"]
    if late is None:
        return f"{where} {entry['outcome']}"
    if entry["outcome"] != APPLIED:
        return f"{where} not applied: the replay ended {late:.2f} model s after it was due"
    return f"{where} {late:.2f} model s late"


def _event_reasons(measure: Mapping[str, Any] | None) -> tuple[str | None, dict[str, str]]:
    """The run's reason when late events hit every policy's replays, else a reason per
    policy whose replays were hit."""
    if not measure or not measure.get("late"):
        return None, {}
    allowed = measure["allowed_model_s"]
    listed = measure.get("late_events") or []

    def reason(entries: list[Mapping[str, Any]], count: int) -> str:
        named = "; ".join(_describe_late(e) for e in entries[:MAX_LATE_NAMED])
        more = count - min(len(entries), MAX_LATE_NAMED)
        return f"{count} event(s) late by more than {allowed:g} model s or not applied: " \
               f"{named}" + (f"; and {more} more" if more > 0 else "")

    hit = {name: item["late"] for name, item in measure["by_policy"].items() if item["late"]}
    if len(hit) == len(measure["by_policy"]):
        return reason(listed, measure["late"]), {}
    return None, {name: reason([e for e in listed if str(e["policy"]) == name], count)
                  for name, count in sorted(hit.items())}


def probe_plan(scenario: Scenario, limit: int = MAX_PROBED_PATHS) -> list[dict[str, Any]]:
    """The client-to-target paths to probe, each with its configured round trip.

    A client's targets are the nodes of the task servers it may use
    (:meth:`Scenario.servers_for`) or, in a scenario without task servers, every
    non-client host running a service; its own node is no path. ``configured_ms`` is
    twice the one-way delays along the route, ``jitter_ms`` the one-way jitters summed.
    """
    served = sorted({s.node for s in scenario.services
                     if scenario.node(s.node).role != "client"},
                    key=[n.name for n in scenario.topology.nodes].index)
    plan: list[dict[str, Any]] = []
    for client in scenario.clients():
        if scenario.task_servers():
            targets = list(dict.fromkeys(s.node for s in scenario.servers_for(client)))
        else:
            targets = served
        for target in targets:
            if target == client.name:
                continue
            route = scenario.topology.path(client.name, target)
            plan.append({"client": client.name, "target": target,
                         "configured_ms": 2 * sum(link.delay_ms for link in route),
                         "jitter_ms": sum(link.jitter_ms for link in route)})
    return plan[:limit]


def rtt_allowance_ms(path: Mapping[str, Any], thresholds: Thresholds = DEFAULT_THRESHOLDS
                     ) -> float:
    """How far a path's measured RTT may sit from its configured one."""
    return max(thresholds.rtt_slack_ms,
               thresholds.rtt_slack_share * path["configured_ms"]) + 2 * path["jitter_ms"]


def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _rtt_reason(path: Mapping[str, Any], thresholds: Thresholds) -> str | None:
    measured, configured = path.get("measured_ms"), path["configured_ms"]
    if not _finite(measured):
        return None
    allowed = rtt_allowance_ms(path, thresholds)
    off = measured - configured
    where = f"RTT {path['client']}->{path['target']} {measured:.2f} ms vs configured " \
            f"{configured:.2f} ms"
    if off > allowed:
        return f"{where}: +{off:.2f} ms > +{allowed:.2f} ms allowed"
    if off < -allowed:
        return f"{where}: {off:.2f} ms, shorter by more than {allowed:.2f} ms " \
               "(the link delay is not applied)"
    return None


def judge(measures: Mapping[str, Any], thresholds: Thresholds = DEFAULT_THRESHOLDS,
          absent: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The verdict on one run's ``measures``: ``{"degraded", "reasons", "measures",
    "thresholds", "absent"}``.

    ``measures`` holds ``host_idle_share`` (share in [0, 1]), ``dispatch_lag`` and
    ``shaper_lateness`` (``{"count", "p50_ms", "p99_ms", "max_ms"}``, the lag also
    ``by_policy``), ``rtt`` (a list of paths from :func:`probe_plan` with
    ``measured_ms``) and ``event_lateness`` (:func:`event_lateness`), each possibly
    ``None`` (absent: judged by nothing). Every reason is one line naming the measure,
    its value and the threshold it crossed.

    The host, the shaper and the paths degrade the whole run. The dispatch lag and the
    events are judged per policy: a policy whose own client fell behind (the oracle
    waits for true state before each decision), or whose replays alone had an event
    late, is listed in ``degraded_policies`` with its reason, and only its numbers are
    in doubt; the run is degraded by either only when every policy was hit.
    """
    reasons: list[str] = []
    idle = measures.get("host_idle_share")
    if _finite(idle) and idle < thresholds.min_host_idle_share:
        reasons.append(f"host CPU idle share {_pct(idle)} < "
                       f"{_pct(thresholds.min_host_idle_share)} (the cores were saturated)")
    lag = measures.get("dispatch_lag")
    limit = thresholds.max_dispatch_lag_p99_ms
    by_policy = {name: item for name, item in ((lag or {}).get("by_policy") or {}).items()
                 if item and _finite(item.get("p99_ms"))}
    policies: dict[str, str] = {
        name: f"dispatch lag p99 {item['p99_ms']:.2f} ms > {limit:g} ms (its tasks were "
              "sent late)" for name, item in sorted(by_policy.items()) if item["p99_ms"] > limit}
    if by_policy and len(policies) == len(by_policy) or not by_policy and lag \
            and _finite(lag.get("p99_ms")) and lag["p99_ms"] > limit:
        reasons.append(f"dispatch lag p99 {lag['p99_ms']:.2f} ms > {limit:g} ms (tasks "
                       "of every policy were sent late)")
    late = measures.get("shaper_lateness")
    if late and _finite(late.get("p99_ms")) \
            and late["p99_ms"] > thresholds.max_shaper_late_p99_ms:
        reasons.append(f"shaper release lateness p99 {late['p99_ms']:.2f} ms > "
                       f"{thresholds.max_shaper_late_p99_ms:g} ms (frames left the links "
                       "late)")
    for path in measures.get("rtt") or ():
        reason = _rtt_reason(path, thresholds)
        if reason:
            reasons.append(reason)
    run_reason, late_policies = _event_reasons(measures.get("event_lateness"))
    if run_reason:
        reasons.append(run_reason)
    for name, why in late_policies.items():
        policies[name] = f"{policies[name]}; {why}" if name in policies else why
    return {"degraded": bool(reasons), "reasons": reasons,
            "degraded_policies": {} if reasons else policies, "measures": dict(measures),
            "thresholds": thresholds.to_dict(), "absent": dict(absent or {})}


def warning_line(verdict: Mapping[str, Any]) -> str | None:
    """The one line a run prints when ``verdict`` is degraded or names degraded policies
    (``None`` otherwise)."""
    if verdict.get("degraded"):
        return "warning: degraded emulation: " + "; ".join(verdict["reasons"])
    policies = verdict.get("degraded_policies") or {}
    if policies:
        return "warning: degraded policies in this emulation: " + "; ".join(
            f"{name}: {why}" for name, why in policies.items())
    return None
