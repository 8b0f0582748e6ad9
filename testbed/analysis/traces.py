"""The per-task trace: one row per placed task, its schema, files and summary.

Every system's driver writes rows (dicts) following :func:`schema`; the harness gathers
them with :func:`rows_to_frame`, stores them with :func:`write_traces` (``traces.parquet``
for analysis, ``traces.csv`` for people) (:mod:`testbed.analysis.run_summary` condenses them).
``docs/traces.md`` is the human reference of the same schema.

The :data:`CORE` columns, shared by every row, come first; a system registers further
row kinds with their *extension* columns (:class:`testbed.registry.TraceKind`), which
follow and must stay null for every other kind.
Columns that only a completed request can fill (server timestamps, latency parts) are
nullable but required on ``outcome == "ok"`` rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.checks import is_clean_text, is_number, is_text
from testbed.errors import TestbedError

PARQUET_NAME = "traces.parquet"
CSV_NAME = "traces.csv"
SUMMARY_NAME = "summary.json"

CORE_KIND = "task"
OUTCOMES = ("ok", "error", "timeout")

# dtypes: "string" (nullable text), "int64" (required integer), "Int64" (nullable
# integer), "float64" (NaN marks a null where the column is nullable).
_STRING, _INT, _NULLABLE_INT, _FLOAT = "string", "int64", "Int64", "float64"


@dataclass(frozen=True)
class Column:
    """One trace column: name, pandas dtype and who must fill it.

    ``nullable`` columns may be null; ``ok_required`` ones are nevertheless required on
    rows whose outcome is ``"ok"``; ``kind`` is set for extension columns, which may be
    non-null only on rows of that kind.
    """

    name: str
    dtype: str
    nullable: bool = False
    ok_required: bool = False
    kind: str | None = None


def _ok(name: str, dtype: str = _FLOAT) -> Column:
    """A column filled only when the request completed."""
    nullable_dtype = _NULLABLE_INT if dtype == _INT else dtype
    return Column(name, nullable_dtype, nullable=True, ok_required=True)


CORE: tuple[Column, ...] = (
    Column("run", _STRING),
    Column("policy", _STRING),
    Column("repetition", _INT),
    Column("kind", _STRING),
    Column("task_id", _INT),
    Column("client", _STRING),
    Column("target", _STRING),
    Column("tier", _STRING),
    Column("size", _FLOAT),
    Column("cls", _STRING),
    Column("arrival_model", _FLOAT),
    Column("dispatch_model", _FLOAT),
    _ok("response_model"),
    Column("arrival_wall", _FLOAT),
    Column("dispatch_wall", _FLOAT),
    _ok("server_arrival_wall"),
    _ok("start_wall"),
    _ok("end_wall"),
    _ok("response_wall"),
    _ok("latency_s"),
    _ok("network_s"),
    _ok("wait_s"),
    _ok("service_s"),
    _ok("latency_wall_s"),
    _ok("queue_at_arrival", _INT),
    Column("estimate_s", _FLOAT, nullable=True),
    Column("state_age_s", _FLOAT),
    Column("decision_us", _FLOAT),
    Column("state_fetch_s", _FLOAT, nullable=True),
    Column("outcome", _STRING),
    Column("error", _STRING, nullable=True),
)
"""The columns of every row, whatever its kind."""

_EXTENSION_DTYPES = {"string": _STRING, "int": _NULLABLE_INT, "float": _FLOAT}


def schema() -> tuple[Column, ...]:
    """Every trace column in file order: :data:`CORE`, then the registered systems'
    extension columns (a :class:`TestbedError` if a registration clashes or names an
    unknown dtype)."""
    from testbed.registry import trace_kinds

    found = list(CORE)
    seen = {c.name for c in CORE}
    for system, kind in trace_kinds():
        for name, dtype in kind.columns:
            if name in seen:
                raise TestbedError(f"system {system.name!r}: trace column {name!r} of kind "
                                   f"{kind.name!r} is declared already")
            if dtype not in _EXTENSION_DTYPES:
                raise TestbedError(f"system {system.name!r}: trace column {name!r}: dtype "
                                   f"must be one of {', '.join(_EXTENSION_DTYPES)}, found "
                                   f"{dtype!r}")
            seen.add(name)
            found.append(Column(name, _EXTENSION_DTYPES[dtype], nullable=True,
                                kind=kind.name))
    return tuple(found)


def columns() -> dict[str, str]:
    """Every trace column in file order, mapped to its pandas dtype."""
    return {c.name: c.dtype for c in schema()}


def kinds() -> tuple[str, ...]:
    """The row kinds: the core ``task`` and every registered one."""
    from testbed.registry import trace_kinds

    return (CORE_KIND, *(kind.name for _, kind in trace_kinds()))


def _is_null(value: Any) -> bool:
    """True for None, NaN and pandas' NA."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _first_bad(values: pd.Series, good: Any) -> tuple[Any, Any] | None:
    """Return (row, value) of the first non-null value failing ``good``, or None."""
    for row, value in values.items():
        if not _is_null(value) and not good(value):
            return row, value
    return None


#: What pandas infers (nulls skipped) for an object column whose every value is a number
#: as :func:`~testbed.checks.is_number` means it; anything else is checked value by value.
_ALL_NUMBERS = frozenset({"integer", "floating", "mixed-integer-float", "empty"})


def _all_text(values: pd.Series) -> bool:
    """True when every non-null value is a clean string, found without a Python loop:
    pandas infers the kind, and one search over the strings joined finds a NUL or a lone
    surrogate (the separator is neither)."""
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind == "empty":
        return True
    return kind == "string" and is_clean_text("\n".join(values[values.notna()]))


def _as_floats(values: pd.Series) -> np.ndarray:
    """The numbers of a column already checked to hold only numbers and nulls."""
    try:
        return pd.to_numeric(values).to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError):
        return values.map(lambda v: np.nan if _is_null(v) else float(v)).to_numpy(float)


def _convert(column: Column, values: pd.Series) -> pd.Series:
    """Cast ``values`` to ``column.dtype``, refusing values of the wrong kind.

    Columns that already have a suitable dtype are cast without inspecting each value.
    Object columns (rows built from dicts, CSV text) are accepted whole when pandas infers
    that every value is a number or a clean string; otherwise they are checked value by
    value, which names the first bad row.
    """
    dtype = values.dtype
    if column.dtype == _STRING:
        if not isinstance(dtype, pd.StringDtype) and not _all_text(values):
            bad = _first_bad(values, is_text)
            if bad is not None:
                raise TestbedError(
                    f"trace column {column.name}: expected text, found {bad[1]!r} (row {bad[0]})"
                )
        return values.astype(_STRING)
    if pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype):
        if pd.api.types.infer_dtype(values, skipna=True) not in _ALL_NUMBERS:
            bad = _first_bad(values, is_number)
            if bad is not None:
                raise TestbedError(f"trace column {column.name}: expected a number, "
                                   f"found {bad[1]!r} (row {bad[0]})")
        numbers = _as_floats(values)
    else:
        numbers = values.to_numpy(dtype=float, na_value=np.nan)
    as_float = pd.Series(numbers, index=values.index, dtype=_FLOAT)
    if column.dtype == _FLOAT:
        return as_float
    fractional = as_float[as_float.notna() & (as_float != np.floor(as_float))]
    if len(fractional):
        raise TestbedError(
            f"trace column {column.name}: expected an integer, found {fractional.iloc[0]!r} "
            f"(row {fractional.index[0]})"
        )
    return as_float.astype(_NULLABLE_INT).astype(column.dtype)


def validate_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` with exactly the schema's columns, order and dtypes, or raise.

    Missing nullable columns are added as nulls; unknown or missing required columns,
    nulls where a value is required, unknown kinds or outcomes and extension values on
    rows of another kind raise :class:`TestbedError`.
    """
    table = schema()
    known = [c.name for c in table]
    unknown = [c for c in df.columns if c not in known]
    if unknown:
        raise TestbedError(f"trace has unknown columns {unknown}; known: {known}")
    missing = [c.name for c in table if not c.nullable and c.name not in df.columns]
    if missing:
        raise TestbedError(f"trace lacks required columns {missing}")
    raw = df.reset_index(drop=True)
    out = pd.DataFrame(index=raw.index)
    for column in table:
        if column.name in raw:
            values = raw[column.name]
        else:
            values = pd.Series(None, index=raw.index, dtype=object)
        out[column.name] = _convert(column, values)

    def refuse(mask: pd.Series, what: str) -> None:
        if mask.any():
            rows = list(mask[mask].index[:5])
            raise TestbedError(f"trace rows {rows}: {what}")

    for column in table:
        if not column.nullable:
            refuse(out[column.name].isna(), f"{column.name} is required but null")
    row_kinds = kinds()
    refuse(~out["kind"].isin(row_kinds), f"kind must be one of {', '.join(row_kinds)}")
    refuse(~out["outcome"].isin(OUTCOMES), f"outcome must be one of {', '.join(OUTCOMES)}")
    ok = out["outcome"] == "ok"
    for column in table:
        if column.ok_required:
            refuse(ok & out[column.name].isna(), f"{column.name} is required when outcome is ok")
        if column.kind is not None:
            refuse(
                (out["kind"] != column.kind) & out[column.name].notna(),
                f"{column.name} is only for rows of kind {column.kind}",
            )
    return out


def rows_to_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Build a validated trace frame from row dicts (one per task).

    Missing nullable columns are filled with nulls; anything that breaks the schema
    (unknown or missing required keys, wrong value types, bad kind or outcome, ...) raises
    :class:`TestbedError` naming the column and rows.
    """
    known = columns()
    for index, row in enumerate(rows):
        unknown = [k for k in row if k not in known]
        if unknown:
            raise TestbedError(f"trace row {index}: unknown columns {unknown}")
    frame = pd.DataFrame([dict(r) for r in rows], columns=list(known), dtype=object)
    return validate_frame(frame)


def write_traces(df: pd.DataFrame, folder: str | Path) -> tuple[Path, Path]:
    """Validate ``df`` and write it as ``traces.parquet`` and ``traces.csv`` in ``folder``.

    Returns both paths. The Parquet file keeps the dtypes and is what
    :func:`read_traces` prefers; the CSV (nulls as empty fields) is for inspection.
    """
    frame = validate_frame(df)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    parquet_path, csv_path = out / PARQUET_NAME, out / CSV_NAME
    frame.to_parquet(parquet_path, engine="pyarrow", index=False)
    frame.to_csv(csv_path, index=False)
    return parquet_path, csv_path


def read_traces(folder: str | Path) -> pd.DataFrame:
    """Read and validate the traces in ``folder`` (Parquet if present, else CSV)."""
    base = Path(folder)
    parquet_path, csv_path = base / PARQUET_NAME, base / CSV_NAME
    try:
        if parquet_path.is_file():
            frame = pd.read_parquet(parquet_path, engine="pyarrow")
        elif csv_path.is_file():
            text = pd.read_csv(csv_path, dtype=object, keep_default_na=False, na_values=[""])
            frame = pd.DataFrame({name: _parse_csv_column(text[name]) for name in text.columns})
        else:
            raise TestbedError(f"{base}: no {PARQUET_NAME} or {CSV_NAME} found")
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{base}: cannot read traces: {exc}") from exc
    return validate_frame(frame)


def _parse_csv_column(values: pd.Series) -> pd.Series:
    """Turn a CSV column read as text back into numbers where the schema wants them."""
    dtype = columns().get(str(values.name))
    if dtype is None or dtype == _STRING:
        return values
    return values.map(lambda v: np.nan if _is_null(v) else float(v)).astype(_FLOAT)
