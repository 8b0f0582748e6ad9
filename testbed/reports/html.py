"""One self-contained ``report.html`` per run folder and per study folder.

A run's page shows its latency CDFs (linear or logarithmic axis, toggled on the page),
the per-policy summary with the batch-means intervals of ``summary.json``, the failed
tasks and replays, and the fidelity note of ``metadata.json`` when the run degraded.

A study's page (a folder with ``study.json``, ``summary.parquet`` and ``traces/``) shows
mean latency against each grid axis with its 95 % interval band, one figure per (axis,
executor) and one panel per combination of the other axes; the emulation's mean minus
the simulation's, relative, when both executors ran; CDFs per grid point; failed tasks
and degraded cells; and the summary table.

Every policy keeps its colour (:func:`testbed.reports.colours.policy_colour`) in every figure.
CDF curves are cut to at most :data:`CDF_MOST_POINTS` quantile points each (fewer when
many curves share the page) so that a long study still gives a page a browser opens.
The page parts (inline SVG, tables, the toggle) are :mod:`testbed.reports.html_page`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from matplotlib.figure import Figure

from testbed.analysis.traces import read_traces
from testbed.errors import TestbedError
from testbed.reports import html_page
from testbed.reports.colours import policy_colour
from testbed.reports.latency_report import label_cdf_axes

PAGE_NAME = "report.html"
SIM, EMULATION = "sim", "emulation"

CDF_MOST_POINTS = 2000
"""Quantile points per CDF curve at most."""
CDF_PAGE_POINTS = 30_000
"""Quantile points a page's CDF curves share (each curve still gets
:data:`CDF_LEAST_POINTS`)."""
CDF_LEAST_POINTS = 200

_STUDY_COLUMNS = ("executor", "policy", "mean_ms")
_STUDY_NUMBERS = ("replications", "mean_ci_low_ms", "mean_ci_high_ms", "p50_ms", "p95_ms",
                  "p95_ci_low_ms", "p95_ci_high_ms", "p99_ms", "diff_vs_baseline_ms",
                  "diff_ci_low_ms", "diff_ci_high_ms", "failed_tasks", "degraded_cells",
                  "failed_cells")


# --- numbers and CDF points -------------------------------------------------------------


def cdf_points(latency_ms: np.ndarray, most: int = CDF_MOST_POINTS) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """The empirical CDF of ``latency_ms`` as (latency, fraction) points, at most
    ``most`` + 1 of them: every sorted value when there are few, else the smallest value
    and the empirical quantiles at ``1/most, 2/most, ..., 1`` (drawn as steps)."""
    values = np.sort(np.asarray(latency_ms, dtype=float))
    values = values[np.isfinite(values)]
    n = values.size
    if n <= most:
        return values, np.arange(1, n + 1) / max(n, 1)
    fractions = np.arange(1, most + 1) / most
    quantiles = np.quantile(values, fractions, method="inverted_cdf")
    return np.concatenate(([values[0]], quantiles)), np.concatenate(([1.0 / n], fractions))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and math.isfinite(float(value))


def _ms(value: Any, sign: bool = False) -> str:
    """A millisecond cell: two decimals, ``-`` when missing."""
    return f"{float(value):{'+.2f' if sign else '.2f'}}" if _finite(value) else "-"


def _with_ci(value: Any, low: Any, high: Any, sign: bool = False) -> str:
    """``value [low, high]``; ``value (no CI)`` without bounds; ``-`` without a value."""
    if not _finite(value):
        return "-"
    if not (_finite(low) and _finite(high)):
        return f"{_ms(value, sign)} (no CI)"
    return f"{_ms(value, sign)} [{_ms(low, sign)}, {_ms(high, sign)}]"


def _count(value: Any) -> str:
    return str(int(value)) if _finite(value) else "-"


def _value_text(value: Any) -> str:
    """A grid value as a label: ``2`` rather than ``2.0``."""
    if isinstance(value, float | np.floating):
        return f"{float(value):g}"
    return str(value)


def _curve_points(curves: int) -> int:
    """Quantile points per curve when ``curves`` curves share the page."""
    return max(CDF_LEAST_POINTS, min(CDF_MOST_POINTS, CDF_PAGE_POINTS // max(curves, 1)))


# --- figures ----------------------------------------------------------------------------


def _facets(n: int) -> tuple[Figure, list[Any]]:
    """A figure of ``n`` panels, three to a row (one panel: the size of the PNG plots)."""
    cols = min(max(n, 1), 3)
    rows = math.ceil(max(n, 1) / cols)
    size = (7.0, 4.5) if n <= 1 else (4.4 * cols, 3.4 * rows)
    figure = Figure(figsize=size, layout="constrained")
    axes = list(figure.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return figure, axes[:n]


def _cdf_pair(panels: Sequence[tuple[str, Mapping[str, np.ndarray]]], most: int,
              tag: str, caption: str) -> str:
    """The linear and the log view of latency CDFs, one panel per ``(title, {policy:
    latencies in ms})``; the page's toggle shows one of the two."""
    out = []
    for view in ("linear", "log"):
        figure, axes = _facets(len(panels))
        for ax, (title, by_policy) in zip(axes, panels, strict=True):
            label_cdf_axes(ax, title, view == "log")
            for policy, latency in by_policy.items():
                if latency.size:
                    x, y = cdf_points(latency, most)
                    ax.plot(x, y, drawstyle="steps-post", color=policy_colour(policy),
                            label=policy, gid=html_page.policy_gid(policy, "line"))
            if not ax.lines:
                ax.text(0.5, 0.5, "no completed tasks", ha="center", transform=ax.transAxes)
        if axes and axes[0].lines:
            axes[0].legend(loc="lower right", fontsize="small")
        svg = html_page.svg_of(figure, f"{tag}-{view}")
        out.append(html_page.plot(svg, "cdf", f"{caption} ({view} axis)", view))
    return "\n".join(out)


def _positions(values: pd.Series) -> tuple[dict[Any, float], list[str] | None]:
    """Where each grid value sits on the x axis: itself when numeric, else its rank
    among the sorted labels (returned as the tick labels)."""
    unique = list(pd.unique(values.dropna()))
    if pd.api.types.is_numeric_dtype(values):
        return {v: float(v) for v in unique}, None
    labels = sorted(unique, key=str)
    return {v: float(i) for i, v in enumerate(labels)}, [str(v) for v in labels]


def _panel_title(others: Sequence[str], key: Any, short: Mapping[str, str]) -> str:
    keys = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{short[o]}={_value_text(k)}" for o, k in zip(others, keys, strict=True))


def _draw_band(ax: Any, x: np.ndarray, y: np.ndarray, low: np.ndarray, high: np.ndarray,
               colour: str, gid: str) -> None:
    """Shade [low, high] where consecutive points have both bounds; a point whose
    neighbours have none (a band of zero width) gets an error bar instead."""
    finite = np.isfinite(low) & np.isfinite(high)
    if not finite.any():
        return
    ax.fill_between(x, low, high, where=finite, color=colour, alpha=0.2, linewidth=0,
                    gid=gid)
    before = np.concatenate(([False], finite[:-1]))
    after = np.concatenate((finite[1:], [False]))
    alone = finite & ~before & ~after
    if alone.any():
        below = np.maximum(y[alone] - low[alone], 0.0)  # a value outside its own interval
        above = np.maximum(high[alone] - y[alone], 0.0)  # draws no negative bar
        ax.errorbar(x[alone], y[alone], yerr=[below, above],
                    fmt="none", ecolor=colour, capsize=3, gid=gid)


def _sweep_figure(frame: pd.DataFrame, axis: str, grid: Sequence[str],
                  policies: Sequence[str], value: str, band: tuple[str, str] | None,
                  ylabel: str, title: str, tag: str) -> str:
    """``value`` against grid ``axis``, one line per policy, with the ``band`` columns
    as a shaded interval (:func:`_draw_band`); one panel per combination of the other
    grid axes. Returns the figure's SVG."""
    others = [g for g in grid if g != axis]
    short = _short_names(grid)
    where, ticks = _positions(frame[axis])
    groups = (list(frame.groupby(others, dropna=False, sort=True)) if others
              else [((), frame)])
    figure, axes = _facets(len(groups))
    for ax, (key, part) in zip(axes, groups, strict=True):
        for policy in policies:
            rows = part[part["policy"] == policy].copy()
            if rows.empty:
                continue
            rows["_x"] = rows[axis].map(where)
            rows = rows.sort_values("_x")
            x = rows["_x"].to_numpy(float)
            y = rows[value].to_numpy(float)
            colour = policy_colour(policy)
            ax.plot(x, y, marker="o", markersize=4, color=colour, label=policy,
                    gid=html_page.policy_gid(policy, "line"))
            if band is None:
                continue
            low, high = (rows[c].to_numpy(float) for c in band)
            _draw_band(ax, x, y, low, high, colour, html_page.policy_gid(policy, "band"))
        if ticks is not None:
            ax.set_xticks(range(len(ticks)), ticks)
        ax.set_xlabel(axis)
        ax.set_ylabel(ylabel)
        ax.grid(visible=True, alpha=0.3)
        if others:
            ax.set_title(_panel_title(others, key, short), fontsize="medium")
    if axes and axes[0].lines:
        axes[0].legend(fontsize="small")
    figure.suptitle(title)
    return html_page.svg_of(figure, tag)


def _short_names(grid: Sequence[str]) -> dict[str, str]:
    """Each grid path's last component, or the whole path where two would clash."""
    last = [g.rsplit(".", 1)[-1] for g in grid]
    return {g: (s if last.count(s) == 1 else g) for g, s in zip(grid, last, strict=True)}


def _point_label(grid: Sequence[str], values: Sequence[Any]) -> str:
    short = _short_names(grid)
    return ", ".join(f"{short[g]}={_value_text(v)}" for g, v in zip(grid, values, strict=True))


# --- run page ---------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{path}: cannot read: {exc}") from exc


def _fidelity_note(meta: Mapping[str, Any]) -> str:
    """The warning for a run that says it ran degraded (``metadata.json`` ``fidelity``:
    ``degraded`` and ``reasons``); nothing when it did not or does not say."""
    fidelity = meta.get("fidelity")
    if not isinstance(fidelity, Mapping) or not fidelity.get("degraded"):
        return ""
    reasons = fidelity.get("reasons") or []
    if isinstance(reasons, Mapping):
        reasons = [f"{k}: {v}" for k, v in reasons.items()]
    elif isinstance(reasons, str):
        reasons = [reasons]
    listed = "; ".join(str(r) for r in reasons) or "no reason recorded"
    return html_page.note(f"Fidelity: this run ran degraded ({listed}); read its numbers "
                          "with that in mind.")


def _failed_replays_note(meta: Mapping[str, Any]) -> str:
    failed = meta.get("failed") or []
    if not failed:
        return ""
    listed = "; ".join(f"{f.get('policy')} (repetition {f.get('repetition')}): "
                       f"{f.get('error')}" for f in failed)
    return html_page.note(f"{len(failed)} replay(s) failed and are not in these numbers: "
                          f"{listed}")


def _summary_stat(entry: Mapping[str, Any], name: str) -> str:
    """A ``summary.json`` policy entry's steady-state ``<name>_ms`` with its interval
    (the point the interval belongs to, from ``intervals``)."""
    intervals = entry.get("intervals") or {}
    ci = intervals.get(f"{name}_ci_ms") or (None, None)
    return _with_ci(intervals.get(f"{name}_ms"), *ci)


def _run_table(summary: Mapping[str, Any]) -> str:
    header = ("policy", "tasks", "completed", "failed tasks", "errors", "timeouts",
              "mean ms, whole run", "steady state: mean ms [95% CI]", "p50 ms [CI]",
              "p95 ms [CI]", "p99 ms [CI]", "interval")
    rows = []
    for policy, entry in summary["policies"].items():
        intervals = entry.get("intervals") or {}
        batches = intervals.get("batches") or {}
        how = (f"{intervals.get('method', '-')}: {batches.get('mean', 0)} batches of about "
               f"{(intervals.get('batch_tasks') or {}).get('mean', 0)} tasks after a "
               f"warm-up of {intervals.get('warmup_tasks', 0)}") if intervals else "-"
        rows.append((policy, _count(entry.get("n")), _count(entry.get("n_ok")),
                     _count(entry.get("failed_tasks", entry.get("n_failed"))),
                     _count(entry.get("n_error")), _count(entry.get("n_timeout")),
                     _ms(entry.get("mean_ms")),
                     *(_summary_stat(entry, s) for s in ("mean", "p50", "p95", "p99")), how))
    return html_page.table(header, rows, highlight=(3, 4, 5))


def write_run_page(folder: str | Path) -> Path:
    """Write ``report.html`` into run ``folder`` (``traces.parquet``, ``summary.json``,
    optional ``metadata.json``) and return its path."""
    base = Path(folder)
    summary = _read_json(base / "summary.json")
    if summary is None:
        raise TestbedError(f"{base}: no summary.json; is this a run folder?")
    meta = _read_json(base / "metadata.json") or {}
    frame = read_traces(base)
    policies = sorted(summary["policies"])
    ok = frame[frame["outcome"] == "ok"]
    by_policy = {p: ok.loc[ok["policy"] == p, "latency_s"].to_numpy(float) * 1000.0
                 for p in policies}
    most = _curve_points(len(policies))
    run = str(meta.get("run", base.name))
    facts = [f"system {meta['system']}" if "system" in meta else "",
             f"executor {meta['executor']}" if "executor" in meta else "",
             f"git {meta['git_commit']}" if meta.get("git_commit") else "",
             f"policies {', '.join(policies)}"]
    body = [html_page.paragraph("; ".join(f for f in facts if f)),
            _fidelity_note(meta), _failed_replays_note(meta), html_page.policy_key(policies),
            html_page.heading("Latency CDFs"), html_page.log_toggle(),
            _cdf_pair([("latency CDF, all policies", by_policy)], most, "cdf",
                      f"completed tasks' model-time latency, all repetitions; at most "
                      f"{most} quantile points per curve"),
            html_page.heading("Summary"), _run_table(summary),
            html_page.paragraph(
                "The whole-run mean is over every completed task, without an interval. "
                "The steady-state values are over the tasks after the warm-up, each beside "
                "its own 95 % batch-means interval (one run is one replication; no CI: too "
                "short for an interval; docs/statistics.md). Failed tasks completed in no "
                "repetition.")]
    path = base / PAGE_NAME
    path.write_text(html_page.document(f"Run {run}", [b for b in body if b]),
                    encoding="utf-8")
    return path


# --- study page -------------------------------------------------------------------------


def _read_summary(base: Path, grid: Sequence[str]) -> pd.DataFrame:
    """``summary.parquet`` (else ``summary.csv``), with absent optional columns as NaN."""
    parquet, csv = base / "summary.parquet", base / "summary.csv"
    if parquet.is_file():
        frame = pd.read_parquet(parquet)
    elif csv.is_file():
        frame = pd.read_csv(csv)
    else:
        raise TestbedError(f"{base}: no summary.parquet or summary.csv")
    missing = [c for c in (*grid, *_STUDY_COLUMNS) if c not in frame.columns]
    if missing:
        raise TestbedError(f"{base}: the study summary lacks columns {missing}")
    for name in _STUDY_NUMBERS:
        if name not in frame.columns:
            frame[name] = np.nan
    if "method" not in frame.columns:
        frame["method"] = ""
    frame["policy"] = frame["policy"].astype(str)
    frame["executor"] = frame["executor"].astype(str)
    return frame


def _read_study_traces(base: Path, grid: Sequence[str]) -> pd.DataFrame | None:
    """The completed tasks of every cell under ``traces/``: executor, policy, grid
    columns and ``latency_ms``; ``None`` when there is no trace file."""
    files = sorted((base / "traces").rglob("*.parquet"))
    if not files:
        return None
    wanted = ["executor", "policy", "latency_s", "outcome", "ok", *grid]
    parts = []
    for path in files:
        names = set(pq.ParquetFile(path).schema_arrow.names)
        part = pd.read_parquet(path, columns=[c for c in wanted if c in names])
        if "outcome" in part:
            part = part[part["outcome"] == "ok"]
        elif "ok" in part:
            part = part[part["ok"].fillna(False).astype(bool)]
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True)
    frame = frame[frame["latency_s"].notna()]
    for column in grid:  # a grid path may mix numbers and text across cells (as the summary)
        if column in frame and frame[column].dtype == object:
            frame[column] = frame[column].map(lambda v: v if v is None else str(v))
    frame = frame.assign(latency_ms=frame["latency_s"].astype(float) * 1000.0)
    return frame[["executor", "policy", *[g for g in grid if g in frame], "latency_ms"]]


def _study_cdfs(traces: pd.DataFrame | None, study: Mapping[str, Any],
                grid: Sequence[str], policies: Sequence[str]) -> list[str]:
    if traces is None or traces.empty:
        return [html_page.note("No completed task in traces/: no CDFs.")]
    point_columns = [g for g in grid if g in traces.columns]
    executors = [e for e in study.get("executors", []) if e in set(traces["executor"])]
    executors += sorted(set(traces["executor"]) - set(executors))
    panels: dict[str, list[tuple[str, dict[str, np.ndarray]]]] = {}
    for executor in executors:
        rows = traces[traces["executor"] == executor]
        groups = (rows.groupby(point_columns, dropna=False, sort=True) if point_columns
                  else [((), rows)])
        for key, part in groups:
            values = key if isinstance(key, tuple) else (key,)
            by_policy = {p: part.loc[part["policy"] == p, "latency_ms"].to_numpy(float)
                         for p in policies}
            label = _point_label(point_columns, values)
            title = f"{executor}: {label}" if label else executor
            panels.setdefault(executor, []).append((title, by_policy))
    most = _curve_points(sum(len(ps) * len(policies) for ps in panels.values()))
    out = [html_page.log_toggle()]
    for i, (executor, executor_panels) in enumerate(panels.items()):
        out.append(_cdf_pair(executor_panels, most, f"cdf{i}",
                             f"{executor}: completed tasks' model-time latency per grid "
                             f"point, all replications pooled; at most {most} quantile "
                             "points per curve"))
    return out


def _discrepancy(summary: pd.DataFrame, grid: Sequence[str]) -> pd.DataFrame:
    """Per grid point and policy: the emulated mean, the simulated mean, their
    difference (emulation - simulation) in ms and relative to the simulation in %."""
    keys = [*grid, "policy"]
    sim = summary[summary["executor"] == SIM][[*keys, "mean_ms"]]
    emu = summary[summary["executor"] == EMULATION][[*keys, "mean_ms"]]
    both = emu.merge(sim, on=keys, suffixes=("_emulation", "_sim"))
    both["diff_ms"] = both["mean_ms_emulation"] - both["mean_ms_sim"]
    sim_mean = both["mean_ms_sim"].where(both["mean_ms_sim"] != 0)
    both["relative_pct"] = both["diff_ms"] / sim_mean * 100.0
    return both


def _by_point(frame: pd.DataFrame, grid: Sequence[str]) -> list[tuple[str, str,
                                                                       pd.DataFrame]]:
    """``frame``'s rows per (executor, grid point), sorted: (executor, label, rows)."""
    keys = ["executor", *grid]
    out = []
    for key, part in frame.groupby(keys, dropna=False, sort=True):
        values = key if isinstance(key, tuple) else (key,)
        out.append((str(values[0]), _point_label(grid, values[1:]), part))
    return out


_FAILURE_COLUMNS = (
    ("failed_tasks", "Failed tasks", ""),
    ("failed_cells", "Failed cells",
     "Cells whose run failed (their cells/<key>/cell.json say why) add no numbers."),
    ("degraded_cells", "Degraded cells",
     ("Emulation cells that ran degraded (cell.json and the run's metadata.json say why) "
      "are counted here and left out of the statistics unless the study ran with "
      "--include-degraded.")),
)


def _failure_tables(summary: pd.DataFrame, grid: Sequence[str],
                    policies: Sequence[str]) -> list[str]:
    """Failed tasks per (executor, grid point) and policy, with totals; the same for
    failed and degraded cells when there are any."""
    out = []
    for column, title, why in _FAILURE_COLUMNS:
        if column != "failed_tasks" and not (summary[column].fillna(0) > 0).any():
            if summary[column].notna().any():
                out.append(html_page.paragraph(f"{title}: none."))
            continue
        rows = [(executor, label, *(_count(part.loc[part["policy"] == p, column]
                                           .sum(min_count=1)) for p in policies))
                for executor, label, part in _by_point(summary, grid)]
        rows.append(("all", "all points",
                     *(_count(summary.loc[summary["policy"] == p, column].sum(min_count=1))
                       for p in policies)))
        out.append(html_page.heading(title, 3))
        if why:
            out.append(html_page.note(why))
        out.append(html_page.table(("executor", "grid point", *policies), rows,
                                   highlight=range(2, 2 + len(policies))))
    return out


def _summary_table(summary: pd.DataFrame, grid: Sequence[str], baseline: str) -> str:
    header = ("executor", "grid point", "policy", "replications", "mean ms [95% CI]",
              "p50 ms", "p95 ms [CI]", "p99 ms", f"diff vs {baseline} ms [CI]",
              "failed tasks", "degraded cells", "method")
    ordered = summary.sort_values(["executor", *grid, "policy"])
    rows = []
    for _, r in ordered.iterrows():
        rows.append((r["executor"], _point_label(grid, [r[g] for g in grid]), r["policy"],
                     _count(r["replications"]),
                     _with_ci(r["mean_ms"], r["mean_ci_low_ms"], r["mean_ci_high_ms"]),
                     _ms(r["p50_ms"]),
                     _with_ci(r["p95_ms"], r["p95_ci_low_ms"], r["p95_ci_high_ms"]),
                     _ms(r["p99_ms"]),
                     _with_ci(r["diff_vs_baseline_ms"], r["diff_ci_low_ms"],
                              r["diff_ci_high_ms"], sign=True),
                     _count(r["failed_tasks"]), _count(r["degraded_cells"]),
                     str(r["method"]) if isinstance(r["method"], str) else "-"))
    return html_page.table(header, rows, highlight=(9, 10))


def _varied_axes(summary: pd.DataFrame, grid: Sequence[str]) -> tuple[list[str], str]:
    """The grid axes with more than one value (each gets figures), and a sentence naming
    the others with their one value (a figure against a constant shows nothing)."""
    varied = [g for g in grid if summary[g].nunique(dropna=False) > 1]
    fixed = [f"{g} = {_value_text(summary[g].iloc[0])}" for g in grid
             if g not in varied and len(summary)]
    return varied, (f"One value only, so no figure against it: {'; '.join(fixed)}."
                    if fixed else "")


def _discrepancy_section(summary: pd.DataFrame, grid: Sequence[str],
                         policies: Sequence[str]) -> list[str]:
    both = _discrepancy(summary, grid)
    if both.empty:
        return [html_page.note("Both executors ran, but at no common grid point and "
                               "policy: no discrepancy to show.")]
    out = []
    for i, axis in enumerate(_varied_axes(both, grid)[0]):
        svg = _sweep_figure(both, axis, grid, policies, "relative_pct", None,
                            "emulation - simulation (% of sim mean)",
                            f"sim vs emulation: mean latency discrepancy vs {axis}",
                            f"disc{i}")
        out.append(html_page.plot(svg, "discrepancy",
                                  f"(emulated mean - simulated mean) / simulated mean, "
                                  f"per grid point, against {axis}"))
    rows = [(_point_label(grid, [r[g] for g in grid]), r["policy"],
             _ms(r["mean_ms_sim"]), _ms(r["mean_ms_emulation"]), _ms(r["diff_ms"], True),
             f"{r['relative_pct']:+.1f}" if _finite(r["relative_pct"]) else "-")
            for _, r in both.sort_values([*grid, "policy"]).iterrows()]
    out.append(html_page.table(("grid point", "policy", "sim mean ms", "emulation mean ms",
                                "emulation - sim ms", "relative %"), rows))
    return out


def write_study_page(folder: str | Path) -> Path:
    """Write ``report.html`` into study ``folder`` (``study.json``, ``summary.parquet``
    or ``summary.csv``, ``traces/``) and return its path."""
    base = Path(folder)
    study = _read_json(base / "study.json")
    if study is None:
        raise TestbedError(f"{base}: no study.json; is this a study folder?")
    grid = list(study.get("grid") or [])
    summary = _read_summary(base, grid)
    found = list(dict.fromkeys(summary["policy"]))
    policies = [p for p in study.get("policies", []) if p in found]
    policies += sorted(set(found) - set(policies))
    executors = [e for e in study.get("executors", []) if e in set(summary["executor"])]
    executors += sorted(set(summary["executor"]) - set(executors))
    baseline = str(study.get("baseline", "baseline"))
    name = str(study.get("study", base.name))
    facts = (f"grid {', '.join(grid) or '(one point)'}; policies {', '.join(policies)} "
             f"(baseline {baseline}); executors {', '.join(executors)}; "
             f"{study.get('replications', '?')} replication(s) per cell")
    body = [html_page.paragraph(facts), html_page.policy_key(policies),
            html_page.heading("Latency against the grid")]
    varied, fixed = _varied_axes(summary, grid)
    if not varied:
        body.append(html_page.note("No grid axis takes two values: see the table below."))
    if fixed:
        body.append(html_page.paragraph(fixed))
    for i, axis in enumerate(varied):
        for j, executor in enumerate(executors):
            rows = summary[summary["executor"] == executor]
            svg = _sweep_figure(rows, axis, grid, policies, "mean_ms",
                                ("mean_ci_low_ms", "mean_ci_high_ms"),
                                "mean latency (model time, ms)",
                                f"{executor}: mean latency vs {axis}", f"lat{i}-{j}")
            body.append(html_page.plot(svg, "latency",
                                       f"{executor}: mean latency with its 95 % interval "
                                       f"(band; see the method column) against {axis}"))
    if SIM in executors and EMULATION in executors and grid:
        body.append(html_page.heading("Simulation vs emulation"))
        body += _discrepancy_section(summary, grid, policies)
    body.append(html_page.heading("Latency CDFs"))
    body += _study_cdfs(_read_study_traces(base, grid), study, grid, policies)
    body.append(html_page.heading("Failed tasks and degraded cells"))
    body += _failure_tables(summary, grid, policies)
    body += [html_page.heading("Summary"), _summary_table(summary, grid, baseline)]
    path = base / PAGE_NAME
    path.write_text(html_page.document(f"Study {name}", [b for b in body if b]),
                    encoding="utf-8")
    return path
