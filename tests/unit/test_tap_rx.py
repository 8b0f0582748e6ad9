"""The receive modes of the delayer's TAPs: names, the environment default and the flags."""

from __future__ import annotations

import pytest

from testbed.emulation.tap_rx import IFF_NAPI, RX_ENV, check_rx, env_rx, tap_flags


def test_inline_is_the_default_and_threaded_is_chosen_by_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RX_ENV, raising=False)
    assert env_rx() == "inline"
    monkeypatch.setenv(RX_ENV, "threaded")
    assert env_rx() == "threaded"


def test_a_bad_mode_is_named_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RX_ENV, "napi")
    with pytest.raises(ValueError, match=r"TESTBED_SHAPER_RX must be one of "
                                         r"\['inline', 'threaded'\], got 'napi'"):
        env_rx()
    with pytest.raises(ValueError, match=r"rx must be one of .* got 1"):
        check_rx(1)


def test_only_threaded_taps_are_opened_for_napi() -> None:
    assert tap_flags("inline") == 0
    assert tap_flags("threaded") == IFF_NAPI
