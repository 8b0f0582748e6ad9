"""The self-contained report pages: their content, then how headless Chromium shows them.

The study folder is synthetic (two grid values, three policies, both executors, fake
traces written with pandas) and follows the contract of ``testbed/study/``; the run
folder is a real, short simulated run of the built-in ``continuum`` scenario, whose
``run_scenario`` writes the page itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.reports.colours import policy_colour
from testbed.reports.html import (
    CDF_MOST_POINTS,
    cdf_points,
    write_run_page,
    write_study_page,
)
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario

CHROMIUM = Path("/usr/bin/chromium")
GRID = ["workload.params.rate"]
RATES = [1.0, 2.0]
POLICIES = ["random", "jsq", "hybrid"]
EXECUTORS = ["sim", "emulation"]
REPLICATIONS = 2
TASKS = 150  # per policy and cell
SCALE_S = {"random": 0.20, "jsq": 0.10, "hybrid": 0.08}


# --- folders ----------------------------------------------------------------------------


def _cell_traces(rng: np.random.Generator, point: int, rate: float, executor: str,
                 replication: int) -> pd.DataFrame:
    """One cell's fake traces: exponential latencies, a few timeouts for random."""
    rows = []
    key = f"p{point}-{executor}-r{replication}"
    for policy in POLICIES:
        scale = SCALE_S[policy] * rate * (1.1 if executor == "emulation" else 1.0)
        latency = rng.exponential(scale, TASKS) + 0.01
        for task_id, value in enumerate(latency):
            failed = policy == "random" and task_id % 50 == 7
            rows.append({"cell": key, "executor": executor, "replication": replication,
                         "point": point, "run": key, "policy": policy, "repetition": 0,
                         "kind": "task", "task_id": task_id,
                         "outcome": "timeout" if failed else "ok",
                         "latency_s": np.nan if failed else value, GRID[0]: rate})
    return pd.DataFrame(rows)


def _summary_rows(frame: pd.DataFrame, point: int, rate: float, executor: str
                  ) -> list[dict]:
    """The summary rows of one (point, executor); point 1 in sim has a single
    replication's NaN intervals, emulation at point 1 one degraded cell."""
    rows = []
    for policy in POLICIES:
        mine = frame[frame["policy"] == policy]
        ok = mine["latency_s"].dropna() * 1000.0
        mean, p95 = float(ok.mean()), float(ok.quantile(0.95))
        lonely = point == 1 and executor == "sim"
        half = np.nan if lonely else 0.08 * mean
        rows.append({GRID[0]: rate, "executor": executor, "policy": policy,
                     "replications": 1 if lonely else REPLICATIONS, "mean_ms": mean,
                     "mean_ci_low_ms": mean - half, "mean_ci_high_ms": mean + half,
                     "p50_ms": float(ok.median()), "p95_ms": p95,
                     "p95_ci_low_ms": p95 - 2 * half, "p95_ci_high_ms": p95 + 2 * half,
                     "p99_ms": float(ok.quantile(0.99)),
                     "diff_vs_baseline_ms": 0.0 if policy == "random" else -mean / 3,
                     "diff_ci_low_ms": np.nan, "diff_ci_high_ms": np.nan,
                     "failed_tasks": int((mine["outcome"] != "ok").sum()),
                     "degraded_cells": int(point == 1 and executor == "emulation"),
                     "failed_cells": 0,
                     "method": ("1 replication; batch means" if lonely
                                else f"t across {REPLICATIONS} replications")})
    return rows


def make_study(folder: Path) -> Path:
    """A study folder: ``study.json``, ``summary.parquet`` + ``.csv``, ``traces/``."""
    rng = np.random.default_rng(7)
    (folder / "traces").mkdir(parents=True)
    summary = []
    for point, rate in enumerate(RATES):
        for executor in EXECUTORS:
            cells = [_cell_traces(rng, point, rate, executor, r) for r in range(REPLICATIONS)]
            for cell in cells:
                cell.to_parquet(folder / "traces" / f"{cell['cell'].iloc[0]}.parquet",
                                index=False)
            summary += _summary_rows(pd.concat(cells), point, rate, executor)
    table = pd.DataFrame(summary)
    table.to_parquet(folder / "summary.parquet", index=False)
    table.to_csv(folder / "summary.csv", index=False)
    (folder / "study.json").write_text(json.dumps(
        {"study": "synthetic", "grid": GRID, "baseline": "random", "policies": POLICIES,
         "executors": EXECUTORS, "replications": REPLICATIONS}))
    return folder


@pytest.fixture(scope="module")
def study_page(tmp_path_factory) -> Path:
    return write_study_page(make_study(tmp_path_factory.mktemp("study")))


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    scenario = load_scenario("continuum").with_overrides(duration=20)
    return run_scenario(scenario, out=tmp_path_factory.mktemp("runs") / "run",
                        executor="sim", progress=lambda _: None)


def _degraded_copy(run_folder: Path, destination: Path) -> Path:
    """``run_folder`` with a degraded ``fidelity`` in its metadata and its page rewritten."""
    shutil.copytree(run_folder, destination)
    meta_path = destination / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["fidelity"] = {"degraded": True, "reasons": ["delayer lagged 3 ms behind"]}
    meta_path.write_text(json.dumps(meta))
    write_run_page(destination)
    return destination


# --- the page as text -------------------------------------------------------------------


def _fetching_references(text: str) -> list[str]:
    """Every src/href/url() in ``text`` that would fetch something (not ``#id``/``data:``)."""
    found = re.findall(r'(?:\bsrc|\bhref)\s*=\s*"([^"]*)"|url\(\s*([^)]*)\)', text)
    return [ref for pair in found for ref in pair
            if ref and not ref.startswith(("#", "data:"))]


def test_runner_writes_the_run_page(run_folder):
    page = run_folder / "report.html"
    text = page.read_text()
    assert _fetching_references(text) == []
    assert text.count("<svg") == 2  # the CDF, linear and log
    assert "Fidelity" not in text
    assert "random" in text and "jsq" in text


def test_run_page_notes_a_degraded_run(run_folder, tmp_path):
    text = (_degraded_copy(run_folder, tmp_path / "run") / "report.html").read_text()
    assert "ran degraded (delayer lagged 3 ms behind)" in text


def test_study_page_is_self_contained_and_bounded(study_page):
    text = study_page.read_text()
    assert study_page.name == "report.html"
    assert _fetching_references(text) == []
    assert "<script src" not in text and "@import" not in text
    assert len(text) < 3_000_000
    assert text.count('data-kind="latency"') == len(GRID) * len(EXECUTORS)
    assert text.count('data-kind="discrepancy"') == len(GRID)
    assert text.count('data-kind="cdf"') == 2 * len(EXECUTORS)
    assert "Degraded cells" in text and "1 replication; batch means" in text


def test_study_page_without_the_simulation_has_no_discrepancy(tmp_path):
    folder = make_study(tmp_path / "study")
    table = pd.read_parquet(folder / "summary.parquet")
    table[table["executor"] == "emulation"].to_parquet(folder / "summary.parquet", index=False)
    text = write_study_page(folder).read_text()
    assert 'data-kind="discrepancy"' not in text
    assert text.count('data-kind="latency"') == 1


def test_study_page_without_traces_says_so(tmp_path):
    folder = make_study(tmp_path / "study")
    shutil.rmtree(folder / "traces")
    (folder / "summary.parquet").unlink()  # the CSV is read instead
    text = write_study_page(folder).read_text()
    assert "No completed task in traces/" in text
    assert 'data-kind="cdf"' not in text


def _with_second_axis(folder: Path, values: list[str]) -> Path:
    """``folder``'s study with a text-valued second grid axis ``topology.switch``."""
    table = pd.read_parquet(folder / "summary.parquet")
    both = pd.concat([table.assign(**{"topology.switch": s}) for s in values])
    both.to_parquet(folder / "summary.parquet", index=False)
    study = json.loads((folder / "study.json").read_text())
    study["grid"] = [*GRID, "topology.switch"]
    (folder / "study.json").write_text(json.dumps(study))
    return folder


def test_study_page_with_two_axes_facets_the_other_axis(tmp_path):
    """One figure per (axis, executor), panels per value of the other axis, text values
    placed by rank."""
    folder = _with_second_axis(make_study(tmp_path / "study"), ["linux", "ovs"])
    text = write_study_page(folder).read_text()
    assert text.count('data-kind="latency"') == 2 * len(EXECUTORS)
    assert text.count('data-kind="discrepancy"') == 2
    assert "rate=2, switch=ovs" in text


def test_study_page_draws_nothing_against_a_constant_axis(tmp_path):
    folder = _with_second_axis(make_study(tmp_path / "study"), ["linux"])
    text = write_study_page(folder).read_text()
    assert text.count('data-kind="latency"') == len(EXECUTORS)
    assert text.count('data-kind="discrepancy"') == 1
    assert "no figure against it: topology.switch = linux" in text


def test_cdf_points_are_exact_when_few_and_bounded_when_many():
    few = np.array([3.0, 1.0, 2.0])
    x, y = cdf_points(few)
    assert list(x) == [1.0, 2.0, 3.0] and list(y) == pytest.approx([1 / 3, 2 / 3, 1.0])
    many = np.random.default_rng(1).exponential(10.0, 50_000)
    x, y = cdf_points(many)
    assert x.size == y.size == CDF_MOST_POINTS + 1
    assert x[0] == many.min() and x[-1] == many.max()
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0) and y[-1] == 1.0
    median = x[np.searchsorted(y, 0.5)]
    assert median == pytest.approx(np.median(many), rel=0.01)


# --- the page in headless Chromium ------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent (Debian's chromium; setup.sh installs it)")
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=args)
        yield launched
        launched.close()


class Opened:
    """A page opened from a file, with what it logged and requested."""

    def __init__(self, browser, path: Path) -> None:
        self.url = path.resolve().as_uri()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.context = browser.new_context()
        self.context.on("request", lambda request: self.requests.append(request.url))
        self.page = self.context.new_page()
        self.page.on("console", lambda message: self.errors.append(message.text)
                     if message.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(self.url, wait_until="load")

    def visible_plots(self, selector: str = "figure.plot") -> int:
        """How many plot SVGs under ``selector`` are shown with a non-zero size."""
        boxes = [svg.bounding_box() for svg in self.page.locator(f"{selector} svg").all()]
        return sum(1 for b in boxes if b is not None and b["width"] > 0 and b["height"] > 0)

    def line_colours(self) -> dict[str, dict[int, set[str]]]:
        """Per policy: the computed stroke colours of its lines, per SVG on the page."""
        found = self.page.evaluate("""() => [...document.querySelectorAll("figure.plot svg")]
            .flatMap((svg, i) => [...svg.querySelectorAll('g.policy[data-role="line"] > path')]
            .map(p => [i, p.closest("g.policy").dataset.policy, getComputedStyle(p).stroke]))""")
        out: dict[str, dict[int, set[str]]] = {}
        for index, policy, stroke in found:
            out.setdefault(policy, {}).setdefault(index, set()).add(stroke)
        return out

    def close(self) -> None:
        self.context.close()


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _check_clean(opened: Opened) -> None:
    """No console or page error, no request but the file, no element id twice (inlined
    figures would otherwise borrow each other's glyphs and clip paths)."""
    assert opened.errors == []
    assert opened.requests == [opened.url]
    ids = opened.page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)")
    assert len(ids) == len(set(ids))


def _check_log_toggle(opened: Opened, shown: int) -> None:
    """The checkbox swaps the linear CDFs for the log ones and back."""
    from playwright.sync_api import expect

    page = opened.page
    linear = page.locator('figure[data-kind="cdf"][data-view="linear"] svg')
    log = page.locator('figure[data-kind="cdf"][data-view="log"] svg')
    expect(linear.first).to_be_visible()
    expect(log.first).to_be_hidden()
    assert opened.visible_plots('figure[data-kind="cdf"]') == shown
    page.locator("#log-x").check()
    expect(log.first).to_be_visible()
    expect(linear.first).to_be_hidden()
    assert opened.visible_plots('figure[data-kind="cdf"][data-view="log"]') == shown
    assert opened.visible_plots('figure[data-kind="cdf"][data-view="linear"]') == 0
    page.locator("#log-x").uncheck()
    expect(linear.last).to_be_visible()
    expect(log.last).to_be_hidden()


def _check_colours(opened: Opened, policies: list[str], plots_at_least: int) -> None:
    """Each policy's lines have its one colour in every plot that draws it."""
    colours = opened.line_colours()
    assert sorted(colours) == sorted(policies)
    for policy, per_svg in colours.items():
        assert len(per_svg) >= plots_at_least, policy
        assert set().union(*per_svg.values()) == {_rgb(policy_colour(policy))}, policy
    swatches = opened.page.locator(".key span.policy")
    assert swatches.count() == len(policies)


def test_study_page_in_chromium(browser, study_page):
    opened = Opened(browser, study_page)
    try:
        _check_clean(opened)
        page = opened.page
        assert page.locator("figure.plot svg").count() == 2 + 1 + 4
        # latency per (axis, executor), the discrepancy, one CDF view per executor
        assert opened.visible_plots() == 2 + 1 + 2
        assert opened.visible_plots('figure[data-kind="latency"]') == 2
        assert opened.visible_plots('figure[data-kind="discrepancy"]') == 1
        _check_colours(opened, POLICIES, plots_at_least=3)
        _check_log_toggle(opened, shown=len(EXECUTORS))
        assert opened.errors == []
        assert opened.requests == [opened.url]
    finally:
        opened.close()


def test_run_page_in_chromium(browser, run_folder, tmp_path):
    for folder in (run_folder, _degraded_copy(run_folder, tmp_path / "degraded")):
        opened = Opened(browser, folder / "report.html")
        try:
            _check_clean(opened)
            assert opened.page.locator("figure.plot svg").count() == 2
            assert opened.visible_plots() == 1
            _check_colours(opened, ["jsq", "random"], plots_at_least=2)
            _check_log_toggle(opened, shown=1)
            note = opened.page.locator("p.note", has_text="Fidelity")
            assert note.count() == (1 if folder != run_folder else 0)
            assert opened.errors == []
        finally:
            opened.close()
