"""Reports on per-task traces: latency CDF plots, text tables and policy comparisons.

Latencies are the model-time ``latency_s`` of completed (``outcome == "ok"``) tasks,
shown in milliseconds. :func:`compare` puts bootstrap confidence intervals on each
policy's statistics and on its *paired* difference to a baseline: every policy replays
the same tasks, so comparing task by task removes the workload's own variability from
the difference.

Plots are drawn on matplotlib's Agg canvas directly, never through pyplot, so this
module neither needs a display nor changes the process-wide backend.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from testbed.errors import TestbedError
from testbed.traces import validate_frame

CONFIDENCE = 0.95
_CHUNK_ELEMENTS = 2_000_000  # resampled values held in memory at once


def _ok_latency_ms(frame: pd.DataFrame, policy: str) -> np.ndarray:
    """Completed tasks' model-time latencies of ``policy`` in ms, sorted."""
    rows = frame[(frame["policy"] == policy) & (frame["outcome"] == "ok")]
    return np.sort(rows["latency_s"].to_numpy(dtype=float) * 1000.0)


def _file_part(name: str) -> str:
    """Make a policy name safe to embed in a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _save(figure: Figure, path: Path) -> Path:
    """Render ``figure`` with Agg into ``path`` (PNG)."""
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=120)
    return path


def _cdf_axes(figure: Figure, title: str, log_x: bool) -> Any:
    """Add and label the single axes of a latency CDF figure."""
    ax = figure.add_subplot()
    ax.set_title(title)
    ax.set_xlabel("latency (model time, ms)")
    ax.set_ylabel("fraction of completed tasks")
    ax.set_ylim(0.0, 1.0)
    ax.grid(visible=True, alpha=0.3)
    if log_x:
        ax.set_xscale("log")
    return ax


def _draw_cdf(ax: Any, latency_ms: np.ndarray, label: str) -> None:
    """Draw the empirical CDF of sorted ``latency_ms`` as a step line."""
    fractions = np.arange(1, latency_ms.size + 1) / latency_ms.size
    ax.step(latency_ms, fractions, where="post", label=label)


def plot_cdfs(df: pd.DataFrame, folder: str | Path, *, log_x: bool = False) -> list[Path]:
    """Write ``cdf_<policy>.png`` per policy and ``cdf_all.png`` into ``folder``.

    Each plot is the empirical CDF of completed tasks' model-time latency; a policy with
    no completed task gets a figure saying so. Returns the written paths, per-policy
    plots first (in policy-name order), the combined plot last.
    """
    frame = validate_frame(df)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    policies = sorted(frame["policy"].unique())
    combined = Figure(figsize=(7, 4.5))
    combined_ax = _cdf_axes(combined, "latency CDF, all policies", log_x)
    paths = []
    for policy in policies:
        latency = _ok_latency_ms(frame, policy)
        figure = Figure(figsize=(7, 4.5))
        ax = _cdf_axes(figure, f"latency CDF, {policy}", log_x)
        if latency.size:
            _draw_cdf(ax, latency, policy)
            _draw_cdf(combined_ax, latency, policy)
        else:
            ax.text(0.5, 0.5, "no completed tasks", ha="center", transform=ax.transAxes)
        paths.append(_save(figure, out / f"cdf_{_file_part(policy)}.png"))
    if combined_ax.lines:
        combined_ax.legend(loc="lower right")
    paths.append(_save(combined, out / "cdf_all.png"))
    return paths


def _cell(value: float | None) -> str:
    """Format a millisecond value for a table cell; ``-`` for missing."""
    return "-" if value is None else f"{value:.2f}"


def format_table(summary: Mapping[str, Any]) -> str:
    """Render a :func:`testbed.traces.summarize` result as a fixed-width text table.

    Columns: policy, n (all tasks), failed, and the mean, p50, p95 and p99 latency in
    ms over completed tasks.
    """
    header = ("policy", "n", "failed", "mean_ms", "p50_ms", "p95_ms", "p99_ms")
    rows = [header]
    for policy, entry in summary["policies"].items():
        stats = [_cell(entry[k]) for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms")]
        rows.append((policy, str(entry["n"]), str(entry["n_failed"]), *stats))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    return "\n".join(lines)


def _parse_statistic(name: str) -> float | None:
    """Parse a statistic name: ``None`` for ``mean``, ``q`` for ``p<q>`` (0 <= q <= 100)."""
    if name == "mean":
        return None
    match = re.fullmatch(r"p(\d+(?:\.\d+)?)", name)
    if match and 0.0 <= float(match.group(1)) <= 100.0:
        return float(match.group(1))
    raise TestbedError(f"unknown statistic {name!r}; expected 'mean' or 'p<q>' with 0 <= q <= 100")


def _statistics(x: np.ndarray, specs: Sequence[float | None]) -> np.ndarray:
    """Compute every statistic of ``specs`` along the last axis of ``x``.

    Returns an array of shape ``x.shape[:-1] + (len(specs),)``. Percentiles use numpy's
    linear interpolation, as :func:`testbed.traces.summarize` does, and are computed in
    one pass so each resample is partitioned once.
    """
    out = np.empty((*x.shape[:-1], len(specs)))
    quantiles = [q for q in specs if q is not None]
    if quantiles:
        values = np.moveaxis(np.percentile(x, quantiles, axis=-1), 0, -1)
        positions = [j for j, q in enumerate(specs) if q is not None]
        out[..., positions] = values
    means = [j for j, q in enumerate(specs) if q is None]
    if means:
        out[..., means] = np.mean(x, axis=-1)[..., None]
    return out


def _bootstrap(
    arrays: Sequence[np.ndarray],
    specs: Sequence[float | None],
    n_boot: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Resample the aligned ``arrays`` together ``n_boot`` times.

    Each resample draws the same indices for every array (so pairs stay paired).
    Returns, per array, an ``(n_boot, len(specs))`` matrix of statistics. Work is
    chunked so memory stays bounded for long traces.
    """
    n = arrays[0].size
    results = [np.empty((n_boot, len(specs))) for _ in arrays]
    chunk = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        index = rng.integers(0, n, size=(stop - start, n))
        for array, result in zip(arrays, results, strict=True):
            result[start:stop] = _statistics(array[index], specs)
    return results


def _interval(samples: np.ndarray) -> list[float]:
    """The central :data:`CONFIDENCE` percentile interval of ``samples``."""
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    low, high = np.percentile(samples, [tail, 100.0 - tail])
    return [float(low), float(high)]


def _stream(seed: int, *names: str) -> np.random.Generator:
    """A random stream keyed by ``seed`` and names, independent of the other policies."""
    keys = [seed, *(zlib.crc32(n.encode("utf-8")) for n in names)]
    return np.random.default_rng(np.random.SeedSequence(keys))


def _task_keys(frame: pd.DataFrame, policy: str) -> pd.MultiIndex:
    """The (repetition, task_id) keys of ``policy``'s rows; duplicates are an error."""
    rows = frame[frame["policy"] == policy]
    keys = pd.MultiIndex.from_arrays([rows["repetition"], rows["task_id"]])
    if keys.has_duplicates:
        first = keys[keys.duplicated()][0]
        raise TestbedError(
            f"policy {policy}: (repetition, task_id) {tuple(int(k) for k in first)} appears "
            f"more than once; compare traces of one run per policy"
        )
    return keys


def _paired_ms(frame: pd.DataFrame, policy: str, baseline: str) -> tuple[np.ndarray, np.ndarray]:
    """Latencies (ms) of tasks completed under both policies, aligned by task."""
    ok = frame[frame["outcome"] == "ok"]
    columns = ["repetition", "task_id", "latency_s"]
    mine = ok.loc[ok["policy"] == policy, columns]
    theirs = ok.loc[ok["policy"] == baseline, columns]
    pairs = mine.merge(theirs, on=["repetition", "task_id"], suffixes=("_p", "_b"))
    pairs = pairs.sort_values(["repetition", "task_id"])
    return (
        pairs["latency_s_p"].to_numpy(dtype=float) * 1000.0,
        pairs["latency_s_b"].to_numpy(dtype=float) * 1000.0,
    )


def compare(
    df: pd.DataFrame,
    baseline: str,
    stats: Sequence[str] = ("mean", "p50", "p95", "p99"),
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare every policy with ``baseline`` using bootstrap confidence intervals.

    For each policy and statistic (``mean`` or ``p<q>``, in ms over completed tasks):
    the value and a 95% percentile-bootstrap CI resampling its tasks. For each
    non-baseline policy, the paired difference ``policy - baseline``: tasks are matched
    by (repetition, task_id), keeping those completed under both; a resample draws task
    pairs, and the difference of a quantile is the policy's quantile minus the
    baseline's on that same resample. Results are reproducible from ``seed`` and do not
    depend on which other policies are present.

    Raises :class:`TestbedError` if ``baseline`` has no rows, if the policies did not
    run the same (repetition, task_id) set, or for an unknown statistic or bad
    ``n_boot``/``seed``. Returns::

        {"baseline", "unit": "ms", "confidence", "n_boot", "seed", "stats": [...],
         "policies": {NAME: {"n_ok": int,
                             "stats": {STAT: {"value", "ci": [lo, hi]} | None},
                             "diff": None (baseline) | {"n_pairs": int,
                                      "stats": {STAT: {"value", "ci", "excludes_zero"}
                                                      | None}}}}}
    """
    frame = validate_frame(df)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise TestbedError(f"n_boot must be an integer >= 1, found {n_boot!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TestbedError(f"seed must be an integer >= 0, found {seed!r}")
    stats = list(stats)
    specs = [_parse_statistic(s) for s in stats]
    policies = sorted(frame["policy"].unique())
    if baseline not in policies:
        raise TestbedError(f"baseline policy {baseline!r} is not in the traces; found {policies}")
    reference = _task_keys(frame, baseline)
    for policy in policies:
        keys = _task_keys(frame, policy)
        if not keys.sort_values().equals(reference.sort_values()):
            missing, extra = len(reference.difference(keys)), len(keys.difference(reference))
            raise TestbedError(
                f"policy {policy} did not run the same tasks as baseline {baseline}: "
                f"{missing} of the baseline's (repetition, task_id) missing, {extra} extra"
            )

    result: dict[str, Any] = {
        "baseline": baseline,
        "unit": "ms",
        "confidence": CONFIDENCE,
        "n_boot": n_boot,
        "seed": seed,
        "stats": stats,
        "policies": {},
    }
    for policy in policies:
        latency = _ok_latency_ms(frame, policy)
        entry: dict[str, Any] = {"n_ok": int(latency.size), "stats": dict.fromkeys(stats)}
        if latency.size:
            (boot,) = _bootstrap([latency], specs, n_boot, _stream(seed, policy))
            values = _statistics(latency, specs)
            for j, name in enumerate(stats):
                entry["stats"][name] = {"value": float(values[j]), "ci": _interval(boot[:, j])}
        entry["diff"] = (
            None
            if policy == baseline
            else _diff(frame, policy, baseline, stats, specs, n_boot, seed)
        )
        result["policies"][policy] = entry
    return result


def _diff(
    frame: pd.DataFrame,
    policy: str,
    baseline: str,
    stats: list[str],
    specs: list[float | None],
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    """The paired-bootstrap differences ``policy - baseline`` for :func:`compare`."""
    mine, theirs = _paired_ms(frame, policy, baseline)
    diff: dict[str, Any] = {"n_pairs": int(mine.size), "stats": dict.fromkeys(stats)}
    if not mine.size:
        return diff
    rng = _stream(seed, policy, baseline)
    boot_mine, boot_theirs = _bootstrap([mine, theirs], specs, n_boot, rng)
    values = _statistics(mine, specs) - _statistics(theirs, specs)
    for j, name in enumerate(stats):
        low, high = _interval(boot_mine[:, j] - boot_theirs[:, j])
        diff["stats"][name] = {
            "value": float(values[j]),
            "ci": [low, high],
            "excludes_zero": bool(low > 0.0 or high < 0.0),
        }
    return diff


def _with_ci(item: Mapping[str, Any] | None, sign: bool = False) -> str:
    """Format ``{"value", "ci"}`` as ``value [low, high]``; ``-`` when missing."""
    if item is None:
        return "-"
    spec = "+.2f" if sign else ".2f"
    low, high = item["ci"]
    return f"{item['value']:{spec}} [{low:{spec}}, {high:{spec}}]"


def format_compare(result: Mapping[str, Any]) -> str:
    """Render a :func:`compare` result as a fixed-width text table.

    One line per policy and statistic: the value with its CI and, for non-baseline
    policies, the paired difference to the baseline with its CI, marked ``*`` when the
    interval excludes zero.
    """
    percent = round(result["confidence"] * 100)
    title = (
        f"baseline {result['baseline']}; {result['unit']}; {percent}% bootstrap CIs "
        f"({result['n_boot']} resamples, seed {result['seed']}); * = difference excludes 0"
    )
    header = ("policy", "n_ok", "stat", "value [CI]", "diff vs baseline [CI]", "pairs")
    rows = [header]
    for policy, entry in result["policies"].items():
        diff = entry["diff"]
        for name in result["stats"]:
            if diff is None:
                change, pairs = "(baseline)", ""
            else:
                item = diff["stats"][name]
                marker = " *" if item is not None and item["excludes_zero"] else ""
                change, pairs = _with_ci(item, sign=True) + marker, str(diff["n_pairs"])
            value = _with_ci(entry["stats"][name])
            rows.append((policy, str(entry["n_ok"]), name, value, change, pairs))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [title] + [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines)
