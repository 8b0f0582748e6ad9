"""Choosing the delayer's data path: the compiled shaper when its library loads, else the
Python loop with the reason, and a refusal when the compiled one is demanded but missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed.emulation.delayer.compiled import (
    DATA_PATH_ENV,
    DATA_PATHS,
    FIFO_ENV,
    SPIN_ENV,
    THREADS_ENV,
    choose_data_path,
    env_data_path,
    env_number,
)
from testbed.emulation.shaper import load
from testbed.emulation.shaper.build import build
from testbed.errors import EmulationError


def test_a_missing_library_falls_back_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "libtbshaper.so"
    reason = (f"{missing} is not built (setup.sh builds it: "
              "python -m testbed.emulation.shaper.build)")
    assert load(missing) == (None, reason)
    shaper, reason = choose_data_path("auto", library=missing)
    assert shaper is None and "is not built" in reason


def test_a_broken_library_falls_back_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "libtbshaper.so"
    broken.write_bytes(b"\x7fELF not really a shared object")
    shaper, reason = choose_data_path("auto", library=broken)
    assert shaper is None and "does not load" in reason


def test_the_compiled_path_demanded_but_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmulationError, match="compiled shaper was requested"):
        choose_data_path("c", library=tmp_path / "nothing.so")


def test_python_is_used_when_asked_even_if_the_library_loads(tmp_path: Path) -> None:
    built = build(tmp_path / "libtbshaper.so")
    assert load(built)[0] is not None
    assert choose_data_path("python", library=built) == (None, "requested")


def test_the_built_library_is_chosen_and_runs_its_thread(tmp_path: Path) -> None:
    shaper, reason = choose_data_path("auto", library=build(tmp_path / "libtbshaper.so"))
    try:
        assert shaper is not None and reason.startswith("loaded ")
        assert shaper.threads() == 1
        assert shaper.histogram(reset=False).n == 0
        with pytest.raises(OSError, match="no direction 7"):
            shaper.stats(7)
    finally:
        if shaper is not None:
            shaper.close()
    assert set(DATA_PATHS.values()) == {"shaper-c", "delayer-py"}


def test_bad_data_path_names_the_choices() -> None:
    with pytest.raises(ValueError, match="data path must be one of"):
        choose_data_path("rust")


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_the_shaper_compiles_without_warnings(tmp_path: Path) -> None:
    """The shipped build does not use -Werror (a newer compiler must not disable the
    compiled path); this build does, so a warning fails here."""
    built = build(tmp_path / "libtbshaper.so", force=True, extra_flags=("-Werror",))
    assert load(built)[0] is not None


@pytest.mark.parametrize(("name", "value", "expected"), [
    (FIFO_ENV, "high", "TESTBED_SHAPER_FIFO must be an integer in [0, 99], got 'high'"),
    (FIFO_ENV, "100", "TESTBED_SHAPER_FIFO must be an integer in [0, 99], got '100'"),
    (SPIN_ENV, "x", "TESTBED_SHAPER_SPIN_US must be a number in [0, 1e+06], got 'x'"),
    (THREADS_ENV, "0", "TESTBED_SHAPER_THREADS must be an integer in [1, 64], got '0'"),
])
def test_bad_tuning_variables_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        name: str, value: str, expected: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as err:
        choose_data_path("auto", library=build(tmp_path / "libtbshaper.so"))
    assert str(err.value) == expected


def test_tuning_variables_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPIN_ENV, "12.5")
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert env_number(SPIN_ENV, 30, 0, 1e6, integer=False) == 12.5
    assert env_number(THREADS_ENV, 1, 1, 64) == 1


def test_the_data_path_variable_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_PATH_ENV, "rust")
    with pytest.raises(ValueError, match=r"TESTBED_SHAPER must be one of \['auto', 'c', "
                                         r"'python'\], got 'rust'"):
        env_data_path()
    monkeypatch.setenv(DATA_PATH_ENV, "python")
    assert env_data_path() == "python"
