"""Context-based person search on edge servers: Eq. 1, Algorithm 1, the response model.

Pure (numpy only): shared by the discrete-event simulator (:mod:`testbed.systems.person_search.sim`)
and the emulated services (``nodes/person_search/``). The world and the item metadata
(:class:`~workloads.person_search.Items`) come from the ``person-search`` workload. Times
are slot times (``T_j = j``) for items and model seconds for analyses.

Pieces:

* :class:`Search` is Algorithm 1 of one search as a state machine: it asks a policy for
  the next item, takes the answer (target present or not), moves the last discovery
  point and stops when the item at the required time ``T_R`` containing the target is
  found. One item at a time.
* :func:`priority_matrix` computes Eq. 1 for many searches at once (numpy);
  :func:`priority_loop` is the plain per-item reference it is tested against. The
  policies that rank items with it (``priority``) or without it (``random``,
  ``load-balance``) are :mod:`nodes.person_search.policies`.
* :class:`AnalysisServer` is the response model of one edge server;
  :data:`SHARING_MODES` its two readings and :data:`ACCOUNTINGS` the two readings of
  Eq. 7-8 in the simulated (and emulated) durations.

Gaps in the paper's text, and how they are closed here (each also in the docstring
where it applies):

1. ``k_i`` is the number of analyses running on item i's server. A literal ``k_i = 0``
   on an idle server would give every item there priority 0 whatever its probability,
   so Eq. 1 uses ``k_i + 1``: the analysis being chosen counts itself, which is also the
   number of analyses the server would run and the factor of the response model.
2. ``sigma_i = alpha (T_i - T_L) + sigma_D`` is zero or negative for items more than
   ``sigma_D / alpha`` before ``T_L`` (a density is undefined there). The distance in
   time is taken as ``|T_i - T_L|``: uncertainty about where the target was grows with
   time in both directions (the movement models are reversible), and ``sigma_i >=
   sigma_D > 0`` always. For ``T_i >= T_L`` this is Eq. 3 exactly.
3. Algorithm 1 removes an item from ``I`` only when it contains the target; an analysed
   item without the target would stay and could be chosen again forever. Here every
   dispatched item leaves the candidate set (its answer is known or pending). Which of
   the others Eq. 1 ranks is the **candidate-set rule** (``candidates``, named in
   :data:`CANDIDATE_RULES`): ``"unanalysed"`` (default) keeps every item not yet
   dispatched, those at or before ``T_L`` included; ``"after-discovery"`` keeps only
   the undispatched items later than ``T_L``: given the discovery at ``T_L`` the older
   items say nothing new about ``T_R`` under Markov movement, and the other items of
   slot ``T_L`` cannot contain the target. Random and load-balance choose among ``T_R``
   items only, which are always later than ``T_L``, so the rule changes the priority
   policy alone.
4. Eq. 7-8 define ``Tc'_i = Tc_i l_i``, ``l_i = 2 (T_i - T_L) - 1``, in the description
   of the one-dimensional simulator, as the response time that stands for a search area
   growing in two dimensions. Read literally it is the response-time accounting of the
   simulator (see :class:`AnalysisServer`, ``factor``); the alternative reading puts it
   into Eq. 1's ``Tc_i``, offered as ``compensation="response-time"``
   (``"none"``, Eq. 1 as written, is the default). ``l_i`` is ``2 |T_i - T_L| - 1``
   limited below by 1: the literal value is -1 at ``T_i = T_L`` (a negative time) and
   equals 1 at one slot away (no compensation), so 1 is its floor.
5. On the two-dimensional grid ``E_i`` is the product of two normal densities (x and y)
   with the same ``sigma_i``, i.e. an isotropic 2-D normal around ``mu_L``.
6. ``V_i = 1 - |T_R - t_i| / T_s`` with ``T_s`` the span of the stored slots
   (``max T - min T``, 4 for ``T_1 .. T_5``), so ``V`` runs from 1 at ``T_R`` down to 0
   at the oldest slot; ``V`` is limited below by 0 if ``T_s`` is set smaller. An item
   whose ``E_i + w V_i`` is 0 (underflow far away and ``V_i = 0``) has priority +inf.
7. Ties in P (exact, e.g. two servers at the same distance) go to the lowest item id;
   a search whose remaining candidates are all +inf takes its lowest candidate id.
8. The last discovery point moves only for a discovery later than ``T_L`` (a target
   found at an older time says less about ``T_R``). It starts at the target's ``T_0``
   server (``workloads.person_search``); the paper says "the simulator used the mu_0 as
   initial mu_L", the target's continuous position, which the simulator can use instead
   (:data:`STARTS`) to measure the difference.
9. Total response time of a run is the sum over requests of each request's response
   time: from its arrival (0) to the end of the analysis that found its ``T_R`` item.
   Servers enter only through how long each analysis took on them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from workloads.person_search import Items, SearchWorld

COMPENSATIONS = ("none", "response-time")
#: The candidate-set rules (module note 3): which undispatched items Eq. 1 ranks
CANDIDATE_RULES = ("unanalysed", "after-discovery")
#: What each candidate-set rule keeps, in words (reports and documentation)
CANDIDATE_RULE_TEXT = {
    "unanalysed": "every item not yet analysed, those at or before T_L included",
    "after-discovery": "only the items not yet analysed that are later than T_L",
}
SHARING_MODES = ("paper", "processor-sharing")
#: Where a search's first ``mu_L`` is: its target's ``T_0`` server (``server``, what both
#: executors run: the coordinator knows servers only) or the continuous ``mu_0`` the paper
#: names (``continuous``, a simulator-only reading to measure what the choice changes)
STARTS = ("server", "continuous")
#: How an analysis's duration accounts Eq. 7-8: ``plain`` (as the response model gives
#: it) or ``compensated`` (times ``compensation_factor(T_i, T_L)``, the paper's 1-D reading)
ACCOUNTINGS = ("plain", "compensated")
#: What a scenario's policy entry may set besides the policy's own parameters, for any
#: policy, and the value both executors run with. ``start`` (:data:`STARTS`) and
#: ``sequential`` (whether a batch of simultaneous choices sees the earlier choices of
#: the batch, module note of :mod:`testbed.systems.person_search.sim`) change the run;
#: ``isolated`` also records each search run alone on idle servers. The coordinator runs
#: only the defaults: the other values are readings the simulator measures.
RUN_OPTIONS: dict[str, Any] = {"start": "server", "sequential": True, "isolated": False}
_SQRT_2PI = math.sqrt(2.0 * math.pi)


# --- the formula -------------------------------------------------------------------------


@dataclass(frozen=True)
class PriorityParams:
    """Parameters of Eq. 1 (defaults are the paper's).

    ``alpha`` and ``sigma_d`` give ``sigma_i = alpha |T_i - T_L| + sigma_d``; ``w`` weighs
    the value of data; ``tc`` is the default response time Tc (model seconds, the same on
    every server as in the paper); ``t_s`` is ``T_s`` (None: the span of the stored
    slots); ``compensation`` is ``"none"`` or ``"response-time"`` (Tc -> Tc l_i in Eq. 1);
    ``candidates`` is ``"unanalysed"`` or ``"after-discovery"`` (see the module notes).
    """

    alpha: float = 0.5
    sigma_d: float = 0.5
    w: float = 0.001
    tc: float = 10.0
    t_s: float | None = None
    compensation: str = "none"
    candidates: str = "unanalysed"

    def __post_init__(self) -> None:
        """Refuse values for which Eq. 1 is undefined."""
        checks = (("alpha", self.alpha, 0.0, True), ("sigma_d", self.sigma_d, 0.0, False),
                  ("w", self.w, 0.0, True), ("tc", self.tc, 0.0, False))
        for name, value, low, closed in checks:
            ok = math.isfinite(value) and (value >= low if closed else value > low)
            if not ok:
                bound = ">=" if closed else ">"
                raise ValueError(f"{name}: expected a finite number {bound} {low:g}, "
                                 f"found {value!r}")
        if self.t_s is not None and not (math.isfinite(self.t_s) and self.t_s > 0):
            raise ValueError(f"t_s: expected a finite number > 0 or None, found {self.t_s!r}")
        if self.compensation not in COMPENSATIONS:
            raise ValueError(f"compensation: expected one of {', '.join(COMPENSATIONS)}, "
                             f"found {self.compensation!r}")
        if self.candidates not in CANDIDATE_RULES:
            raise ValueError(f"candidates: expected one of {', '.join(CANDIDATE_RULES)}, "
                             f"found {self.candidates!r}")


DEFAULT_PRIORITY = PriorityParams()


def reading(policy: str, accounting: str = "plain",
            params: Mapping[str, Any] | None = None) -> str:
    """The reading of the paper one run used, in a line for reports.

    Which reading of Eq. 7-8 sets the durations (``accounting``) and, for ``priority``
    (whose ``params`` are :class:`PriorityParams` fields), which reading of Eq. 1 ranks
    (``Tc`` as written or ``Tc l_i``), any parameter set away from the paper's, and the
    candidate-set rule. Random and load-balance use no Eq. 1 and only ``T_R`` items,
    which no candidate-set rule touches. Printed beside every reported number, so a
    reader knows what produced it.
    """
    given, options = split_run_options(params or {})
    head = f"{accounting} accounting"
    runs = [text for key, text in (("start", "first mu_L at the continuous mu_0"),
                                   ("sequential", "a batch's choices see the load before it"))
            if options.get(key, RUN_OPTIONS[key]) != RUN_OPTIONS[key]]
    if policy != "priority":
        return ", ".join([head, "T_R items only", *runs])
    chosen = PriorityParams(**{**given, "tc": given.get("tc", DEFAULT_PRIORITY.tc)})
    eq1 = "Eq. 1 with Tc l_i" if chosen.compensation == "response-time" else "Eq. 1 with Tc"
    tuned = [f"{name} = {given[name]:g}" for name in ("alpha", "sigma_d", "w", "t_s")
             if given.get(name) is not None and given[name] != getattr(DEFAULT_PRIORITY, name)]
    return ", ".join([head, eq1, *tuned, f"candidates {chosen.candidates}", *runs])


def split_run_options(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A policy entry's ``params`` split into the policy's own and the run options
    (:data:`RUN_OPTIONS`) among them."""
    own = {k: v for k, v in params.items() if k not in RUN_OPTIONS}
    return own, {k: v for k, v in params.items() if k in RUN_OPTIONS}


def slot_span(items: Items) -> float:
    """``T_s`` by default: ``max T - min T`` of the stored items (1 if a single slot)."""
    span = float(items.time.max() - items.time.min()) if items.size else 0.0
    return span if span > 0 else 1.0


def sigma_of(t_i: float, t_l: float, alpha: float = 0.5, sigma_d: float = 0.5) -> float:
    """Eq. 3 with ``|T_i - T_L|``: ``alpha |T_i - T_L| + sigma_d``."""
    return alpha * abs(t_i - t_l) + sigma_d


def compensation_factor(t_i: float, t_l: float) -> float:
    """Eq. 8 with ``|T_i - T_L|``, limited below by 1: ``max(1, 2 |T_i - T_L| - 1)``."""
    return max(1.0, 2.0 * abs(t_i - t_l) - 1.0)


def normal_density(d: float, sigma: float) -> float:
    """Eq. 2 for one axis: the normal density at distance ``d`` with std ``sigma``."""
    return math.exp(-(d * d) / (2.0 * sigma * sigma)) / (_SQRT_2PI * sigma)


def data_value(t_i: float, t_r: float, t_s: float) -> float:
    """Eq. 4: ``1 - |T_R - t_i| / T_s``, limited below by 0."""
    return max(0.0, 1.0 - abs(t_r - t_i) / t_s)


def _as_rows(values: Any, rows: int, width: int) -> np.ndarray:
    """``values`` as a float array of shape ``(rows, width)`` (broadcasting a scalar/row)."""
    array = np.asarray(values, dtype=float)
    return np.broadcast_to(array.reshape(-1, width) if array.ndim else array, (rows, width))


def unit_priority(items: Items, mu_l: Any, t_l: Any, t_r: Any,
                  params: PriorityParams = DEFAULT_PRIORITY,
                  candidates: np.ndarray | None = None) -> np.ndarray:
    """Eq. 1 per unit of ``k_i + 1``: ``Tc_i (l_i) / (E_i + w V_i)``, shape ``(S, I)``.

    ``mu_l`` is ``(S, 2)`` (or one ``(x, y)``), ``t_l`` and ``t_r`` ``(S,)`` or scalars.
    Entries that are not candidates (``candidates`` false, or at or before ``T_L`` under
    ``candidates="after-discovery"``) and entries with a zero denominator are +inf.
    Multiplying column i by ``k_i + 1`` gives :func:`priority_matrix`.

    How it is vectorised: everything that depends on time only (``sigma_i``, the
    normalisation, ``w V_i``, ``Tc_i l_i``) is computed per search and distinct slot time
    (``S x U``), the squared distances per search and server; the full ``S x I`` work is
    then five passes (scale, add the log-normalisation, exp, add ``w V``, divide). Items
    laid out as :meth:`Items.for_layout` makes them (server-major, the same slots on every
    server) are broadcast as ``S x N x U`` without any gather.
    """
    mu = np.asarray(mu_l, dtype=float).reshape(-1, 2)
    rows = mu.shape[0]
    tl = _as_rows(t_l, rows, 1)
    tr = _as_rows(t_r, rows, 1)
    regular = items.regular
    if regular:
        times = items.time[: items.slots]
        inverse = None
    else:
        times, inverse = np.unique(items.time, return_inverse=True)
    gap = np.abs(times[None, :] - tl)  # S x U
    sigma = params.alpha * gap + params.sigma_d
    coef = -0.5 / (sigma * sigma)
    log_norm = -float(items.dims) * np.log(_SQRT_2PI * sigma)
    t_s = params.t_s if params.t_s is not None else slot_span(items)
    weighted_value = params.w * np.maximum(0.0, 1.0 - np.abs(tr - times[None, :]) / t_s)
    tc = np.full(gap.shape, params.tc)
    if params.compensation == "response-time":
        tc *= np.maximum(1.0, 2.0 * gap - 1.0)
    if regular:
        step = items.slots
        dx = items.x[::step][None, :] - mu[:, 0:1]  # S x N
        d2 = dx * dx
        if items.dims == 2:
            dy = items.y[::step][None, :] - mu[:, 1:2]
            d2 += dy * dy
        work = d2[:, :, None] * coef[:, None, :]  # S x N x U
        work += log_norm[:, None, :]
        np.exp(work, out=work)
        work += weighted_value[:, None, :]
        with np.errstate(divide="ignore", over="ignore"):  # tiny or zero denominators: +inf
            np.divide(tc[:, None, :], work, out=work)
        out = work.reshape(rows, items.size)
    else:
        dx = items.x[None, :] - mu[:, 0:1]
        d2 = dx * dx
        if items.dims == 2:
            dy = items.y[None, :] - mu[:, 1:2]
            d2 += dy * dy
        d2 *= coef[:, inverse]
        d2 += log_norm[:, inverse]
        np.exp(d2, out=d2)
        d2 += weighted_value[:, inverse]
        with np.errstate(divide="ignore", over="ignore"):
            out = np.divide(tc[:, inverse], d2, out=d2)
    if candidates is not None or params.candidates != "unanalysed":
        keep = effective_candidates(items, candidates, tl, params, rows)
        np.copyto(out, np.inf, where=~keep)
    return out


def effective_candidates(items: Items, candidates: np.ndarray | None, t_l: Any,
                         params: PriorityParams = DEFAULT_PRIORITY,
                         rows: int | None = None) -> np.ndarray:
    """The items Eq. 1 ranks, ``(S, I)`` bool: ``candidates`` (all items if None),
    minus the items at or before ``T_L`` under ``candidates="after-discovery"``."""
    tl = np.asarray(t_l, dtype=float).reshape(-1, 1)
    rows = tl.shape[0] if rows is None else rows
    keep = np.ones((rows, items.size), dtype=bool) if candidates is None else \
        np.broadcast_to(np.asarray(candidates, dtype=bool).reshape(-1, items.size),
                        (rows, items.size))
    if params.candidates == "after-discovery":
        keep = keep & (items.time[None, :] > tl)
    return keep


def priority_matrix(items: Items, mu_l: Any, t_l: Any, t_r: Any, load: Any,
                    params: PriorityParams = DEFAULT_PRIORITY,
                    candidates: np.ndarray | None = None) -> np.ndarray:
    """Eq. 1 for ``S`` searches and all ``I`` items at once: ``P``, shape ``(S, I)``.

    ``P_i = Tc_i (k_i + 1) / (E_i + w V_i)`` (``Tc_i l_i`` with
    ``compensation="response-time"``), ``load[s]`` being the analyses running on server
    ``s`` (``k``). Non-candidates are +inf. Vectorised with numpy; :func:`priority_loop`
    is the reference.
    """
    factor = np.asarray(load, dtype=float)[items.server] + 1.0
    unit = unit_priority(items, mu_l, t_l, t_r, params, candidates)
    with np.errstate(over="ignore"):  # huge finite priorities may round to +inf
        unit *= factor[None, :]
    return unit


def priority_loop(items: Items, mu_l: Sequence[Sequence[float]], t_l: Sequence[float],
                  t_r: Sequence[float], load: Sequence[int],
                  params: PriorityParams = DEFAULT_PRIORITY,
                  candidates: Sequence[Sequence[bool]] | None = None) -> list[list[float]]:
    """The reference: Eq. 1 item by item in plain Python (lists in, lists out).

    Same conventions as :func:`priority_matrix` (``S`` searches, +inf for items that are
    not candidates or have a zero denominator).
    """
    server = items.server.tolist()
    xs, ys, times = items.x.tolist(), items.y.tolist(), items.time.tolist()
    t_s = params.t_s if params.t_s is not None else slot_span(items)
    out: list[list[float]] = []
    for s, (mx, my) in enumerate(mu_l):
        row: list[float] = []
        for i in range(len(server)):
            if candidates is not None and not candidates[s][i]:
                row.append(math.inf)
                continue
            if params.candidates == "after-discovery" and times[i] <= t_l[s]:
                row.append(math.inf)
                continue
            sigma = sigma_of(times[i], t_l[s], params.alpha, params.sigma_d)
            existence = normal_density(xs[i] - mx, sigma)
            if items.dims == 2:
                existence *= normal_density(ys[i] - my, sigma)
            value = data_value(times[i], t_r[s], t_s)
            tc = params.tc
            if params.compensation == "response-time":
                tc *= compensation_factor(times[i], t_l[s])
            denominator = existence + params.w * value
            k = load[server[i]] + 1
            row.append(tc * k / denominator if denominator > 0 else math.inf)
        out.append(row)
    return out


def select(priorities: np.ndarray, candidates: np.ndarray | None = None) -> np.ndarray:
    """The chosen item per row: smallest P, ties to the lowest id; -1 without candidates.

    A row whose candidates are all +inf takes its lowest candidate (``candidates``
    defaults to the finite entries).
    """
    p = np.atleast_2d(priorities)
    cand = np.isfinite(p) if candidates is None else \
        np.broadcast_to(np.atleast_2d(np.asarray(candidates, dtype=bool)), p.shape)
    best = np.argmin(np.where(cand, p, np.inf), axis=1)
    rows = np.arange(p.shape[0])
    fallback = ~cand[rows, best]
    best = np.where(fallback, np.argmax(cand, axis=1), best)
    return np.where(cand.any(axis=1), best, -1)


def select_loop(priorities: Sequence[Sequence[float]],
                candidates: Sequence[Sequence[bool]] | None = None) -> list[int]:
    """The reference of :func:`select` in plain Python."""
    out = []
    for s, row in enumerate(priorities):
        allowed = [i for i, p in enumerate(row)
                   if (candidates[s][i] if candidates is not None else math.isfinite(p))]
        if not allowed:
            out.append(-1)
            continue
        best = allowed[0]
        for i in allowed[1:]:
            if row[i] < row[best]:
                best = i
        out.append(best)
    return out


# --- Algorithm 1 -----------------------------------------------------------------------------


class Chooser(Protocol):
    """What a search asks of its policy (every
    :class:`~nodes.person_search.policies.SearchPolicy` is one): the item to analyse
    next, given the search so far and the analyses running on each server. Named here
    so that the model does not import the policies, which import the model."""

    def choose(self, search: Search, load: np.ndarray) -> int: ...


class Search:
    """Algorithm 1 for one search request, as a state machine (one item at a time).

    State: the last discovery point ``(mu_l, t_l)``, the required time ``t_r``, the
    ``candidates`` not yet dispatched, the ``pending`` item (dispatched, no answer yet),
    the ``analysed`` items in order, ``discoveries`` (analysed items that contained the
    target) and ``found`` (the ``T_R`` item with the target, which ends the search).

    Use :meth:`next_item` (or :meth:`dispatch` with a choice made elsewhere, e.g. by
    :meth:`~nodes.person_search.policies.SearchPolicy.choose_many`),
    send the item to its server, then :meth:`answer`.
    """

    def __init__(self, search_id: int, items: Items, mu_l: tuple[float, float],
                 t_l: float = 0.0, t_r: float | None = None) -> None:
        """A search starting from ``(mu_l, t_l)`` for the target at ``t_r`` (latest slot)."""
        self.search_id = search_id
        self.items = items
        self.mu_l = (float(mu_l[0]), float(mu_l[1]))
        self.t_l = float(t_l)
        self.t_r = float(items.time.max()) if t_r is None else float(t_r)
        self.candidates = np.ones(items.size, dtype=bool)
        self.pending: int | None = None
        self.analysed: list[int] = []
        self.discoveries: list[int] = []
        self.found: int | None = None

    @classmethod
    def for_target(cls, world: SearchWorld, target: int, start: str = "server") -> Search:
        """The search for ``target`` of ``world`` from ``T_L = 0``: ``mu_L`` its ``T_0``
        server's position (``start="server"``, module note 8) or its continuous ``T_0``
        position ``mu_0`` (``start="continuous"``, the paper's own words; see
        :data:`STARTS`)."""
        if start not in STARTS:
            raise ValueError(f"start: expected one of {', '.join(STARTS)}, found {start!r}")
        mu = world.start_point(target) if start == "server" else \
            (float(world.start[target, 0]), float(world.start[target, 1]))
        return cls(target, world.items, mu, 0.0, float(world.slots))

    @property
    def done(self) -> bool:
        """Whether the required item has been found."""
        return self.found is not None

    def next_item(self, policy: Chooser, load: np.ndarray) -> int:
        """Ask ``policy`` for the next item and dispatch it (Algorithm 1, lines 3-11)."""
        self._check_ready()
        return self.dispatch(policy.choose(self, load))

    def dispatch(self, item: int) -> int:
        """Mark ``item`` as sent for analysis: pending, and no longer a candidate."""
        self._check_ready()
        if not self.candidates[item]:
            raise ValueError(f"search {self.search_id}: item {item} is not a candidate")
        self.candidates[item] = False
        self.pending = item
        return item

    def answer(self, item: int, present: bool) -> bool:
        """Take the analysis result of ``item``; return whether the search is done.

        Lines 12-18: the ``T_R`` item with the target ends the search; an item with the
        target at a time later than ``T_L`` moves the last discovery point to it (its
        server's position and time); anything else only leaves the candidate set.
        """
        if item != self.pending:
            raise ValueError(f"search {self.search_id}: answer for item {item}, but "
                             f"{self.pending} is pending")
        self.pending = None
        self.analysed.append(item)
        if present:
            self.discoveries.append(item)
            t_i = float(self.items.time[item])
            if t_i == self.t_r:
                self.found = item
            elif t_i > self.t_l:
                self.mu_l = self.items.position(item)
                self.t_l = t_i
        return self.done

    def run(self, policy: Chooser, contains: Callable[[int], bool],
            load: np.ndarray | None = None) -> list[int]:
        """Run the search alone to the end with ``contains`` answering; the analysed ids.

        ``load`` (default: all servers idle) is the same for every choice. Raises if the
        candidates run out before the required item is found (inconsistent answers).
        """
        k = np.zeros(self.items.n_servers, dtype=np.int64) if load is None else load
        while not self.done:
            if not self.candidates.any():
                raise ValueError(f"search {self.search_id}: no candidates left, not found")
            item = self.next_item(policy, k)
            self.answer(item, bool(contains(item)))
        return list(self.analysed)

    def _check_ready(self) -> None:
        if self.done:
            raise ValueError(f"search {self.search_id} is already done")
        if self.pending is not None:
            raise ValueError(f"search {self.search_id}: item {self.pending} is still pending")


# --- response model --------------------------------------------------------------------------


class AnalysisServer:
    """The analyses running on one edge server, in model time.

    The paper: an analysis takes ``Tc`` times the number of analyses running on the
    server. In a discrete-event setting that has two readings (``sharing``):

    * ``"paper"`` (default): when an analysis starts and the server then runs ``n``
      analyses (itself included), its duration is fixed at ``Tc * factor * n``; later
      arrivals and departures do not change it. This is the paper's simple rule.
    * ``"processor-sharing"``: every analysis needs ``Tc * factor`` of work and all ``n``
      running analyses progress at rate ``1 / n`` each; completion instants move whenever
      an analysis starts or ends. This is what a server sharing its CPU among concurrent
      requests (the emulated edge server) does.

    ``factor`` is 1 normally, or :func:`compensation_factor` to account Eq. 7's
    compensated response time ``Tc'_i = Tc l_i`` in the simulation. The simulator asks
    :meth:`next_completion` after every event and calls :meth:`complete` at that instant.
    """

    def __init__(self, tc: float = 10.0, sharing: str = "paper") -> None:
        """A server whose analyses take ``tc`` model seconds alone."""
        if not (math.isfinite(tc) and tc > 0):
            raise ValueError(f"tc: expected a finite number > 0, found {tc!r}")
        if sharing not in SHARING_MODES:
            raise ValueError(f"sharing: expected one of {', '.join(SHARING_MODES)}, "
                             f"found {sharing!r}")
        self.tc = float(tc)
        self.sharing = sharing
        self._ends: list[tuple[float, int, Hashable]] = []  # paper: (end, order, job)
        self._work: dict[Hashable, float] = {}  # processor sharing: remaining work
        self._order: dict[Hashable, int] = {}
        self._clock = 0.0
        self._admitted = 0

    @property
    def running(self) -> int:
        """Analyses running now (``k`` as the policies see it)."""
        return len(self._ends) if self.sharing == "paper" else len(self._work)

    def admit(self, now: float, job: Hashable, factor: float = 1.0) -> float:
        """Start ``job`` at ``now``; return its completion instant as known now.

        Under ``"paper"`` that instant is final; under processor sharing it is the instant
        if no further analysis started (later arrivals move it): with remaining works
        ``r_m``, job j ends after ``sum_m min(r_m, r_j)``.
        """
        self._admitted += 1
        if self.sharing == "paper":
            end = now + self.tc * factor * (len(self._ends) + 1)
            heapq.heappush(self._ends, (end, self._admitted, job))
            return end
        if job in self._work:
            raise ValueError(f"job {job!r} is already running")
        self._advance(now)
        work = self.tc * factor
        self._work[job] = work
        self._order[job] = self._admitted
        return now + sum(min(r, work) for r in self._work.values())

    def next_completion(self) -> tuple[float, Hashable] | None:
        """``(instant, job)`` of the next analysis to end, or None when idle."""
        if self.sharing == "paper":
            if not self._ends:
                return None
            end, _, job = self._ends[0]
            return end, job
        if not self._work:
            return None
        job = min(self._work, key=lambda j: (self._work[j], self._order[j]))
        return self._clock + self._work[job] * len(self._work), job

    def complete(self, now: float) -> Hashable:
        """End the analysis that :meth:`next_completion` names, at ``now``; return it."""
        nxt = self.next_completion()
        if nxt is None:
            raise ValueError("no analysis is running")
        end, job = nxt
        if now < end - 1e-9 * max(1.0, abs(end)):
            raise ValueError(f"job {job!r} ends at {end!r}, not at {now!r}")
        if self.sharing == "paper":
            heapq.heappop(self._ends)
            return job
        self._advance(now)
        del self._work[job]
        del self._order[job]
        return job

    def _advance(self, now: float) -> None:
        """Processor sharing: serve every running analysis up to ``now``."""
        if now < self._clock - 1e-9 * max(1.0, abs(self._clock)):
            raise ValueError(f"time goes back from {self._clock!r} to {now!r}")
        if self._work:
            served = (now - self._clock) / len(self._work)
            for job in self._work:
                self._work[job] = max(0.0, self._work[job] - served)
        self._clock = max(self._clock, now)
