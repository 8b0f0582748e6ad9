"""The person-search policies: which item a search analyses next.

``priority`` (Eq. 1, :class:`PriorityPolicy`), ``random`` and ``load-balance`` (the
paper's baselines) share :class:`SearchPolicy`. They see a search's state
(:class:`SearchState`) and the number of analyses running on every server now
(``load``), never the ground truth, so the same objects choose in the simulator
(:mod:`testbed.systems.person_search.sim`) and in the emulated coordinator
(``nodes/person_search/coordinator.py``). The maths they rank items with (Eq. 1-4,
:func:`~nodes.person_search.model.priority_matrix`) and the gaps of the
paper's text they close are in :mod:`nodes.person_search.model`.

Pure (numpy only).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from nodes.person_search.model import (
    CANDIDATE_RULES,
    COMPENSATIONS,
    RUN_OPTIONS,
    STARTS,
    PriorityParams,
    effective_candidates,
    priority_matrix,
    select,
    split_run_options,
    unit_priority,
)
from testbed.checks import is_number
from workloads.person_search import Items


class SearchState(Protocol):
    """What a policy may read of a search
    (:class:`~nodes.person_search.model.Search` provides it)."""

    search_id: int
    mu_l: tuple[float, float]
    t_l: float
    t_r: float
    candidates: np.ndarray  # bool per item: not yet dispatched by this search


class SearchPolicy(ABC):
    """Chooses the next item of a search. Pure; randomness is seeded per search.

    ``load`` is the number of analyses running on each server now (``k``), an int array
    of length ``items.n_servers``. A policy never sees the ground truth.
    """

    name: ClassVar[str]

    def __init__(self, items: Items, seed: int = 0) -> None:
        """Bind the item metadata; ``seed`` seeds every search's random stream."""
        self.items = items
        self.seed = seed
        self._streams: dict[int, np.random.Generator] = {}

    def rng(self, search_id: int) -> np.random.Generator:
        """Search ``search_id``'s own stream, ``SeedSequence(seed, spawn_key=(id,))``.

        Per-search streams keep a search's draws independent of how the searches'
        decisions interleave (which differs between the simulator and the emulation).
        """
        stream = self._streams.get(search_id)
        if stream is None:
            stream = np.random.default_rng(np.random.SeedSequence(self.seed,
                                                                  spawn_key=(search_id,)))
            self._streams[search_id] = stream
        return stream

    @abstractmethod
    def choose(self, search: SearchState, load: np.ndarray) -> int:
        """The item ``search`` analyses next (a candidate); raises if none is left."""

    def choose_many(self, searches: Sequence[SearchState], load: np.ndarray, *,
                    sequential: bool = True) -> list[int]:
        """The next item of each of ``searches``, decided in order.

        With ``sequential`` each choice counts as running on its server for the later
        ones (the paper's simulator selected for the requests one after the other);
        without it every search sees ``load`` as given. ``load`` is not modified.
        """
        k = np.array(load, dtype=np.int64)
        picks = []
        for search in searches:
            item = self.choose(search, k)
            picks.append(item)
            if sequential:
                k[self.items.server[item]] += 1
        return picks

    def _t_r_candidates(self, search: SearchState) -> np.ndarray:
        """Ids of the search's remaining items at the required time ``T_R``."""
        ids = np.flatnonzero(search.candidates & (self.items.time == search.t_r))
        if ids.size == 0:
            raise ValueError(f"search {search.search_id}: no item at T_R = {search.t_r:g} left")
        return ids


class PriorityPolicy(SearchPolicy):
    """``priority``: the item with the smallest Eq. 1 priority (see the module notes).

    ``P_i = Tc_i (k_i + 1) / (E_i + w V_i)`` over the search's remaining candidates,
    ties to the lowest item id. Deterministic; ``seed`` is unused.
    """

    name = "priority"

    def __init__(self, items: Items, seed: int = 0,
                 params: PriorityParams | None = None, **options: Any) -> None:
        """``params`` or keyword options (``alpha``, ``w``, ...) of :class:`PriorityParams`."""
        super().__init__(items, seed)
        if params is not None and options:
            raise ValueError("give either params or keyword options, not both")
        self.params = params if params is not None else PriorityParams(**options)

    def priorities(self, search: SearchState, load: np.ndarray) -> np.ndarray:
        """The search's P over all items (+inf for non-candidates), shape ``(I,)``."""
        return priority_matrix(self.items, search.mu_l, search.t_l, search.t_r, load,
                               self.params, search.candidates)[0]

    def choose(self, search: SearchState, load: np.ndarray) -> int:
        """The remaining item with the smallest P."""
        allowed = effective_candidates(self.items, search.candidates, search.t_l, self.params)
        item = int(select(self.priorities(search, load), allowed)[0])
        if item < 0:
            raise ValueError(f"search {search.search_id}: no candidate item left")
        return item

    def choose_many(self, searches: Sequence[SearchState], load: np.ndarray, *,
                    sequential: bool = True) -> list[int]:
        """Vectorised over the searches: one :func:`unit_priority` matrix for all.

        Without ``sequential`` it is one matrix product and one row-wise argmin; with it
        the rows are scaled by the load as it grows with each choice (one row at a time,
        each a numpy operation over the items). Same choices as :meth:`choose` in turn.
        """
        if not searches:
            return []
        mu = np.array([s.mu_l for s in searches], dtype=float)
        t_l = np.array([s.t_l for s in searches], dtype=float)
        t_r = np.array([s.t_r for s in searches], dtype=float)
        cand = effective_candidates(self.items, np.stack([s.candidates for s in searches]),
                                    t_l, self.params)
        unit = unit_priority(self.items, mu, t_l, t_r, self.params, cand)
        k = np.array(load, dtype=np.int64)
        if not sequential:
            with np.errstate(over="ignore"):
                scaled = unit * (k[self.items.server] + 1.0)[None, :]
            picks = select(scaled, cand)
            if (picks < 0).any():
                raise ValueError("a search has no candidate item left")
            return [int(p) for p in picks]
        out = []
        for row in range(len(searches)):
            with np.errstate(over="ignore"):
                scaled = unit[row] * (k[self.items.server] + 1.0)
            item = int(select(scaled, cand[row])[0])
            if item < 0:
                raise ValueError(f"search {searches[row].search_id}: no candidate item left")
            out.append(item)
            k[self.items.server[item]] += 1
        return out


class RandomPolicy(SearchPolicy):
    """``random``: a uniformly random remaining item at ``T_R``, per-search seeded stream.

    Dispatched items leave the search's candidates, so the draws are without replacement
    and at most one per server before the target is found.
    """

    name = "random"

    def choose(self, search: SearchState, load: np.ndarray) -> int:
        """A random remaining ``T_R`` item (``load`` is ignored)."""
        ids = self._t_r_candidates(search)
        return int(ids[self.rng(search.search_id).integers(ids.size)])


class LoadBalancePolicy(SearchPolicy):
    """``load-balance``: the remaining ``T_R`` item on the server with the fewest analyses
    running now; ties broken uniformly at random with the search's seeded stream (no draw
    when there is no tie)."""

    name = "load-balance"

    def choose(self, search: SearchState, load: np.ndarray) -> int:
        """The least-loaded server's ``T_R`` item."""
        ids = self._t_r_candidates(search)
        k = np.asarray(load)[self.items.server[ids]]
        best = ids[k == k.min()]
        if best.size == 1:
            return int(best[0])
        return int(best[self.rng(search.search_id).integers(best.size)])


SEARCH_POLICIES: dict[str, type[SearchPolicy]] = {
    p.name: p for p in (PriorityPolicy, RandomPolicy, LoadBalancePolicy)
}


def make_search_policy(name: str, items: Items, seed: int = 0, **options: Any) -> SearchPolicy:
    """A fresh policy ``name`` over ``items``; options go to :class:`PriorityParams`."""
    cls = SEARCH_POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown search policy {name!r}; known: "
                         f"{', '.join(sorted(SEARCH_POLICIES))}")
    if options and cls is not PriorityPolicy:
        raise ValueError(f"search policy {name!r} takes no options, found {sorted(options)}")
    return cls(items, seed, **options)


#: The priority parameters a scenario's policy entry may set, with the choices of the
#: textual ones (``None``: a finite number; ``t_s`` may also be null). ``tc`` is not
#: among them: Eq. 1's Tc is the edge servers' (the scenario's ``tc``).
PRIORITY_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "alpha": None, "sigma_d": None, "w": None, "t_s": None,
    "compensation": COMPENSATIONS, "candidates": CANDIDATE_RULES,
}


def _check_option(key: str, value: Any) -> None:
    """Refuse a value of the wrong JSON kind for priority option ``key``."""
    choices = PRIORITY_OPTIONS[key]
    if choices is not None:
        if value not in choices:
            raise ValueError(f"params.{key}: expected one of {', '.join(choices)}, "
                             f"found {value!r}")
        return
    if not (is_number(value, finite=True) or (key == "t_s" and value is None)):
        kind = "a finite number or null" if key == "t_s" else "a finite number"
        raise ValueError(f"params.{key}: expected {kind}, found {value!r}")


def check_policy_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario loader's check of a person-search policy entry's ``params`` (the
    system's ``policy_params`` hook): returns them as given, or raises
    ``ValueError("params.<field>: expected ..., found ...")``, which the loader reports
    at ``policies[i].params.<field>`` of the file.

    ``priority`` takes :data:`PRIORITY_OPTIONS` (the candidate-set rule ``candidates``
    among them); ``random`` and ``load-balance`` take none. Both executors pass the
    parameters to :func:`make_search_policy` (the simulator directly, the emulation
    through the coordinator's ``policy_params``). Every policy also takes the run
    options :data:`~nodes.person_search.model.RUN_OPTIONS` (``start`` one of
    :data:`~nodes.person_search.model.STARTS`, ``sequential`` and ``isolated`` true or
    false), which the executors apply to the run, not to the policy.
    """
    own, options = split_run_options(params)
    for key, value in options.items():
        allowed = STARTS if key == "start" else (True, False)
        if value not in allowed or (key != "start" and not isinstance(value, bool)):
            raise ValueError(f"params.{key}: expected one of "
                             f"{', '.join(str(a).lower() for a in allowed)}, found {value!r}")
    if name != "priority":
        if own:
            raise ValueError(f"params.{next(iter(own))}: expected no parameters (policy "
                             f"{name} takes none) other than the run options "
                             f"{', '.join(RUN_OPTIONS)}, found a parameter")
        return dict(params)
    for key, value in own.items():
        if key not in PRIORITY_OPTIONS:
            raise ValueError(f"params.{key}: expected one of the priority parameters "
                             f"({', '.join(PRIORITY_OPTIONS)}), found an unknown key")
        _check_option(key, value)
    try:
        PriorityParams(**own)
    except ValueError as exc:  # a value out of range: "field: expected ..., found ..."
        raise ValueError(f"params.{exc}") from None
    return dict(params)
