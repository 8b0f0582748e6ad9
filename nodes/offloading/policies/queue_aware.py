"""Queue-aware offloading: the hybrid delay estimator of the paper, its parts and ablations.

Every policy here predicts, for each target ``i`` with at least one active worker, the
total latency of the task if sent there,

    T_i = W_i + 1 / mu_i + D_i

(``W_i`` the waiting time, ``mu_i = service_rate`` per worker, ``D_i = delay_s`` the
observed communication delay), and sends the task to the target with the smallest
*score*: ``T_i``, multiplied by ``penalty`` when the target's utilisation
``rho_i = lambda_i / (n_i mu_i)`` exceeds ``rho_threshold`` (0.9). With probability
``epsilon`` (0.05) the decision instead explores: a target chosen uniformly among those
with an active worker, so the rate windows of rarely chosen tiers keep being fed. The
returned :class:`Decision` carries ``estimate_s = T`` of the chosen target, unpenalised
(the penalty steers, it does not predict), so its error against the measured latency
can be computed. The policies differ only in ``W_i``:

``model-only``  ``W_model``: Allen-Cunneen G/G/c with ``n_i`` servers, ``Ca^2 = ca2``
                (1, Poisson) and ``Cs^2 = pareto_scv(alpha)`` (alpha 2.5);
``queue-only``  ``W_queue = q_i / (n_i mu_i)``, the time the active workers need to
                drain the ``q_i`` waiting tasks at their mean rate;
``hybrid``      ``(1 - beta_i) W_model + beta_i W_queue`` with ``beta_i = min(1, q_i / c_i)``:
                pure model on an empty queue, pure observation once ``q_i >= c_i``;
``hybrid-global-rate``  ``hybrid`` fed one global rate proxy instead of each tier's own
                rate (ablation of the per-tier windows);
``hybrid-fixed-beta``   ``hybrid`` with a constant ``beta`` (ablation of the load-dependent
                blend).

Inputs, all from :class:`TargetState`: ``q_i = queue`` (tasks waiting, not in service),
``n_i = active``, ``c_i = c``, ``mu_i = service_rate``, ``D_i = delay_s`` and
``lambda_i = arrival_rate``, the tier server's own sliding-window count of arrivals from
every client (window ``--window-s``, 10 wall seconds by default).

Special cases. A target with ``n_i = 0`` cannot serve: every ``W`` is infinite and it is
never chosen while another target can serve; if none can, the least loaded target is
taken (:func:`~nodes.offloading.policies.jsq.least_loaded`) with no estimate. An overloaded
target (``rho_i >= RHO_CAP``, which includes every unstable one) has no steady-state
wait; :func:`model_wait` replaces it by a finite, documented overload estimate instead
of dividing by zero or going negative.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

import numpy as np

from nodes.offloading.policies.base import Decision, Policy, TargetState, TaskInfo, View
from nodes.offloading.policies.jsq import least_loaded
from nodes.offloading.policies.random_policy import serving_targets
from nodes.offloading.queueing import allen_cunneen_wait, pareto_scv
from testbed.errors import TestbedError

#: Utilisation from which the Allen-Cunneen mean is no longer used as such (see
#: :func:`model_wait`): it diverges as ``rho -> 1`` and does not exist beyond.
RHO_CAP = 0.99
#: Default multiplicative penalty on the score of a target above ``rho_threshold``: a
#: nearly saturated tier is chosen only if it promises less than half the latency of the
#: best unsaturated one.
DEFAULT_PENALTY = 2.0
#: Penalty factors of the sensitivity sweep the reports run (1.0 means no penalty).
PENALTY_SWEEP = (1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
#: Uniform variates drawn from the generator at a time (a per-call draw costs more than
#: the rest of a decision); the stream, hence every choice, still depends only on ``seed``.
_UNIFORM_BLOCK = 1024
#: Entries after which a policy's per-target memo (:meth:`QueueAwarePolicy.choose`) and
#: its cache of name orders start afresh; a view's states change only when polled, so a
#: few thousand cover many poll rounds.
_MEMO_LIMIT = 4096


@lru_cache(maxsize=4096)
def model_wait(lam: float, mu: float, n: int, q: int, ca2: float, cs2: float) -> float:
    """``W_model``: the Allen-Cunneen G/G/n wait, with a finite overload treatment.

    For ``rho = lam / (n mu) < RHO_CAP`` it is :func:`allen_cunneen_wait`. From
    ``RHO_CAP`` on (the mean diverges at 1 and is undefined above), it is

        W_AC(RHO_CAP) * rho / RHO_CAP + (q + 1) / (n mu)

    the largest wait the model credibly gives, growing linearly with the excess load so
    that a more overloaded tier ranks worse, plus the time the saturated workers need to
    drain the ``q`` waiting tasks and free one worker for the new task (what a FIFO
    arrival actually waits for at a saturated station). It jumps upwards at ``RHO_CAP``
    and never decreases with ``rho`` or ``q``. ``inf`` when ``n <= 0`` or ``mu <= 0``.
    Cached: a view's states change only when polled, so inputs repeat across decisions.
    """
    capacity = n * mu
    if n <= 0 or mu <= 0:
        return math.inf
    rho = lam / capacity
    if rho < RHO_CAP:
        return allen_cunneen_wait(lam, mu, n, ca2, cs2)
    capped = allen_cunneen_wait(RHO_CAP * capacity, mu, n, ca2, cs2)
    return capped * rho / RHO_CAP + (q + 1) / capacity


def queue_wait(q: int, n: int, mu: float) -> float:
    """``W_queue = q / (n mu)``; ``inf`` when the tier has no active capacity."""
    if n <= 0 or mu <= 0:
        return math.inf
    return q / (n * mu)


def blend_weight(q: int, c: int) -> float:
    """The paper's load-dependent weight ``beta = min(1, q / c)`` (1 when ``c <= 0``)."""
    return min(1.0, q / c) if c > 0 else 1.0


def blend(beta: float, w_model: float, w_queue: float) -> float:
    """``(1 - beta) w_model + beta w_queue``, with exact ends (no ``0 * inf``)."""
    if beta <= 0.0:
        return w_model
    if beta >= 1.0:
        return w_queue
    return (1.0 - beta) * w_model + beta * w_queue


def check_param(policy: str, name: str, value: object, low: float, high: float = math.inf,
                *, low_open: bool = False) -> float:
    """Return ``value`` as a float if it is a number in range, else raise TestbedError.

    The range is ``[low, high]``, or ``(low, high]`` with ``low_open``.
    """
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    in_range = number is not None and math.isfinite(number) and low <= number <= high
    if not in_range or (low_open and number == low):
        bracket = "(" if low_open else "["
        raise TestbedError(
            f"policy {policy!r}: {name}: expected a number in {bracket}{low:g}, {high:g}], "
            f"found {value!r}"
        )
    return float(number)


@dataclass
class QueueAwarePolicy(Policy):
    """Shared inputs, scoring, penalty and exploration; subclasses define the wait ``W``.

    Parameters (keywords of ``make_policy``): ``epsilon`` exploration probability,
    ``penalty`` factor (>= 1) on the score above ``rho_threshold`` utilisation, ``alpha``
    the Pareto shape of service demands (> 2, for ``Cs^2``) and ``ca2`` the squared
    coefficient of variation of inter-arrival times. They are fixed once the policy is
    built: :meth:`choose` memoises each target's total and score on its inputs.
    """

    epsilon: float = 0.05
    penalty: float = DEFAULT_PENALTY
    rho_threshold: float = 0.9
    alpha: float = 2.5
    ca2: float = 1.0
    _cs2: float = field(init=False, repr=False, compare=False)
    _rng: np.random.Generator = field(init=False, repr=False, compare=False)
    _uniforms: list[float] = field(init=False, repr=False, compare=False)
    _memo: dict[tuple[str, int, int, int, float, float, float], tuple[float, Decision]] = \
        field(init=False, repr=False, compare=False)
    _orders: dict[tuple[str, ...], tuple[str, ...]] = field(init=False, repr=False,
                                                            compare=False)
    _own_rates: bool = field(init=False, repr=False, compare=False)
    _reuse: bool = field(init=False, repr=False, compare=False)
    #: the last mapping ranked, its ranking and best entry (see :meth:`choose`)
    _last: tuple[Mapping[str, TargetState], list[tuple[float, Decision]],
                 tuple[float, Decision]] | None = field(init=False, repr=False, compare=False)
    keeps_views: ClassVar[bool] = False
    reads_age: ClassVar[bool] = False

    def __post_init__(self) -> None:
        """Validate the parameters and create the policy's own random stream."""
        self.epsilon = check_param(self.name, "epsilon", self.epsilon, 0.0, 1.0)
        self.penalty = check_param(self.name, "penalty", self.penalty, 1.0)
        self.rho_threshold = check_param(self.name, "rho_threshold", self.rho_threshold, 0.0,
                                         low_open=True)
        self.alpha = check_param(self.name, "alpha", self.alpha, 2.0, low_open=True)
        self.ca2 = check_param(self.name, "ca2", self.ca2, 0.0)
        self._cs2 = pareto_scv(self.alpha)
        self._rng = np.random.default_rng(self.seed)
        self._uniforms = []
        self._memo = {}
        self._orders = {}
        self._last = None
        # Each tier's own rate (arrival_rates not overridden): read inline by choose.
        self._own_rates = type(self).arrival_rates is QueueAwarePolicy.arrival_rates
        # The last ranking may be reused only while nothing it read can change within
        # one mapping: not a target's age, and not what an overridden rate hook reads.
        self._reuse = self._own_rates and not type(self).reads_age

    @abstractmethod
    def wait(self, target: TargetState, lam: float) -> float:
        """Estimated waiting time ``W`` (model seconds) at ``target`` with arrival rate ``lam``.

        It may read only ``lam``, the policy's parameters and the target's ``queue``,
        ``active``, ``c`` and ``service_rate``: :meth:`choose` memoises on those.
        """

    def arrival_rates(self, view: View, targets: Sequence[TargetState]) -> list[float]:
        """``lambda_i`` for each of ``targets``: each tier's own observed rate."""
        return [t.arrival_rate for t in targets]

    def w_model(self, target: TargetState, lam: float) -> float:
        """:func:`model_wait` for ``target`` with this policy's ``Ca^2`` and ``Cs^2``."""
        return model_wait(lam, target.service_rate, target.active, target.queue, self.ca2,
                          self._cs2)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the lowest (penalised) predicted latency, or explore with ``epsilon``.

        The targets able to serve are ranked in name order (ties go to the first). A
        target's score and decision depend only on its name, ``lam``, ``delay_s`` and
        the inputs of :meth:`wait`, which change only when the client polls, so they are
        memoised on those (:meth:`_rank`); the name order is cached per tuple of keys.
        The ranking of the last mapping is kept too: shown the same mapping object
        again (a caller never changes a mapping it has shown, see :class:`View`), the
        policy only draws whether to explore. A subclass that reads ages
        (``reads_age``) or overrides :meth:`arrival_rates` ranks afresh every time.
        """
        targets = view.targets
        last = self._last
        if last is not None and last[0] is targets and self._reuse:
            ranked, best = last[1], last[2]
        else:
            ranked, best = self._ranking(view)
            if best is None:
                return Decision(least_loaded(serving_targets(view)).name, None)
            self._last = (targets, ranked, best)
        uniforms = self._uniforms
        if (uniforms.pop() if uniforms else self._uniform()) < self.epsilon:
            best = ranked[min(int(self._uniform() * len(ranked)), len(ranked) - 1)]
        return best[1]

    def _ranking(self, view: View) -> tuple[list[tuple[float, Decision]],
                                            tuple[float, Decision] | None]:
        """The (score, decision) of each target able to serve, in name order, and the
        best one (the first of the lowest score; ``None`` if no target can serve)."""
        targets = view.targets
        keys = tuple(targets)
        order = self._orders.get(keys)
        if order is None:
            if len(self._orders) >= _MEMO_LIMIT:
                self._orders.clear()
            order = self._orders[keys] = tuple(sorted(keys, key=lambda n: targets[n].name))
        if self._own_rates:
            rates = None
        else:
            able = [t for key in order if (t := targets[key]).active > 0 and t.service_rate > 0]
            rates = self.arrival_rates(view, able) if able else []
        memo = self._memo
        ranked: list[tuple[float, Decision]] = []
        best, best_score = None, math.inf
        for key in order:
            target = targets[key]
            active, rate = target.active, target.service_rate
            if active > 0 and rate > 0:
                lam = target.arrival_rate if rates is None else rates[len(ranked)]
                memo_key = (target.name, target.queue, active, target.c, rate,
                            target.delay_s, lam)
                known = memo.get(memo_key) or self._rank(target, lam, memo_key)
                score = known[0]
                if score < best_score:
                    best, best_score = known, score
                elif best is None:  # every score so far infinite: the first one
                    best = known
                ranked.append(known)
        return ranked, best

    def _rank(self, target: TargetState, lam: float,
              key: tuple[str, int, int, int, float, float, float]) -> tuple[float, Decision]:
        """Memoise and return ``target``'s (penalised) score and the decision to send there.

        The decision's estimate is the unpenalised total ``W + 1 / mu + D`` (none if not
        finite). Decisions are immutable, so the memoised one is returned as is.
        """
        total = self.wait(target, lam) + 1.0 / target.service_rate + target.delay_s
        rho = lam / (target.active * target.service_rate)
        score = total * self.penalty if rho > self.rho_threshold else total
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        known = self._memo[key] = (
            score, Decision(target.name, total if math.isfinite(total) else None))
        return known

    def _uniform(self) -> float:
        """The next U(0, 1) variate of the policy's stream."""
        if not self._uniforms:
            self._uniforms = self._rng.random(_UNIFORM_BLOCK).tolist()[::-1]
        return self._uniforms.pop()


@dataclass
class ModelOnlyPolicy(QueueAwarePolicy):
    """``W = W_model``: the analytical Allen-Cunneen estimate alone."""

    name: str = field(default="model-only", init=False)

    def wait(self, target: TargetState, lam: float) -> float:
        """Allen-Cunneen G/G/n wait (with the overload treatment of :func:`model_wait`)."""
        return self.w_model(target, lam)


@dataclass
class QueueOnlyPolicy(QueueAwarePolicy):
    """``W = W_queue``: the observed backlog alone."""

    name: str = field(default="queue-only", init=False)

    def wait(self, target: TargetState, lam: float) -> float:
        """``q / (n mu)`` from the observed queue."""
        return queue_wait(target.queue, target.active, target.service_rate)


@dataclass
class HybridPolicy(QueueAwarePolicy):
    """The paper's estimator: model and observation blended by ``beta = min(1, q / c)``."""

    name: str = field(default="hybrid", init=False)

    def weight(self, target: TargetState) -> float:
        """The blend weight of the observed backlog at ``target``."""
        return blend_weight(target.queue, target.c)

    def wait(self, target: TargetState, lam: float) -> float:
        """``(1 - beta) W_model + beta W_queue`` (``W_model``, which then has no weight, is
        not computed when ``beta >= 1``)."""
        beta = self.weight(target)
        w_queue = queue_wait(target.queue, target.active, target.service_rate)
        if beta >= 1.0:
            return w_queue
        return blend(beta, self.w_model(target, lam), w_queue)


@dataclass
class HybridGlobalRatePolicy(HybridPolicy):
    """Ablation: every tier gets the same rate, the total observed rate split evenly.

    ``lambda_i = (sum of every target's arrival_rate) / (number of targets in the
    view)``: one system-wide proxy, as a client without per-tier windows would use. It is
    exact under a balanced split and biased under skewed traffic (a hot edge looks cooler
    and an idle cloud busier than they are), which is what the paper's per-tier windows
    avoid.
    """

    name: str = field(default="hybrid-global-rate", init=False)

    def arrival_rates(self, view: View, targets: Sequence[TargetState]) -> list[float]:
        """The same even share of the total observed rate for every target."""
        share = sum(t.arrival_rate for t in view.targets.values()) / len(view.targets)
        return [share] * len(targets)


@dataclass
class HybridFixedBetaPolicy(HybridPolicy):
    """Ablation: a constant blend weight ``beta`` (default 0.5) instead of ``min(1, q / c)``."""

    name: str = field(default="hybrid-fixed-beta", init=False)
    beta: float = 0.5

    def __post_init__(self) -> None:
        """Validate ``beta`` in [0, 1] on top of the shared parameters."""
        super().__post_init__()
        self.beta = check_param(self.name, "beta", self.beta, 0.0, 1.0)

    def weight(self, target: TargetState) -> float:
        """The constant ``beta``, whatever the backlog."""
        return self.beta
