"""Closed-form queueing results against known values and limits."""

from __future__ import annotations

import math

import pytest

from nodes.offloading.queueing import allen_cunneen_wait, erlang_c, mmc_wait, pareto_scv


def test_mm1_is_the_textbook_formula() -> None:
    lam, mu = 0.7, 1.0
    assert mmc_wait(lam, mu, 1) == pytest.approx(lam / (mu * (mu - lam)))
    assert erlang_c(1, lam / mu) == pytest.approx(lam / mu)


def test_erlang_c_known_value() -> None:
    # c = 2, a = 1 Erlang: C = 1/3 (a standard worked example).
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    # M/M/2 with lam = 1, mu = 1: W = C / (c mu - lam) = 1/3.
    assert mmc_wait(1.0, 1.0, 2) == pytest.approx(1 / 3)


def test_large_c_is_stable_numerically() -> None:
    p = erlang_c(4096, 4000.0)
    assert 0.0 < p < 1.0
    assert erlang_c(4096, 10.0) == pytest.approx(0.0, abs=1e-300)


def test_unstable_and_degenerate_inputs() -> None:
    assert mmc_wait(2.0, 1.0, 2) == math.inf
    assert allen_cunneen_wait(3.0, 1.0, 2, 1.0, 0.5) == math.inf
    assert mmc_wait(0.0, 1.0, 3) == 0.0
    assert erlang_c(3, 5.0) == 1.0
    with pytest.raises(ValueError):
        erlang_c(0, 1.0)
    with pytest.raises(ValueError):
        mmc_wait(1.0, 0.0, 1)


def test_allen_cunneen_scales_mmc_by_variability() -> None:
    base = mmc_wait(0.8, 1.0, 4)
    assert allen_cunneen_wait(0.8, 1.0, 4) == pytest.approx(base)
    assert allen_cunneen_wait(0.8, 1.0, 4, 1.0, 0.0) == pytest.approx(base / 2)


def test_pareto_scv() -> None:
    assert pareto_scv(2.5) == pytest.approx(1 / (2.5 * 0.5))
    assert pareto_scv(4.0) == pytest.approx(1 / 8)
    assert pareto_scv(2.0) == math.inf
