"""The shared value checks refuse booleans and, where asked, non-finite numbers."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.checks import is_clean_text, is_int, is_number, is_text, unclean_text_at


@pytest.mark.parametrize("value", [0, -3, 2**70, np.int64(4)])
def test_integers(value: object) -> None:
    assert is_int(value) and is_number(value)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.0, "1", None])
def test_not_integers(value: object) -> None:
    assert not is_int(value)


def test_numbers_and_finiteness() -> None:
    assert is_number(1.5) and is_number(np.float32(2)) and is_number(float("nan"))
    assert not is_number(float("nan"), finite=True) and not is_number(float("inf"), finite=True)
    assert not is_number(True) and not is_number("2") and not is_number(None)


def test_an_integer_too_large_for_a_float_is_not_finite() -> None:
    huge = 10**400
    assert is_number(huge) and not is_number(huge, finite=True) and not is_number(-huge, finite=True)
    assert is_number(2**1000, finite=True)  # still a float (about 1e301)


def test_text() -> None:
    assert is_text("") and not is_text("", nonempty=True) and not is_text(3)


@pytest.mark.parametrize("value", ["a\x00b", "\ud800", "x\udfff"])
def test_text_with_nul_or_a_lone_surrogate_is_refused(value: str) -> None:
    assert not is_text(value) and not is_clean_text(value)


def test_an_astral_character_is_text() -> None:
    assert is_text("\U0001f600") and is_text("é")


def test_unclean_text_is_found_by_its_path() -> None:
    assert unclean_text_at({"a": [1, {"b": "ok"}, "\x00"]}) == "a[2]"
    assert unclean_text_at({"a": {"b": "\ud800"}}) == "a.b"
    assert unclean_text_at({"\ud800": 1}) == "body"
    assert unclean_text_at({"a": ["fine", 2.5, None]}) is None
