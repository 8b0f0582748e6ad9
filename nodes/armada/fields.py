"""JSON field validators shared by the Armada services (on top of ``nodes.common``).

Locations, tags, program arguments and task specifications appear in several services'
bodies; one definition each keeps the services' error messages identical.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from nodes.armada.configs import TASK_PARAMS
from nodes.common import Field, int_field, positive_number_field, str_field
from nodes.config import fields_of
from testbed.checks import is_number

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
ARG_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
#: An identifier that becomes part of a file, cgroup or environment name (task ids, app
#: names): a fixed character set and length, so it can never be a path.
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
#: Longest string argument passed to a task's program.
MAX_ARG_CHARS = 4096
RUNTIMES = ("process", "docker")


def runtime_needs(runtime: str) -> tuple[str, ...]:
    """The task fields a runtime needs: the program (``module``) for both, and for the
    docker runtime the ``image`` it runs in."""
    return ("module", "image") if runtime == "docker" else ("module",)


def _number_in(value: Any, lo: float, hi: float) -> bool:
    return is_number(value, finite=True) and lo <= value <= hi


def lat_field(required: bool = True) -> Field:
    """A latitude in degrees."""
    return Field("number in [-90, 90]", lambda v: _number_in(v, -90, 90), required)


def lon_field(required: bool = True) -> Field:
    """A longitude in degrees."""
    return Field("number in [-180, 180]", lambda v: _number_in(v, -180, 180), required)


def _is_location(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"lat", "lon"}
        and _number_in(value["lat"], -90, 90)
        and _number_in(value["lon"], -180, 180)
    )


def locations_field() -> Field:
    """A non-empty list of ``{"lat", "lon"}`` objects."""
    return Field(
        'non-empty array of {"lat": number in [-90, 90], "lon": number in [-180, 180]}',
        lambda v: isinstance(v, list) and 0 < len(v) <= 100 and all(map(_is_location, v)),
    )


def tags_field(required: bool = False) -> Field:
    """A list of non-empty strings (network affiliation or node capabilities)."""
    return Field(
        "array of non-empty strings",
        lambda v: isinstance(v, list) and all(isinstance(t, str) and t for t in v),
        required,
    )


def _is_arg_text(value: Any) -> bool:
    """A string a command line can carry: bounded, no NUL, encodable (no lone
    surrogate)."""
    if not isinstance(value, str) or len(value) > MAX_ARG_CHARS or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_arg_value(value: Any) -> bool:
    return isinstance(value, bool) or _is_arg_text(value) or is_number(value, finite=True)


def args_field() -> Field:
    """Program parameters: ``{name: string | number | boolean}``."""
    return Field(
        "object of name: string (no NUL, at most 4096 characters) | number | boolean "
        "(names like 'frame_size')",
        lambda v: isinstance(v, dict)
        and all(ARG_RE.fullmatch(k) and _is_arg_value(x) for k, x in v.items()),
        required=False,
    )


def enum_field(choices: Iterable[str], required: bool = True) -> Field:
    """One of ``choices``."""
    options = tuple(choices)
    return Field(f"one of {', '.join(options)}", lambda v: v in options, required)


def pattern_field(pattern: re.Pattern[str], what: str, required: bool = True) -> Field:
    """A string matching ``pattern`` entirely."""
    return Field(what, lambda v: isinstance(v, str) and bool(pattern.fullmatch(v)), required)


def id_field(required: bool = True) -> Field:
    """An identifier (:data:`ID_RE`): letters, digits, ``_.-``, at most 80 characters."""
    return pattern_field(ID_RE, "identifier of letters, digits and _.- (at most 80, "
                                "starting with a letter or digit)", required)


def bool_field(required: bool = True) -> Field:
    """A JSON boolean."""
    return Field("boolean", lambda v: isinstance(v, bool), required)


def _is_http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme == "http" and bool(parts.hostname) and parts.port is not None
    except ValueError:  # a port out of range or not a number, a malformed IPv6 host
        return False


def url_field() -> Field:
    """An ``http://host:port`` URL."""
    return Field("http://host:port URL", _is_http_url)


def task_fields() -> dict[str, Field]:
    """What a task is, as the Spinner and the Captain receive it."""
    return {
        "task_id": id_field(),
        "app": id_field(),
        "runtime": enum_field(RUNTIMES),
        "module": pattern_field(MODULE_RE, "dotted Python module name", required=False),
        "image": str_field(required=False),
        "args": args_field(),
        "cpu": positive_number_field(),
        "memory_mb": int_field(1),
    }


#: The options of every service's runner (:func:`nodes.common.run_service`): the
#: Captain sets ``--host`` and ``--port`` itself and hands the run secret's file over by
#: environment; ``--help`` only stops the program. A task's ``args`` name none of them,
#: nor an abbreviation of one (argparse reads ``--sec`` as ``--secret-file``).
RUNNER_OPTIONS = ("--host", "--port", "--secret-file", "--help")


def arg_flag(name: str) -> str:
    """The command-line flag of an ``args`` key: ``frame_size`` -> ``--frame-size``."""
    return "--" + name.replace("_", "-")


def task_args_refusal(module: str | None, args: Mapping[str, Any],
                      control_host: str | None = None) -> str | None:
    """Why ``args`` (valid for :func:`args_field`) cannot be given to the task program
    ``module``, as ``args.<key>: expected ..., found ...``; None when they can.

    A key may not be, nor abbreviate, one of :data:`RUNNER_OPTIONS` (a deployment
    would otherwise choose where the task listens, or which secret file it reads). For
    a program with declared parameters (:data:`~nodes.armada.configs.TASK_PARAMS`),
    every key must be one of them (their values are the program's to check: a bad one
    makes it exit, and the Captain reports the task failed). With ``control_host``
    (the Captain's Beacon's host, where the run's own services are), every URL
    argument, a declared ``URL`` option or, for a program without declarations, any
    value holding ``://``, must be ``http://host:port`` on that host: a task presents
    the run secret to the services such an option names (the face task's
    ``storage_manager``, then the Cargos it lists).
    """
    declared = TASK_PARAMS.get(module or "")
    options = {f.flag: f for f in fields_of(declared)} if declared is not None else None
    for name, value in args.items():
        flag = arg_flag(name)
        owner = next((o for o in RUNNER_OPTIONS if o.startswith(flag)), None)
        if owner is not None:
            what = owner if owner == flag else f"{flag} (short for {owner})"
            return (f"args.{name}: expected an option of the program, found {what}, "
                    f"which only the Captain sets ({', '.join(RUNNER_OPTIONS)} are never "
                    "a deployment's)")
        if options is not None and flag not in options:
            names = ", ".join(f.name for f in options.values())
            return (f"args.{name}: expected one of the options of {module} ({names}), "
                    "found an unknown option")
        is_url = (options[flag].spec.metavar == "URL" if options is not None
                  else isinstance(value, str) and "://" in value)
        if is_url and control_host is not None and not _on_host(value, control_host):
            return (f"args.{name}: expected an http://host:port URL on {control_host} "
                    f"(the Beacon's host, where the run's services are), found {value!r:.80}")
    return None


def _on_host(value: Any, host: str) -> bool:
    """Whether ``value`` is an ``http://host:port`` URL on ``host``, without user info
    (``http://good@evil:1`` goes to ``evil``)."""
    if not _is_http_url(value):
        return False
    parts = urlsplit(value)
    return parts.username is None and (parts.hostname or "").lower() == host.lower()


def args_to_argv(args: dict[str, Any]) -> list[str]:
    """``{"frame_size": 320, "verbose": true}`` -> ``["--frame-size", "320", "--verbose"]``.

    A value starting with ``-`` is joined to its flag (``--name=--host``), so the
    program reads it as that option's value, never as an option of its own."""
    argv: list[str] = []
    for name, value in args.items():
        flag = arg_flag(name)
        if value is True:
            argv.append(flag)
        elif value is not False:
            text = str(value)
            argv += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return argv


# ------------------------------------------------------------------ storage layer

CONSISTENCIES = ("strong", "eventual")
STRATEGIES = ("nearest", "random")
SOURCE_KINDS = ("inline", "url", "file", "replicas")
MAX_RECORD_ID = 2**63 - 1  # an 8-byte signed integer, non-negative
MAX_DIM = 4096


def _is_vector(value: Any) -> bool:
    return (
        isinstance(value, list)
        and 0 < len(value) <= MAX_DIM
        and all(_number_in(x, -math.inf, math.inf) for x in value)
    )


def _is_record_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RECORD_ID


def vector_field() -> Field:
    """A descriptor: a non-empty array of finite numbers (float64 once stored)."""
    return Field(f"array of 1 to {MAX_DIM} finite numbers", _is_vector)


def _is_record(value: Any, versioned: bool) -> bool:
    if not isinstance(value, dict):
        return False
    keys = {"id", "vector", "ts", "origin"} if versioned else {"id", "vector"}
    if set(value) != keys or not _is_record_id(value["id"]) or not _is_vector(value["vector"]):
        return False
    if versioned:
        return _is_record_id(value["ts"]) and isinstance(value["origin"], str)
    return True


def records_field(versioned: bool = False, max_records: int = 100_000) -> Field:
    """A non-empty array of records ``{"id", "vector"}`` (plus ``ts`` and ``origin``, the
    version, when ``versioned``: what Cargos send each other)."""
    shape = '{"id", "vector", "ts", "origin"}' if versioned else '{"id", "vector"}'
    return Field(
        f"array of 1 to {max_records} records {shape} (id: integer in [0, 2**63 - 1], "
        "vector: array of finite numbers)",
        lambda v: isinstance(v, list) and 0 < len(v) <= max_records
        and all(_is_record(r, versioned) for r in v),
    )


def urls_field(required: bool = True) -> Field:
    """An array of ``http://host:port`` URLs (possibly empty)."""
    return Field(
        "array of http://host:port URLs",
        lambda v: isinstance(v, list) and len(v) <= 100 and all(map(_is_http_url, v)),
        required,
    )


def _is_data_url(value: Any) -> bool:
    """``http://host[:port]/path``: where a data set is served."""
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return False
    return parts.scheme == "http" and bool(parts.hostname)


def _is_source(value: Any) -> bool:
    if not isinstance(value, dict) or value.get("kind") not in SOURCE_KINDS:
        return False
    kind = value["kind"]
    if kind == "inline":
        return set(value) == {"kind", "records"} and records_field().accepts(value["records"])
    if kind == "url":
        return set(value) == {"kind", "url"} and _is_data_url(value["url"])
    if kind == "file":
        path = value.get("path")
        return set(value) == {"kind", "path"} and isinstance(path, str) and path != ""
    return (set(value) == {"kind", "urls"} and isinstance(value["urls"], list)
            and 0 < len(value["urls"]) <= 100 and all(map(_is_http_url, value["urls"])))


def source_field(kinds: Iterable[str] = SOURCE_KINDS) -> Field:
    """Where an application's initial data set comes from (optional).

    ``{"kind": "inline", "records": [...]}``, ``{"kind": "url", "url": "http://..."}``,
    ``{"kind": "file", "path": "/..."}`` or ``{"kind": "replicas", "urls": [...]}``.
    """
    allowed = tuple(kinds)
    shapes = {
        "inline": '{"kind": "inline", "records": [{"id", "vector"}, ...]}',
        "url": '{"kind": "url", "url": "http://host[:port]/path"}',
        "file": '{"kind": "file", "path": "/path"}',
        "replicas": '{"kind": "replicas", "urls": ["http://host:port", ...]}',
    }
    return Field(
        " or ".join(shapes[k] for k in allowed),
        lambda v: _is_source(v) and v["kind"] in allowed,
        required=False,
    )
