"""The Cargo Manager's metadata and its state file.

:class:`CargoNode` (a registered Cargo) and :class:`Allocation` (an application's
storage: its parameters, replicas and history) are what the manager keeps. With
``--state-dir DIR`` they are kept in ``DIR/cargo-manager.json`` too: the document
(:data:`STATE_FORMAT`, :data:`STATE_VERSION`) and the fields it is checked against, its
loading (:func:`load_state`: a file that cannot be used is a :class:`StateFileError`,
which stops the manager at start) and its atomic, durable rewrite
(:func:`write_state_file`, with which the service also writes the intent log,
:mod:`nodes.armada.intents`). When it is written is the service's decision
(:mod:`nodes.armada.cargo_manager.service`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.armada.cargo_manager.bodies import REGISTER_FIELDS, STORAGE_FIELDS
from nodes.armada.configs import NODE_TYPES
from nodes.armada.fields import (
    CONSISTENCIES,
    MAX_DIM,
    STRATEGIES,
    enum_field,
    source_field,
    tags_field,
)
from nodes.common import Field, describe, int_field
from nodes.config import CannotStart

#: The state file's ``format`` and ``version``: a file with others is refused at start.
STATE_FORMAT = "armada-cargo-manager-state"
STATE_VERSION = 1
UNCONFIRMED = "unconfirmed"  # a Cargo known from the state file, not yet health-checked


@dataclass
class CargoNode:
    """A registered Cargo."""

    cargo_id: str
    url: str
    lat: float
    lon: float
    capacity_bytes: int
    node_type: str = "volunteer"
    tags: list[str] = field(default_factory=list)
    state: str = "alive"  # alive | unconfirmed (known from the state file) | dead | left
    trusted: bool = True  # registered with the run secret (else a user token: no data)
    registered_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)
    missed: int = 0
    used_bytes: int = 0  # as last reported
    disk_bytes: int = 0


@dataclass
class Allocation:
    """An application's storage: its parameters and where its replicas are."""

    app: str
    locations: list[dict[str, float]]
    replication: int
    consistency: str
    strategy: str
    quota_bytes: int
    dim: int
    source: dict[str, Any] | None
    replicas: dict[str, str] = field(default_factory=dict)  # cargo id -> allocating | ready
    created_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    restores: list[dict[str, Any]] = field(default_factory=list)
    losses: list[dict[str, Any]] = field(default_factory=list)  # not yet restored
    peers_dirty: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    restoring: asyncio.Task[None] | None = None

    def request(self) -> dict[str, Any]:
        """The parameters as asked (defaults applied): what a repeated request must match."""
        return {"app": self.app, "locations": self.locations, "replication": self.replication,
                "consistency": self.consistency, "strategy": self.strategy,
                "quota_bytes": self.quota_bytes, "dim": self.dim, "source": self.source}

    def ready(self) -> list[str]:
        return [c for c, s in self.replicas.items() if s == "ready"]

    @property
    def state(self) -> str:
        ready = len(self.ready())
        if ready >= self.replication:
            return "ready"
        return "degraded" if ready else "lost"

    def event(self, kind: str, **detail: Any) -> None:
        self.events.append({"t": time.time(), "event": kind, **detail})


# ------------------------------------------------------------------ state file


class StateFileError(CannotStart):
    """The state file cannot be loaded (or written at start): the manager must not start."""


class MalformedStateError(ValueError):
    """A decoded state file does not have the expected shape (the message says where)."""


def _finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _is_loss(value: Any) -> bool:
    return (isinstance(value, dict) and {"t", "cargo_id", "last_seen", "reason"} <= set(value)
            and _finite(value["t"]) and isinstance(value["cargo_id"], str)
            and _finite(value["last_seen"]))


_SOURCE = source_field(("inline", "url", "file"))
_TIME = Field("finite number", _finite)
_OBJECTS = Field("array of objects",
                 lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v))
#: The top level of the state file (``format`` and ``version`` are checked first).
STATE_FIELDS = {
    "format": Field(f'"{STATE_FORMAT}"', lambda v: v == STATE_FORMAT),
    "version": Field(str(STATE_VERSION), lambda v: type(v) is int and v == STATE_VERSION),
    "saved_at": _TIME,
    "cargos": _OBJECTS,
    "allocations": _OBJECTS,
}
#: A registered Cargo in the state file (a :class:`CargoNode` but ``missed``).
CARGO_STATE_FIELDS = {
    **{k: f for k, f in REGISTER_FIELDS.items() if k not in ("apps", "node_type", "tags")},
    "node_type": enum_field(NODE_TYPES),
    "tags": tags_field(required=True),
    "state": enum_field(("alive", UNCONFIRMED, "dead", "left")),
    "registered_at": _TIME,
    "last_seen": _TIME,
    "used_bytes": int_field(0),
    "disk_bytes": int_field(0),
}
#: An allocation in the state file: :meth:`Allocation.request`, its ready replicas (Cargo
#: ids) and its history.
ALLOCATION_STATE_FIELDS = {
    "app": STORAGE_FIELDS["app"],
    "locations": STORAGE_FIELDS["locations"],
    "replication": int_field(1, 10),
    "consistency": enum_field(CONSISTENCIES),
    "strategy": enum_field(STRATEGIES),
    "quota_bytes": int_field(1),
    "dim": int_field(1, MAX_DIM),
    "source": Field(f"null or {_SOURCE.expected}", lambda v: v is None or _SOURCE.accepts(v)),
    "replicas": Field("array of Cargo ids",
                      lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v)),
    "created_at": _TIME,
    "ready_at": _TIME,
    "events": _OBJECTS,
    "restores": _OBJECTS,
    "losses": Field('array of losses {"t", "cargo_id", "last_seen", "reason"}',
                    lambda v: isinstance(v, list) and all(map(_is_loss, v))),
}


def _checked(value: Any, fields: Mapping[str, Field], where: str) -> dict[str, Any]:
    """``value`` if it is an object with exactly ``fields``, each valid; else
    :class:`MalformedStateError` naming the first offending field."""
    if not isinstance(value, dict):
        raise MalformedStateError(f"{where}: expected an object, found {describe(value)}")
    for name, spec in fields.items():
        if name not in value:
            raise MalformedStateError(f"{where}.{name}: expected {spec.expected}, "
                                      "found nothing")
        if not spec.accepts(value[name]):
            raise MalformedStateError(f"{where}.{name}: expected {spec.expected}, "
                                      f"found {describe(value[name])}")
    for name in value:
        if name not in fields:
            raise MalformedStateError(f"{where}.{name}: unknown field")
    return value


def parse_state(doc: Any) -> tuple[dict[str, CargoNode], dict[str, Allocation]]:
    """The Cargos and allocations of a decoded state file; :class:`MalformedStateError`
    saying what is wrong. Cargos that were ``alive`` come back ``unconfirmed``;
    allocations get their peer lists pushed again (a change of them may have been lost
    with the previous process)."""
    if not isinstance(doc, dict):
        raise MalformedStateError(f"expected a JSON object, found {describe(doc)}")
    head = {k: STATE_FIELDS[k] for k in ("format", "version")}
    _checked({k: doc.get(k) for k in head if k in doc}, head, "state")
    _checked(doc, STATE_FIELDS, "state")
    cargos: dict[str, CargoNode] = {}
    for i, record in enumerate(doc["cargos"]):
        _checked(record, CARGO_STATE_FIELDS, f"cargos[{i}]")
        if record["cargo_id"] in cargos:
            raise MalformedStateError(f"cargos[{i}].cargo_id: {record['cargo_id']} "
                                      "appears twice")
        node = CargoNode(**record)
        if node.state == "alive":
            node.state = UNCONFIRMED
        cargos[node.cargo_id] = node
    allocations: dict[str, Allocation] = {}
    for i, record in enumerate(doc["allocations"]):
        where = f"allocations[{i}]"
        _checked(record, ALLOCATION_STATE_FIELDS, where)
        if record["app"] in allocations:
            raise MalformedStateError(f"{where}.app: {record['app']} appears twice")
        for cargo_id in record["replicas"]:
            if cargo_id not in cargos:
                raise MalformedStateError(f"{where}.replicas: {cargo_id} is not among "
                                          "the cargos")
        allocations[record["app"]] = Allocation(
            record["app"], record["locations"], record["replication"], record["consistency"],
            record["strategy"], record["quota_bytes"], record["dim"], record["source"],
            replicas=dict.fromkeys(record["replicas"], "ready"),
            created_at=record["created_at"], ready_at=record["ready_at"],
            events=record["events"], restores=record["restores"], losses=record["losses"],
            peers_dirty=True,
        )
    return cargos, allocations


def load_state(path: Path) -> tuple[dict[str, CargoNode], dict[str, Allocation]] | None:
    """The Cargos and allocations of the state file at ``path``, None if there is none;
    :class:`StateFileError` naming the file and the fault otherwise."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(f"state file {path}: cannot read it ({exc})") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, deep nesting
        found = "an empty file" if not raw.strip() else f"invalid JSON ({exc})"
        raise StateFileError(f"state file {path}: expected a JSON object, found {found}"
                             ) from None
    try:
        return parse_state(doc)
    except MalformedStateError as exc:
        raise StateFileError(f"state file {path}: {exc}") from None


def write_state_file(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically and durably: a temporary file in the same
    directory, flushed and fsynced, renamed over ``path``, then the directory fsynced."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
