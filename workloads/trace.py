"""The materialised workload trace: the exact task list every policy replays.

A generator's output is written once, before any policy runs, as two files in one
folder:

* ``trace.csv`` with the header ``task_id,client,arrival,size,cls``, one task per line,
  sorted by arrival. Floats are written with ``repr`` (the shortest text that parses back
  to the same double), so reading the file gives bit-identical tasks.
* ``trace.json`` with the caller's metadata (generator, params, seed, ...) plus ``n``
  (the number of tasks) and ``sha256`` (of the CSV bytes).

Replaying the same file is what makes policies comparable task by task, so
:func:`read_trace` refuses a CSV whose digest no longer matches its metadata.

A generator whose tasks need more than the CSV holds (the person-search ground truth,
the face-recognition plan) writes it as a *side file* in the same folder
(:func:`write_side_file`): a JSON object recording the ``params`` and ``seed`` it was
built from and the trace's ``sha256``, which :func:`read_side_file` checks against
``trace.json`` so a side file never pairs with another trace.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError

CSV_NAME = "trace.csv"
META_NAME = "trace.json"
HEADER = ("task_id", "client", "arrival", "size", "cls")


@dataclass(frozen=True)
class Task:
    """One task of a workload trace.

    ``arrival`` is the model-time instant (seconds since the start of the trace) at which
    ``client`` issues the task; ``size`` is its service demand in model seconds on a
    worker of speed 1; ``cls`` is a generator-defined class label (e.g. "small").
    """

    task_id: int
    client: str
    arrival: float
    size: float
    cls: str


def _checked(tasks: Iterable[Task]) -> list[Task]:
    """Return ``tasks`` sorted by (arrival, task_id) after checking they can be read back.

    Refuses duplicate task ids, non-finite or negative arrivals, non-positive sizes and
    names that are empty or contain line breaks.
    """
    ordered = sorted(tasks, key=lambda t: (t.arrival, t.task_id))
    seen: set[int] = set()
    for t in ordered:
        if t.task_id in seen:
            raise TestbedError(f"trace: task_id {t.task_id} appears more than once")
        seen.add(t.task_id)
        for field, name in (("client", t.client), ("cls", t.cls)):
            if not name or "\n" in name or "\r" in name:
                raise TestbedError(
                    f"trace: task {t.task_id}: {field} must be non-empty without line breaks, "
                    f"found {name!r}"
                )
        if not (math.isfinite(t.arrival) and t.arrival >= 0):
            raise TestbedError(f"trace: task {t.task_id}: arrival must be finite and >= 0")
        if not (math.isfinite(t.size) and t.size > 0):
            raise TestbedError(f"trace: task {t.task_id}: size must be finite and > 0")
    return ordered


def _csv_bytes(tasks: list[Task]) -> bytes:
    """Serialise ``tasks`` to the exact CSV bytes that are written and hashed."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    for t in tasks:
        writer.writerow((t.task_id, t.client, repr(float(t.arrival)), repr(float(t.size)), t.cls))
    return buffer.getvalue().encode("utf-8")


def write_trace(tasks: Iterable[Task], folder: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``trace.csv`` and ``trace.json`` into ``folder`` and return the CSV's path.

    Tasks are written sorted by arrival (ties by task id). ``meta`` must be
    JSON-serialisable; its ``n`` and ``sha256`` keys, if present (e.g. from a previous
    :func:`read_trace`), are replaced by the values computed for this CSV. Raises
    :class:`TestbedError` on duplicate task ids, invalid task fields or unserialisable
    metadata, so whatever is written reads back.
    """
    ordered = _checked(tasks)
    data = _csv_bytes(ordered)
    full_meta = {k: v for k, v in meta.items() if k not in ("n", "sha256")}
    full_meta["n"] = len(ordered)
    full_meta["sha256"] = hashlib.sha256(data).hexdigest()
    try:
        meta_text = json.dumps(full_meta, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TestbedError(f"trace metadata is not JSON-serialisable: {exc}") from exc
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / CSV_NAME
    csv_path.write_bytes(data)
    (out / META_NAME).write_text(meta_text + "\n", encoding="utf-8")
    return csv_path


def _parse_float(text: str, where: str, field: str, *, positive: bool) -> float:
    """Parse a finite float (>= 0, or > 0 when ``positive``), naming ``where`` on failure."""
    try:
        value = float(text)
    except ValueError:
        raise TestbedError(f"{where}: {field} is not a number: {text!r}") from None
    bad = not math.isfinite(value) or value < 0 or (positive and value == 0)
    if bad:
        bound = "> 0" if positive else ">= 0"
        raise TestbedError(f"{where}: {field} must be a finite number {bound}, found {text!r}")
    return value


def _parse_row(row: list[str], where: str) -> Task:
    """Turn one CSV row into a :class:`Task`, raising :class:`TestbedError` if malformed."""
    if len(row) != len(HEADER):
        raise TestbedError(f"{where}: expected {len(HEADER)} fields, found {len(row)}: {row!r}")
    task_id_text, client, arrival_text, size_text, cls = row
    try:
        task_id = int(task_id_text)
    except ValueError:
        raise TestbedError(f"{where}: task_id is not an integer: {task_id_text!r}") from None
    if not client:
        raise TestbedError(f"{where}: client is empty")
    if not cls:
        raise TestbedError(f"{where}: cls is empty")
    arrival = _parse_float(arrival_text, where, "arrival", positive=False)
    size = _parse_float(size_text, where, "size", positive=True)
    return Task(task_id, client, arrival, size, cls)


def _load_json(path: Path) -> Any:
    """The JSON value in ``path``, or :class:`TestbedError` naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TestbedError(f"{path}: not valid JSON: {exc}") from exc


def read_trace(folder: str | Path) -> tuple[list[Task], dict[str, Any]]:
    """Read the trace in ``folder``; return its tasks (in file order) and its metadata.

    Verifies the CSV against the ``sha256`` and ``n`` recorded in ``trace.json``, and that
    every row is well formed, task ids are unique and arrivals never decrease. Any
    failure raises :class:`TestbedError` naming the file (and line, for row errors).
    """
    base = Path(folder)
    csv_path, meta_path = base / CSV_NAME, base / META_NAME
    for path in (csv_path, meta_path):
        if not path.is_file():
            raise TestbedError(f"{path}: trace file not found")
    meta = _load_json(meta_path)
    if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str):
        raise TestbedError(f"{meta_path}: expected an object with a 'sha256' string")
    data = csv_path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta["sha256"]:
        raise TestbedError(
            f"{csv_path}: sha256 {digest} does not match {meta['sha256']} recorded in "
            f"{meta_path}; the trace was modified or belongs to another run"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TestbedError(f"{csv_path}: not UTF-8 text: {exc}") from exc
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or tuple(header) != HEADER:
        raise TestbedError(f"{csv_path}:1: expected header {','.join(HEADER)}, found {header}")
    tasks: list[Task] = []
    seen: set[int] = set()
    for row in reader:
        where = f"{csv_path}:{reader.line_num}"
        task = _parse_row(row, where)
        if task.task_id in seen:
            raise TestbedError(f"{where}: task_id {task.task_id} appears more than once")
        if tasks and task.arrival < tasks[-1].arrival:
            raise TestbedError(
                f"{where}: arrival {task.arrival!r} is earlier than the previous row's "
                f"{tasks[-1].arrival!r}; tasks must be sorted by arrival"
            )
        seen.add(task.task_id)
        tasks.append(task)
    if meta.get("n") != len(tasks):
        raise TestbedError(f"{meta_path}: n is {meta.get('n')!r} but {csv_path} has {len(tasks)}")
    return tasks, meta


# --- side files ----------------------------------------------------------------------------


def trace_meta(folder: str | Path) -> dict[str, Any] | None:
    """The metadata in ``folder``'s ``trace.json``, or None when there is none.

    Unlike :func:`read_trace` this does not need the CSV; it raises
    :class:`TestbedError` when ``trace.json`` is not a JSON object.
    """
    meta_path = Path(folder) / META_NAME
    if not meta_path.is_file():
        return None
    meta = _load_json(meta_path)
    if not isinstance(meta, dict):
        raise TestbedError(f"{meta_path}: expected a JSON object")
    return meta


def write_side_file(
    folder: str | Path,
    name: str,
    file_format: int,
    generator: str,
    params: Mapping[str, Any],
    seed: int,
    content: Mapping[str, Any],
    what: str,
) -> Path:
    """Write the side file ``name`` of the trace in ``folder``; return its path.

    Call it after the trace is written, with the params and seed recorded in
    ``trace.json``. The file is one JSON object: ``format`` (``file_format``),
    ``generator``, ``params`` and ``seed`` (as given), ``trace_sha256`` (copied from
    ``trace.json`` in the folder, or null without one), then the keys of ``content``.
    Floats are written exactly (JSON uses the shortest round-tripping text). Raises
    :class:`TestbedError` ("<what> is not JSON-serialisable") otherwise.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta = trace_meta(out)
    doc = {
        "format": file_format,
        "generator": generator,
        "params": dict(params),
        "seed": seed,
        "trace_sha256": None if meta is None else meta.get("sha256"),
        **content,
    }
    try:
        text = json.dumps(doc, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise TestbedError(f"{what} is not JSON-serialisable: {exc}") from exc
    path = out / name
    path.write_text(text + "\n", encoding="utf-8")
    return path


def read_side_file(
    folder: str | Path, name: str, file_format: int, what: str, kind: str
) -> tuple[dict[str, Any], Path]:
    """Read the side file ``name`` of the trace in ``folder``: its object and its path.

    Raises :class:`TestbedError` naming the file if it is missing ("<what> not found"),
    not JSON, not an object of format ``file_format`` ("expected a <kind> object of
    format ..."), or if a ``trace.json`` in the folder records another sha256, params
    or seed than the file was written for (it belongs to another trace).
    """
    base = Path(folder)
    path = base / name
    if not path.is_file():
        raise TestbedError(f"{path}: {what} not found")
    doc = _load_json(path)
    if not isinstance(doc, dict) or doc.get("format") != file_format:
        raise TestbedError(f"{path}: expected a {kind} object of format {file_format}")
    meta = trace_meta(base)
    if meta is not None:
        for key, mine in (("sha256", doc.get("trace_sha256")), ("params", doc.get("params")),
                          ("seed", doc.get("seed"))):
            if meta.get(key) != mine:
                raise TestbedError(f"{path}: written for trace {key} {mine!r}, but "
                                   f"{base / META_NAME} records {meta.get(key)!r}")
    return doc, path
