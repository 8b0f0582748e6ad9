"""The Cargo Manager's intent log: copies on Cargos the state file may not count.

Before the manager asks a Cargo to create an application's copy (an allocation or a
restoration) or to delete one (a release), it records an *intent* ``(op, kind, app,
cargo_id, url)`` in ``DIR/cargo-manager.intents.json`` next to its state file, written
atomically and fsynced (:func:`~nodes.armada.cargo_manager.state.write_state_file`), and
only then calls the Cargo. An intent is *settled* once the state file on disk decides it:

* the state file counts the Cargo as a ready replica of the application: the copy is
  meant to be there (an allocation or restoration that committed, or a release that
  never did), the intent is dropped;
* otherwise the copy must not exist (an allocation rolled back, a replica that failed,
  a release that committed): the Cargo is told ``DELETE /apps/{app}``; on 200 or 404 the
  intent is dropped, else it is tried again at every health round.

A manager that starts settles every intent it finds before it serves, so whatever a
crash interrupted is finished or rolled back: no copy stays on a Cargo unaccounted for
(holding quota there and making the name unusable: the Cargo answers 409 to a new
allocation of it). This module holds the log's format and its pure bookkeeping; the
manager does the calls.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from pathlib import Path
from typing import Any

from nodes.armada.fields import NAME_RE, enum_field, pattern_field, url_field
from nodes.common import Field, describe, str_field

INTENTS_FILE = "cargo-manager.intents.json"
INTENTS_FORMAT = "armada-cargo-manager-intents"
INTENTS_VERSION = 1
KINDS = ("allocate", "restore", "release")

INTENT_FIELDS = {
    "op": str_field(),
    "kind": enum_field(KINDS),
    "app": pattern_field(NAME_RE, "name of 1-40 characters a-z, 0-9, '-'"),
    "cargo_id": str_field(),
    "url": url_field(),
    "t": Field("finite number", lambda v: isinstance(v, (int, float))
               and not isinstance(v, bool) and math.isfinite(v)),
}


class MalformedIntentsError(ValueError):
    """The intent log does not have the expected shape (the message says where)."""


def new_op() -> str:
    """A fresh operation id (one allocation, restoration or release)."""
    return secrets.token_hex(8)


def intent(op: str, kind: str, app: str, cargo_id: str, url: str) -> dict[str, Any]:
    """One intent record."""
    return {"op": op, "kind": kind, "app": app, "cargo_id": cargo_id, "url": url,
            "t": time.time()}


def intents_text(intents: list[dict[str, Any]]) -> str:
    """The log's file content."""
    return json.dumps({"format": INTENTS_FORMAT, "version": INTENTS_VERSION,
                       "intents": intents}, indent=1)


def _check(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedIntentsError(f"{where}: expected an object, found {describe(value)}")
    for name, spec in INTENT_FIELDS.items():
        if name not in value or not spec.accepts(value[name]):
            found = describe(value[name]) if name in value else "nothing"
            raise MalformedIntentsError(f"{where}.{name}: expected {spec.expected}, "
                                        f"found {found}")
    unknown = sorted(set(value) - set(INTENT_FIELDS))
    if unknown:
        raise MalformedIntentsError(f"{where}.{unknown[0]}: unknown field")
    return value


def parse_intents(doc: Any) -> list[dict[str, Any]]:
    """The intents of a decoded log; :class:`MalformedIntentsError` saying what is wrong."""
    if not isinstance(doc, dict):
        raise MalformedIntentsError(f"expected a JSON object, found {describe(doc)}")
    if doc.get("format") != INTENTS_FORMAT:
        raise MalformedIntentsError(f'intents.format: expected "{INTENTS_FORMAT}", found '
                                    f"{describe(doc.get('format'))}")
    if doc.get("version") != INTENTS_VERSION or type(doc.get("version")) is not int:
        raise MalformedIntentsError(f"intents.version: expected {INTENTS_VERSION}, found "
                                    f"{describe(doc.get('version'))}")
    records = doc.get("intents")
    if not isinstance(records, list):
        raise MalformedIntentsError(f"intents.intents: expected an array, found "
                                    f"{describe(records)}")
    return [_check(r, f"intents[{i}]") for i, r in enumerate(records)]


def load_intents(path: Path) -> list[dict[str, Any]]:
    """The intents in ``path`` (none if it does not exist); ValueError or OSError with a
    reason (the manager refuses to start, naming the file)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise MalformedIntentsError(f"expected a JSON object, found invalid JSON ({exc})"
                                    ) from None
    return parse_intents(doc)
