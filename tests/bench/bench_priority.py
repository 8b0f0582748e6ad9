"""Priority computation of the person search: vectorised numpy against a per-item loop.

``python -m tests.bench.bench_priority [--quick] [--searches S] [--servers N] [--passes P]``
from the repository root (no root needed).

What is computed. ``S`` concurrent searches (default 1000) over ``N`` servers on a line
(default 100) with five slots each (500 items): Eq. 1 for every search and item, and each
search's chosen item (smallest P among its candidates), exactly what the coordinator
does when every search needs its next item at once. The inputs are drawn once (seed 1):
each search's last discovery point (a random server, ``T_L`` in 0..4), a random load
(0..4 analyses per server) and candidate sets with about 10 % of the items already
analysed.

* **vectorised**: :func:`nodes.person_search.model.priority_matrix` and
  :func:`~nodes.person_search.model.select` (numpy arrays in);
* **loop**: :func:`~nodes.person_search.model.priority_loop` and
  :func:`~nodes.person_search.model.select_loop`, the straightforward per-item Python
  version (lists in; converting the inputs is not timed);
* **sequential**: :meth:`PriorityPolicy.choose_many` with the load growing after every
  choice, as the paper's simulator selected (one vectorised matrix, then one numpy row
  operation per search).

Both the vectorised and the loop version must choose the same items (checked). Each
variant's time is the median over ``--passes`` passes; the ratio loop / vectorised is
measured in the same run. The issue's target is a ratio of at least 10; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nodes.person_search.model import (
    Search,
    priority_loop,
    priority_matrix,
    select,
    select_loop,
)
from nodes.person_search.policies import PriorityPolicy
from workloads.person_search import Items, Layout

TARGET_RATIO = 10.0
SLOTS = 5


def inputs(searches: int, servers: int, seed: int = 1) -> dict[str, Any]:
    """The searches' states, the load and the candidate sets, as arrays and as lists."""
    layout = Layout("line", servers)
    items = Items.for_layout(layout, SLOTS)
    rng = np.random.default_rng(seed)
    mu = layout.positions()[rng.integers(servers, size=searches)]
    t_l = rng.integers(0, SLOTS, size=searches).astype(float)
    t_r = np.full(searches, float(SLOTS))
    load = rng.integers(0, 5, size=servers)
    cand = rng.random((searches, items.size)) >= 0.1
    return {"items": items, "mu": mu, "t_l": t_l, "t_r": t_r, "load": load, "cand": cand,
            "lists": (mu.tolist(), t_l.tolist(), t_r.tolist(), load.tolist(), cand.tolist())}


def timed(work: Callable[[], Any], passes: int) -> tuple[float, Any]:
    """Median wall seconds of ``work`` over ``passes`` runs, and its last result."""
    times, result = [], None
    for _ in range(passes):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def measure(searches: int, servers: int, passes: int) -> dict[str, Any]:
    """Seconds per pass of each variant, the ratio and whether the choices agree."""
    data = inputs(searches, servers)
    items = data["items"]
    mu_list, t_l_list, t_r_list, load_list, cand_list = data["lists"]

    def vectorised() -> list[int]:
        p = priority_matrix(items, data["mu"], data["t_l"], data["t_r"], data["load"],
                            candidates=data["cand"])
        return select(p, data["cand"]).tolist()

    def loop() -> list[int]:
        p = priority_loop(items, mu_list, t_l_list, t_r_list, load_list, candidates=cand_list)
        return select_loop(p, cand_list)

    policy = PriorityPolicy(items)
    states = []
    for s in range(searches):
        search = Search(s, items, tuple(data["mu"][s]), data["t_l"][s], data["t_r"][s])
        search.candidates = data["cand"][s].copy()
        states.append(search)

    def sequential() -> list[int]:
        return policy.choose_many(states, data["load"])

    vec_s, vec_picks = timed(vectorised, passes)
    loop_s, loop_picks = timed(loop, max(1, passes // 3))
    seq_s, _ = timed(sequential, passes)
    return {"searches": searches, "servers": servers, "items": items.size,
            "vectorised_s": vec_s, "loop_s": loop_s, "sequential_s": seq_s,
            "ratio": loop_s / vec_s, "agree": vec_picks == loop_picks}


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 only if the two versions chose different items."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_priority",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 searches, 3 passes")
    parser.add_argument("--searches", type=int, default=None,
                        help="concurrent searches (default 1000, --quick 200)")
    parser.add_argument("--servers", type=int, default=100, help="servers (default 100)")
    parser.add_argument("--passes", type=int, default=None,
                        help="passes of the vectorised variants (default 9, --quick 3; "
                             "the loop runs a third as many, at least one)")
    args = parser.parse_args(argv)
    searches = args.searches or (200 if args.quick else 1000)
    passes = args.passes or (3 if args.quick else 9)
    r = measure(searches, args.servers, passes)
    print(f"priority (Eq. 1) for {r['searches']} searches x {r['items']} items "
          f"({r['servers']} servers x {SLOTS} slots), median of the passes")
    print(f"{'variant':<28} {'ms per pass':>12} {'us per search':>14}")
    for name, key in (("loop (per item, Python)", "loop_s"),
                      ("vectorised (numpy)", "vectorised_s"),
                      ("sequential choose_many", "sequential_s")):
        print(f"{name:<28} {r[key] * 1e3:>12.2f} {r[key] * 1e6 / r['searches']:>14.2f}")
    met = "met" if r["ratio"] >= TARGET_RATIO else "MISSED"
    print(f"loop / vectorised: {r['ratio']:.1f}x (target >= {TARGET_RATIO:g}x: {met}); "
          f"same choices: {'yes' if r['agree'] else 'NO'}")
    return 0 if r["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
