"""Closed-form queueing results used by the estimating policies and the simulator's tests.

All functions are pure and take rates in tasks per (model) second:

- :func:`erlang_c`: probability that an arrival waits in an M/M/c queue;
- :func:`mmc_wait`: mean waiting time of M/M/c (Erlang-C);
- :func:`allen_cunneen_wait`: the Allen-Cunneen approximation of the mean wait of G/G/c,
  the M/M/c wait scaled by ``(Ca^2 + Cs^2) / 2``;
- :func:`pareto_scv`: squared coefficient of variation of a classical Pareto law.

Unstable queues (``rho = lambda / (c mu) >= 1``) have no steady-state wait. These
functions return ``math.inf`` for them, never raise and never go negative; policies that
need a finite number for ranking apply their own documented treatment.
"""

from __future__ import annotations

import math


def erlang_c(c: int, offered: float) -> float:
    """P(wait) for ``c`` servers at offered load ``a = lambda / mu`` (Erlangs).

    Computed with the numerically stable Erlang-B recursion
    ``B(k) = a B(k-1) / (k + a B(k-1))`` and ``C = B / (1 - rho (1 - B))``.
    Returns 1.0 when ``a >= c`` (every arrival waits) and 0.0 when ``a <= 0``.
    """
    if c < 1:
        raise ValueError(f"c must be >= 1, got {c}")
    if offered <= 0:
        return 0.0
    if offered >= c:
        return 1.0
    b = 1.0
    for k in range(1, c + 1):
        b = offered * b / (k + offered * b)
    rho = offered / c
    return b / (1.0 - rho * (1.0 - b))


def mmc_wait(lam: float, mu: float, c: int) -> float:
    """Mean time in queue (excluding service) of M/M/c; ``inf`` when unstable."""
    if mu <= 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    if lam <= 0:
        return 0.0
    if lam >= c * mu:
        return math.inf
    return erlang_c(c, lam / mu) / (c * mu - lam)


def allen_cunneen_wait(lam: float, mu: float, c: int, ca2: float = 1.0,
                       cs2: float = 1.0) -> float:
    """Allen-Cunneen approximation of the G/G/c mean wait; ``inf`` when unstable.

    ``ca2`` and ``cs2`` are the squared coefficients of variation of the inter-arrival
    and service times (1 and 1 give back M/M/c exactly).
    """
    return mmc_wait(lam, mu, c) * (ca2 + cs2) / 2.0


def pareto_scv(alpha: float) -> float:
    """Squared coefficient of variation of a classical Pareto law with shape ``alpha``.

    ``1 / (alpha (alpha - 2))`` for ``alpha > 2``; infinite variance otherwise.
    """
    if alpha <= 2:
        return math.inf
    return 1.0 / (alpha * (alpha - 2.0))
