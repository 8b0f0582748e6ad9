"""Reports on per-task traces: latency CDF plots and text tables.

Latencies are the model-time ``latency_s`` of completed (``outcome == "ok"``) tasks,
shown in milliseconds. Policy comparisons with intervals are :mod:`testbed.analysis.compare`.

Plots are drawn on matplotlib's Agg canvas directly, never through pyplot, so this
module neither needs a display nor changes the process-wide backend.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from testbed.analysis.traces import validate_frame
from testbed.reports.colours import policy_colour


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
    label_cdf_axes(ax, title, log_x)
    return ax


def label_cdf_axes(ax: Any, title: str, log_x: bool) -> None:
    """Title, label and scale ``ax`` as a latency CDF (model-time ms against the
    fraction of completed tasks), the same on the PNGs and the HTML pages."""
    ax.set_title(title)
    ax.set_xlabel("latency (model time, ms)")
    ax.set_ylabel("fraction of completed tasks")
    ax.set_ylim(0.0, 1.0)
    ax.grid(visible=True, alpha=0.3)
    if log_x:
        ax.set_xscale("log")


def _draw_cdf(ax: Any, latency_ms: np.ndarray, label: str) -> None:
    """Draw the empirical CDF of sorted ``latency_ms`` as a step line."""
    fractions = np.arange(1, latency_ms.size + 1) / latency_ms.size
    ax.step(latency_ms, fractions, where="post", label=label, color=policy_colour(label))


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
    """Render a :func:`testbed.analysis.run_summary.summarize` result as a fixed-width text table.

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
