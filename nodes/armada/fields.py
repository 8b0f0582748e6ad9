"""JSON field validators shared by the Armada services (on top of ``nodes.common``).

Locations, tags, program arguments and task specifications appear in several services'
bodies; one definition each keeps the services' error messages identical.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from nodes.common import Field, int_field, positive_number_field, str_field

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
ARG_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
RUNTIMES = ("process", "docker")
NODE_TYPES = ("dedicated", "volunteer")


def _number_in(value: Any, lo: float, hi: float) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and lo <= value <= hi
    )


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


def _is_arg_value(value: Any) -> bool:
    return isinstance(value, (str, bool)) or _number_in(value, -math.inf, math.inf)


def args_field() -> Field:
    """Program parameters: ``{name: string | number | boolean}``."""
    return Field(
        "object of name: string | number | boolean (names like 'frame_size')",
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


def bool_field(required: bool = True) -> Field:
    """A JSON boolean."""
    return Field("boolean", lambda v: isinstance(v, bool), required)


def _is_http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme == "http" and bool(parts.hostname) and parts.port is not None


def url_field() -> Field:
    """An ``http://host:port`` URL."""
    return Field("http://host:port URL", _is_http_url)


def task_fields() -> dict[str, Field]:
    """What a task is, as the Spinner and the Captain receive it."""
    return {
        "task_id": str_field(),
        "app": str_field(),
        "runtime": enum_field(RUNTIMES),
        "module": pattern_field(MODULE_RE, "dotted Python module name", required=False),
        "image": str_field(required=False),
        "args": args_field(),
        "cpu": positive_number_field(),
        "memory_mb": int_field(1),
    }


def args_to_argv(args: dict[str, Any]) -> list[str]:
    """``{"frame_size": 320, "verbose": true}`` -> ``["--frame-size", "320", "--verbose"]``."""
    argv: list[str] = []
    for name, value in args.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False:
            argv += [flag, str(value)]
    return argv
