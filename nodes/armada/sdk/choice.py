"""How an Armada user picks its replica: the SDK's decision rules, pure.

The client SDK (:mod:`nodes.armada.sdk.client`) sends; this module decides. A
:class:`Selection` holds the candidate list a Beacon query gave (:meth:`Selection.adopt`),
takes each probe round's latencies (:meth:`Selection.probed`), keeps the current
replica unless another probes faster by more than ``switch_margin`` of its latency
(:meth:`Selection.choose`), moves to the next-best at once when a request fails
(:meth:`Selection.failed`) and draws the jittered delay to the next probe round
(:meth:`Selection.next_delay`); :class:`BaselineSelection` applies the baselines' rules
instead of probes. It imports no HTTP library and takes its clock from the
owner, so a simulated user runs the very same rules on the simulation clock.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nodes.armada.baselines import baseline_choice, check_baseline, fails_over_to_cloud
from nodes.armada.geo import haversine_km
from nodes.armada.sdk.failover import Event, EventLog, failover_attempts

DEFAULT_REPROBE_S = (5.0, 7.0)
DEFAULT_SWITCH_MARGIN = 0.2
CONTENT_TYPE = "application/octet-stream"


class ArmadaError(Exception):
    """A request to Armada was refused (the reason is the service's ``error``)."""


class ArmadaUnavailable(ArmadaError):
    """No candidate could serve a request, even after a new query and probe round."""


@dataclass
class Candidate:
    """One replica the client may use, with its last probe result."""

    task_id: str
    url: str
    node_id: str | None = None
    reason: str = ""
    latency_s: float | None = None  # last probe, None until probed or when it failed
    failed: bool = False  # failed since its last successful probe

    @property
    def rank_key(self) -> tuple[bool, float]:
        """Working candidates first, fastest probe first, unprobed last."""
        return (self.failed, math.inf if self.latency_s is None else self.latency_s)


class Selection(EventLog):
    """Settings, candidates, the current choice and the event log: what both clients
    share, and what a simulated user runs with the simulation clock as ``clock``.

    Its events (``events``) are of kind ``query``, ``probe``, ``switch`` or ``error``.

    ``reprobe_s`` is the (low, high) range of seconds between probe rounds;
    ``request_timeout_s`` bounds every query, probe and frame; ``seed`` makes the jitter
    reproducible; ``switch_margin`` is how much faster (fraction of the current node's
    probe latency) another candidate must probe before a re-probe switches to it.
    ``near_equal`` (default 0: off) spreads users that probed alike: when the choice
    moves, it goes to a candidate drawn at random (seeded) among the working ones whose
    probe is within ``near_equal`` (fraction) of the fastest, not always the fastest, so
    users that re-probe together do not all move onto the same replica.
    """

    def __init__(
        self,
        beacon_url: str,
        app: str,
        lat: float,
        lon: float,
        *,
        probe_payload: bytes,
        tags: Iterable[str] = (),
        user: str | None = None,
        reprobe_s: tuple[float, float] = DEFAULT_REPROBE_S,
        request_timeout_s: float = 5.0,
        content_type: str = CONTENT_TYPE,
        seed: int | None = None,
        switch_margin: float = DEFAULT_SWITCH_MARGIN,
        near_equal: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < reprobe_s[0] <= reprobe_s[1]:
            raise ValueError(f"reprobe_s must be (low, high) with 0 < low <= high: {reprobe_s}")
        if not 0 <= switch_margin < 1:
            raise ValueError(f"switch_margin must be in [0, 1), found {switch_margin}")
        if not 0 <= near_equal < 1:
            raise ValueError(f"near_equal must be in [0, 1), found {near_equal}")
        super().__init__(clock)
        self.switch_margin = switch_margin
        self.near_equal = near_equal
        self.beacon_url = beacon_url.rstrip("/")
        self.query_body: dict[str, Any] = {"app": app, "lat": lat, "lon": lon,
                                           "tags": list(tags)}
        if user is not None:
            self.query_body["user"] = user
        self.probe_payload = probe_payload
        self.reprobe_s = reprobe_s
        self.request_timeout_s = request_timeout_s
        self.content_type = content_type
        self.rng = random.Random(seed)
        self.candidates: list[Candidate] = []
        self.current: Candidate | None = None

    def next_delay(self) -> float:
        """Seconds until the next probe round (jittered)."""
        return self.rng.uniform(*self.reprobe_s)

    def adopt(self, answer: Any) -> None:
        """Take a query answer's candidates (keeping nothing of replicas that left)."""
        listed = answer.get("candidates", []) if isinstance(answer, dict) else []
        self.candidates = [
            Candidate(c["task_id"], c["url"].rstrip("/"), c.get("node_id"), c.get("reason", ""))
            for c in listed
            if isinstance(c, dict) and c.get("url") and c.get("task_id")
        ]
        self.record("query", candidates=[c.task_id for c in self.candidates])

    def probed(self, results: Iterable[tuple[Candidate, float | None, str | None]]) -> None:
        """Store a probe round's latencies (None: failed, with the error) and re-choose."""
        latencies = {}
        for candidate, latency, error in results:
            candidate.latency_s, candidate.failed = latency, latency is None
            latencies[candidate.task_id] = None if latency is None else round(latency * 1e3, 3)
            if error is not None:
                self.record("error", task_id=candidate.task_id, error=error, during="probe")
        self.record("probe", latency_ms=latencies)
        self.choose("probe")

    def choose(self, reason: str) -> Candidate | None:
        """Point ``current`` at the best working candidate; log a switch when it changes.

        After a probe round a current node that still works (and is still a candidate) is
        kept unless the best is faster by more than ``switch_margin`` of its latency; with
        ``near_equal`` a move goes to one of the near-equal candidates (class docstring).
        """
        working = sorted((c for c in self.candidates if not c.failed), key=lambda c: c.rank_key)
        best = working[0] if working else None
        if self.near_equal > 0 and best is not None and best.latency_s is not None:
            bound = best.latency_s * (1.0 + self.near_equal)
            alike = [c for c in working if c.latency_s is not None and c.latency_s <= bound]
            if len(alike) > 1 and not any(self._same(c, self.current) for c in alike):
                best = alike[self.rng.randrange(len(alike))]
            elif len(alike) > 1:  # the current one is among them: stay
                best = next(c for c in alike if self._same(c, self.current))
        before = self.current
        if reason == "probe" and best is not None and before is not None:
            kept = next((c for c in working if c.task_id == before.task_id
                         and c.url == before.url), None)
            if (kept is not None and kept.latency_s is not None and best.latency_s is not None
                    and best.latency_s >= kept.latency_s * (1.0 - self.switch_margin)):
                best = kept
        if best is not None and (before is None or best.task_id != before.task_id
                                 or best.url != before.url):
            self.record("switch", source=before.task_id if before else None,
                        target=best.task_id, url=best.url, reason=reason)
        self.current = best
        return best

    @staticmethod
    def _same(a: Candidate | None, b: Candidate | None) -> bool:
        return a is not None and b is not None and a.task_id == b.task_id and a.url == b.url

    def failed(self, candidate: Candidate, error: str) -> Candidate | None:
        """A request to ``candidate`` failed: log it and move to the next-best."""
        candidate.failed = True
        self.record("error", task_id=candidate.task_id, error=error, during="request")
        return self.choose("failover")

    @property
    def switches(self) -> list[Event]:
        """The ``switch`` events so far."""
        return [e for e in self.events if e.kind == "switch"]

    def attempts(self) -> Iterator[tuple[Candidate | None, int]]:
        """The candidates one frame tries in turn (:func:`failover_attempts`); None: query
        and probe again first."""
        return failover_attempts(lambda: self.current or self.choose("failover"),
                                 lambda: ArmadaUnavailable("no candidate answers"))


class BaselineSelection(Selection):
    """A user that selects without probing: the rules of the baselines the SDK is
    compared with (``policy``: ``geo-nearest``, ``random`` or ``edge-to-cloud``, see
    :mod:`nodes.armada.baselines`; ``cloud_nodes`` names the cloud's nodes).

    Every round the owner lists the application's running replicas and hands them to
    :meth:`listed`, which makes them the candidates and chooses (``random`` draws again
    at every round); a failed request moves to the policy's next choice at once
    (:meth:`failed`), and ``edge-to-cloud`` keeps to the cloud after its first failure at
    the edge.
    """

    def __init__(self, *args: Any, policy: str, cloud_nodes: Iterable[str] = (),
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.policy = check_baseline(policy)
        self.cloud_nodes = frozenset(cloud_nodes)
        self.distance_km: dict[str, float] = {}
        self.edge_failed = False

    def listed(self, running: Iterable[Mapping[str, Any]]) -> None:
        """A round's running replicas (``task_id``, ``url``, ``node_id``, ``lat``,
        ``lon``) become the candidates; then choose."""
        replicas = [r for r in running if r.get("url") and r.get("task_id")]
        lat, lon = self.query_body["lat"], self.query_body["lon"]
        self.distance_km = {r["task_id"]: haversine_km(lat, lon, r["lat"], r["lon"])
                            for r in replicas}
        self.candidates = [Candidate(r["task_id"], r["url"].rstrip("/"), r.get("node_id"),
                                     "listed") for r in replicas]
        self.record("query", candidates=[c.task_id for c in self.candidates])
        if self.policy == "random":
            self.current = None  # drawn again every round
        self.choose("probe")

    def choose(self, reason: str) -> Candidate | None:
        """The policy's choice among the working candidates; logs a switch on change."""
        before = self.current
        best = baseline_choice(self.policy, [c for c in self.candidates if not c.failed],
                               before.task_id if before is not None else None,
                               self.distance_km, self.cloud_nodes, self.edge_failed, self.rng)
        if best is not None and (before is None or best.task_id != before.task_id):
            self.record("switch", source=before.task_id if before else None,
                        target=best.task_id, url=best.url, reason=reason)
        self.current = best
        return best

    def failed(self, candidate: Candidate, error: str) -> Candidate | None:
        """A request failed on ``candidate``; edge-to-cloud moves to the cloud for good."""
        if fails_over_to_cloud(self.policy, candidate.node_id, self.cloud_nodes):
            self.edge_failed = True
        if self.policy == "random" and self.current is candidate:
            self.current = None
        return super().failed(candidate, error)
