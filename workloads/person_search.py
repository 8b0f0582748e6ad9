"""The ``person-search`` generator: moving targets, camera data on edge servers, searches.

The world (context-based person search on edge servers, seed paper 001):

* **Servers.** ``layout: line`` places ``servers`` edge servers on a line at unit
  spacing, server ``s`` at position ``(s, 0)``. ``layout: grid`` places them on a
  ``side x side`` grid (``servers`` must be a perfect square), server ``s`` at
  ``(s mod side, s div side)``. Server ``s`` covers the unit cell around its position
  (its area), so the covered region is ``[-0.5, side - 0.5]`` along every axis (``side``
  is ``servers`` on a line).
* **Data items.** Every server stores ``slots`` items (default 5), the data its area's
  cameras produced at times ``T_1 .. T_slots`` with ``T_j = j`` (``T_0 = 0`` is the start
  and is not stored). The item metadata is :class:`Items`: item ``server * slots + (j -
  1)`` is server ``server``'s item of slot ``j``.
* **Targets.** ``targets`` independent targets (default 1000). Target ``k`` starts at a
  position drawn uniformly over the covered region at ``T_0`` (so every server is equally
  likely to hold it at ``T_0``) and moves once per time step:

  - ``movement: normal``: ``position(T+1) ~ Normal(position(T), sigma)`` per axis,
    ``sigma`` = 1 by default (independent axes on the grid: an isotropic 2-D normal);
  - ``movement: straight``: one unit to the right (+x) per step, one server per step.

  Positions stay continuous; at every ``T_j`` the target's position maps to the nearest
  server (``round`` per axis, limited to the servers), which is the one whose item of slot
  ``j`` contains the target. Exactly one item per slot contains it.
* **Leaving the region** (``boundary``):

  - ``clip`` (default): a step that would cross an end of the covered region stops at
    the end; the next step starts from there. A straight mover that reaches the last
    server stays on it.
  - ``reflect``: the part of the path beyond an end is mirrored back into the region
    (the unbounded path folded at the ends), so a target turns around and keeps its pace.
    A straight mover bounces between the ends, spending two slots on each end server
    (it walks to the edge of the last area and back).

* **Requests.** One search per target, all arriving at time 0, each asking for the item
  that contains its target at ``T_slots`` (the required time ``T_R``). The search's last
  discovery point starts at the target's ``T_0`` server: ``mu_L`` = that server's
  position, ``T_L = T_0 = 0`` (the paper starts from the continuous ``mu_0``; a server
  position keeps ``mu_L`` on the same footing as every later discovery).

The trace. Task ``k`` is target ``k``'s search: ``task_id = k``, ``client`` = the
clients in turn (``clients[k mod len(clients)]``, usually one coordinator), ``arrival =
0.0``, ``size = tc_s`` (the default response time Tc of one analysis on an idle server,
model seconds), ``cls = "search"``.

Ground truth. The trace schema (``task_id,client,arrival,size,cls``) has no room for
where each target is. The world is a pure function of ``(params, seed)``, both recorded
in ``trace.json``: :meth:`PersonSearch.world` rebuilds it, and
:func:`write_ground_truth` writes it as an extra file, ``person_search.json``, next to
``trace.csv``/``trace.json`` (recording the trace's sha256, params and seed, which
:func:`read_ground_truth` checks against ``trace.json``). The runner's ``materialise``
writes the trace only; whoever runs person-search calls :func:`write_ground_truth` on the
trace folder afterwards. Only the executor may use the truth, to answer "does item i
contain target k"; the search policies see :class:`Items` only.

Params (all optional): ``servers`` (integer >= 1, default 10; a perfect square on a
grid), ``layout`` (``line`` | ``grid``), ``movement`` (``normal`` | ``straight``),
``sigma`` (> 0, default 1.0), ``boundary`` (``clip`` | ``reflect``), ``targets`` (integer
>= 1, default 1000), ``slots`` (integer >= 1, default 5), ``tc_s`` (> 0, default 10.0).

Randomness: start positions draw from ``SeedSequence(seed, spawn_key=(0,))`` and normal
steps from ``SeedSequence(seed, spawn_key=(1,))``, in target order, so the starts do not
depend on the movement model and target ``k``'s path does not depend on how many targets
follow it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from testbed.checks import is_int, is_number
from testbed.errors import TestbedError
from workloads.trace import Task, read_side_file, write_side_file

LAYOUTS = ("line", "grid")
MOVEMENTS = ("normal", "straight")
BOUNDARIES = ("clip", "reflect")
TRUTH_NAME = "person_search.json"
TRUTH_FORMAT = 1
DEFAULTS: dict[str, Any] = {
    "servers": 10,
    "layout": "line",
    "movement": "normal",
    "sigma": 1.0,
    "boundary": "clip",
    "targets": 1000,
    "slots": 5,
    "tc_s": 10.0,
}
MAX_SERVERS = 1_000_000
MAX_TARGETS = 1_000_000
MAX_SLOTS = 1000
_STARTS, _STEPS = 0, 1


# --- layout and items --------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where the edge servers are: ``kind`` ``line`` or ``grid`` with ``servers`` servers.

    ``side`` is the number of servers along x (``servers`` on a line, its square root on
    a grid); ``dims`` is 1 on a line and 2 on a grid.
    """

    kind: str
    servers: int

    def __post_init__(self) -> None:
        """Refuse an unknown kind, no servers, or a grid that is not square."""
        if self.kind not in LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, found {self.kind!r}")
        if self.servers < 1:
            raise ValueError(f"servers: expected an integer >= 1, found {self.servers!r}")
        if self.kind == "grid" and math.isqrt(self.servers) ** 2 != self.servers:
            raise ValueError(f"servers: expected a perfect square on a grid, "
                             f"found {self.servers!r}")

    @property
    def side(self) -> int:
        """Servers along the x axis."""
        return self.servers if self.kind == "line" else math.isqrt(self.servers)

    @property
    def dims(self) -> int:
        """1 on a line, 2 on a grid."""
        return 1 if self.kind == "line" else 2

    @property
    def bounds(self) -> tuple[float, float]:
        """The covered region along every axis: the union of the servers' unit cells."""
        return -0.5, self.side - 0.5

    def positions(self) -> np.ndarray:
        """``(servers, 2)`` float array of server positions (y = 0 on a line)."""
        index = np.arange(self.servers)
        if self.kind == "line":
            return np.column_stack((index, np.zeros(self.servers))).astype(float)
        return np.column_stack((index % self.side, index // self.side)).astype(float)

    def nearest_server(self, points: np.ndarray) -> np.ndarray:
        """Server index nearest to each point of ``points`` (shape ``(..., 2)``).

        Each coordinate is rounded half up to a server coordinate and limited to the
        servers (a point on the outer edge of an end cell belongs to the end server).
        """
        cells = np.clip(np.floor(np.asarray(points, dtype=float) + 0.5), 0, self.side - 1)
        cells = cells.astype(np.int64)
        if self.kind == "line":
            return cells[..., 0]
        return cells[..., 1] * self.side + cells[..., 0]


@dataclass(frozen=True, eq=False)
class Items:
    """Metadata of every stored data item, as the search (and its policies) may see it.

    Parallel arrays indexed by item id: ``server`` (int), ``x``/``y`` (the server's
    position), ``time`` (the slot time ``T_j = j``, float). ``dims`` is 1 on a line (``y``
    is 0 everywhere and ignored) and 2 on a grid. Item ``server * slots + (j - 1)`` is
    ``server``'s item of slot ``j``.
    """

    server: np.ndarray
    x: np.ndarray
    y: np.ndarray
    time: np.ndarray
    dims: int
    n_servers: int
    slots: int

    @classmethod
    def for_layout(cls, layout: Layout, slots: int) -> Items:
        """The items of ``layout`` with ``slots`` slots per server, ids server-major."""
        positions = layout.positions()
        server = np.repeat(np.arange(layout.servers), slots)
        time = np.tile(np.arange(1, slots + 1, dtype=float), layout.servers)
        return cls(server=server, x=positions[server, 0].copy(), y=positions[server, 1].copy(),
                   time=time, dims=layout.dims, n_servers=layout.servers, slots=slots)

    @cached_property
    def regular(self) -> bool:
        """Whether ids are server-major with slots ``1 .. slots`` on every server, as
        :meth:`for_layout` makes them (lets computations reshape to servers x slots)."""
        n, slots = self.n_servers, self.slots
        if self.size != n * slots:
            return False
        return bool(np.array_equal(self.server, np.repeat(np.arange(n), slots))
                    and np.array_equal(self.time, np.tile(np.arange(1.0, slots + 1), n)))

    @property
    def size(self) -> int:
        """Number of items."""
        return int(self.server.size)

    def item_id(self, server: int, slot: int) -> int:
        """Id of ``server``'s item of slot ``slot`` (1-based: ``T_slot``)."""
        if not (0 <= server < self.n_servers and 1 <= slot <= self.slots):
            raise IndexError(f"no item for server {server}, slot {slot}")
        return server * self.slots + slot - 1

    def position(self, item: int) -> tuple[float, float]:
        """``(x, y)`` of the server storing ``item``."""
        return float(self.x[item]), float(self.y[item])


# --- movement ----------------------------------------------------------------------------


def movement_steps(movement: str, targets: int, slots: int, dims: int, sigma: float,
                   rng: np.random.Generator | None) -> np.ndarray:
    """The unbounded steps of every target: ``(targets, slots, 2)`` floats.

    ``normal``: independent ``Normal(0, sigma)`` per step and axis (the y axis is 0 on a
    line); ``straight``: ``(1, 0)`` every step (``rng`` is not used and may be None).
    """
    steps = np.zeros((targets, slots, 2))
    if movement == "straight":
        steps[..., 0] = 1.0
    elif movement == "normal":
        if rng is None:
            raise ValueError("normal movement needs a random generator")
        steps[..., :dims] = rng.normal(0.0, sigma, size=(targets, slots, dims))
    else:
        raise ValueError(f"movement: expected one of {', '.join(MOVEMENTS)}, found {movement!r}")
    return steps


def fold(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Mirror ``values`` into ``[low, high]`` at both ends (repeatedly: a triangle wave)."""
    width = high - low
    shifted = np.mod(np.asarray(values, dtype=float) - low, 2.0 * width)
    return low + np.where(shifted > width, 2.0 * width - shifted, shifted)


def walk(start: np.ndarray, steps: np.ndarray, low: float, high: float,
         boundary: str) -> np.ndarray:
    """Positions at ``T_0 .. T_slots``, shape ``(targets, slots + 1, 2)``.

    ``start`` is ``(targets, 2)`` and ``steps`` ``(targets, slots, 2)``. ``clip`` stops
    each step at the ends (the next step starts from the end); ``reflect`` folds the
    unbounded path ``start + cumsum(steps)`` into ``[low, high]``. Both act per axis; the
    y axis of a line is all zeros and stays so.
    """
    start = np.asarray(start, dtype=float)
    if boundary == "reflect":
        free = np.concatenate((start[:, None, :], start[:, None, :] + np.cumsum(steps, axis=1)),
                              axis=1)
        return fold(free, low, high)
    if boundary != "clip":
        raise ValueError(f"boundary: expected one of {', '.join(BOUNDARIES)}, "
                         f"found {boundary!r}")
    out = np.empty((start.shape[0], steps.shape[1] + 1, 2))
    out[:, 0] = start
    for j in range(steps.shape[1]):
        out[:, j + 1] = np.clip(out[:, j] + steps[:, j], low, high)
    return out


# --- the world -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SearchWorld:
    """The hidden ground truth of a person-search trace.

    ``start`` is each target's continuous ``T_0`` position ``(targets, 2)``; ``holder``
    ``(targets, slots + 1)`` is the server holding target ``k`` at ``T_j`` (column 0 is
    ``T_0``, not stored as data). Only the executor uses it, through :meth:`contains`.
    """

    layout: Layout
    slots: int
    start: np.ndarray
    holder: np.ndarray

    @property
    def targets(self) -> int:
        """Number of targets (= searches)."""
        return int(self.holder.shape[0])

    @cached_property
    def items(self) -> Items:
        """The item metadata every search sees."""
        return Items.for_layout(self.layout, self.slots)

    def contains(self, target: int, item: int) -> bool:
        """Whether ``item`` contains ``target`` (its server held the target at its time)."""
        items = self.items
        slot = int(items.time[item])
        return int(self.holder[target, slot]) == int(items.server[item])

    def required_item(self, target: int) -> int:
        """The item the search for ``target`` asks for: its server's item at ``T_slots``."""
        return self.items.item_id(int(self.holder[target, self.slots]), self.slots)

    def start_point(self, target: int) -> tuple[float, float]:
        """The initial last discovery point ``mu_L``: the ``T_0`` server's position."""
        return self.server_position(int(self.holder[target, 0]))

    def server_position(self, server: int) -> tuple[float, float]:
        """Position ``(x, y)`` of ``server``."""
        side = self.layout.side
        if self.layout.kind == "line":
            return float(server), 0.0
        return float(server % side), float(server // side)


def normalised(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every default filled in (params must be valid)."""
    out = dict(DEFAULTS)
    out.update(params)
    out["sigma"] = float(out["sigma"])
    out["tc_s"] = float(out["tc_s"])
    return out


def build_world(params: Mapping[str, Any], seed: int) -> SearchWorld:
    """Draw every target's path and the servers holding it (params must be valid)."""
    p = normalised(params)
    layout = Layout(p["layout"], int(p["servers"]))
    targets, slots = int(p["targets"]), int(p["slots"])
    low, high = layout.bounds
    starts_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_STARTS,)))
    start = np.zeros((targets, 2))
    start[:, : layout.dims] = starts_rng.uniform(low, high, size=(targets, layout.dims))
    steps_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_STEPS,)))
    steps = movement_steps(p["movement"], targets, slots, layout.dims, p["sigma"], steps_rng)
    if layout.dims == 1:
        steps[..., 1] = 0.0
    path = walk(start, steps, low, high, p["boundary"])
    if layout.dims == 1:
        path[..., 1] = 0.0
    return SearchWorld(layout=layout, slots=slots, start=start,
                       holder=layout.nearest_server(path))


# --- validation ----------------------------------------------------------------------------


def _integer(params: Mapping[str, Any], key: str, high: int) -> int:
    value = params.get(key, DEFAULTS[key])
    if not is_int(value) or not 1 <= value <= high:
        raise ValueError(f"params.{key}: expected an integer in [1, {high}], found {value!r}")
    return value


def _positive(params: Mapping[str, Any], key: str) -> float:
    value = params.get(key, DEFAULTS[key])
    if not is_number(value, finite=True) or not value > 0:
        raise ValueError(f"params.{key}: expected a finite number > 0, found {value!r}")
    return float(value)


def _choice(params: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = params.get(key, DEFAULTS[key])
    if value not in allowed:
        raise ValueError(f"params.{key}: expected one of {', '.join(allowed)}, found {value!r}")
    return str(value)


class PersonSearch:
    """Generator ``person-search`` (see the module docstring for the model)."""

    name = "person-search"

    def validate(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` (``"params.<field>: expected ..., found ..."``) if invalid."""
        if not isinstance(params, Mapping):
            # The Generator contract reports every bad param as ValueError.
            raise ValueError(f"params: expected a mapping, found {params!r}")  # noqa: TRY004
        known = tuple(sorted(DEFAULTS))
        for key in params:
            if key not in DEFAULTS:
                raise ValueError(f"params.{key}: expected one of the fields {', '.join(known)}, "
                                 f"found an unknown field")
        layout = _choice(params, "layout", LAYOUTS)
        servers = _integer(params, "servers", MAX_SERVERS)
        if layout == "grid" and math.isqrt(servers) ** 2 != servers:
            raise ValueError(f"params.servers: expected a perfect square for the grid layout, "
                             f"found {servers!r}")
        _choice(params, "movement", MOVEMENTS)
        _choice(params, "boundary", BOUNDARIES)
        _positive(params, "sigma")
        _positive(params, "tc_s")
        _integer(params, "targets", MAX_TARGETS)
        _integer(params, "slots", MAX_SLOTS)

    def min_service_time(self, params: Mapping[str, Any]) -> float:
        """``tc_s``: an analysis on an idle server, the shortest service there is."""
        return float(params.get("tc_s", DEFAULTS["tc_s"]))

    def expected_tasks(self, params: Mapping[str, Any], clients: int, duration: float) -> float:
        """Exactly one search per target."""
        del clients, duration
        return float(params.get("targets", DEFAULTS["targets"]))

    def write_side_files(self, folder: Path, params: Mapping[str, Any], seed: int) -> None:
        """Write where the targets are (the trace schema has no room for it): the truth the
        executors check every search against (``write_ground_truth``)."""
        write_ground_truth(folder, params, seed)

    def generate(
        self, params: Mapping[str, Any], clients: Sequence[str], duration: float, seed: int
    ) -> list[Task]:
        """One search task per target, all at time 0, ids ``0..targets-1``.

        ``duration`` does not bound anything here (every arrival is at 0); ``params``
        must already be valid.
        """
        del duration, seed  # the tasks themselves are not random; the world is
        targets = int(params.get("targets", DEFAULTS["targets"]))
        size = self.min_service_time(params)
        return [Task(task_id=k, client=clients[k % len(clients)], arrival=0.0, size=size,
                     cls="search") for k in range(targets)]

    def world(self, params: Mapping[str, Any], seed: int) -> SearchWorld:
        """The ground truth behind the trace of ``(params, seed)`` (validated here)."""
        self.validate(params)
        return build_world(params, seed)


# --- ground-truth file ---------------------------------------------------------------------


def write_ground_truth(folder: str | Path, params: Mapping[str, Any], seed: int) -> Path:
    """Build the world of ``(params, seed)``, write ``person_search.json`` into ``folder``.

    Call it after the trace is written (``trace.json`` present), with the params and seed
    recorded there. The file holds ``format``, ``generator``, ``params`` and ``seed`` (as
    given), ``trace_sha256`` (copied from ``trace.json`` in the same folder, or null), the
    layout (``layout``, ``servers``), ``slots``, ``start`` (each target's continuous
    ``T_0`` position ``[x, y]``) and ``holder`` (per target, the server holding it at
    ``T_0 .. T_slots``). Floats are written exactly (JSON uses the shortest round-tripping
    text). Raises :class:`TestbedError` for invalid params.
    """
    generator = PersonSearch()
    try:
        world = generator.world(params, seed)
    except ValueError as exc:
        raise TestbedError(f"workload {generator.name!r}: {exc}") from exc
    content = {
        "layout": world.layout.kind,
        "servers": world.layout.servers,
        "slots": world.slots,
        "start": world.start.tolist(),
        "holder": world.holder.tolist(),
    }
    return write_side_file(folder, TRUTH_NAME, TRUTH_FORMAT, generator.name, params, seed, content,
                           "person-search ground truth")


def read_ground_truth(folder: str | Path) -> SearchWorld:
    """Read ``person_search.json`` from ``folder``.

    Raises :class:`TestbedError` naming the file if it is missing or malformed, or if a
    ``trace.json`` in the folder records another sha256, params or seed than the truth
    was written for (the truth belongs to another trace).
    """
    doc, path = read_side_file(folder, TRUTH_NAME, TRUTH_FORMAT, "person-search ground truth",
                               "ground-truth")
    try:
        layout = Layout(str(doc["layout"]), int(doc["servers"]))
        slots = int(doc["slots"])
        start = np.asarray(doc["start"], dtype=float).reshape(-1, 2)
        holder = np.asarray(doc["holder"], dtype=np.int64)
    except (KeyError, TypeError, ValueError) as exc:
        raise TestbedError(f"{path}: malformed ground truth: {exc}") from exc
    ok = (holder.ndim == 2 and holder.shape == (start.shape[0], slots + 1)
          and bool(np.all((holder >= 0) & (holder < layout.servers))))
    if not ok:
        raise TestbedError(f"{path}: expected holder of shape (targets, slots + 1) with server "
                           f"indices below {layout.servers}")
    return SearchWorld(layout=layout, slots=slots, start=start, holder=holder)
