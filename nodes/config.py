"""Service parameters, declared once: the scenario check and the command line both come
from one dataclass per program.

A program's parameters are a frozen dataclass (its ``Config``; the testbed's programs
name theirs ``<Program>Params``) whose fields are declared with :func:`option`: help
text, bounds, choices, whether the field is required or repeatable. Three things are
derived from it, so they cannot disagree:

* :func:`validate_params` checks a scenario's ``params`` mapping (as YAML gives it) when
  the scenario loads, so a bad value is reported with its file and field before anything
  is built;
* :func:`to_argv` turns validated params into the program's command line;
* :func:`parse_argv` (and :func:`add_options` / :func:`params_from_args`, which
  :func:`nodes.common.run_service` uses) is the program's argparse parser, with the same
  flags the services always had: field ``app_manager`` is ``--app-manager``.

Checks that involve several fields (at least one token, ``beacon`` needs ``token``) are
the dataclass's ``__post_init__``, raising :class:`ParamError`; both the scenario check
and the command line run it. This module is stdlib-only (and the project's value checks,
:mod:`testbed.checks`): the scenario loader imports the parameter modules (``nodes/armada/configs.py`` and the like), which must not drag in
aiohttp, OpenCV or numpy.

A required field's dataclass default is ``None``: the scenario check and the command line
insist on it, except that a scenario leaves a reserved one (the tier server's ``speed``)
to the executor, and the cross-field checks run all the same.

Supported field types: ``int``, ``float`` (finite; integers accepted), ``str``,
``bool`` (a flag: ``--memory-store``, default false), any of the first three ``| None``
(optional, default ``None``), and ``tuple[str, ...]`` etc. for a repeatable option
(``--token a --token b``; a scenario may give one value or a list).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from testbed.checks import is_int, is_number, is_text

#: ``{ip:NODE}``: a node's address, substituted by the executor after validation. A
#: string holding one passes every string check (choices), as its final value is not
#: known yet.
PLACEHOLDER = re.compile(r"\{ip:[^}]*\}")

#: What a reserved parameter's error says (the executor passes it from the scenario).
RESERVED = "no value: it is set by the executor from the scenario"

_META = "nodes.config.option"
_SCALARS = (int, float, str, bool)

C = TypeVar("C")


class ParamError(ValueError):
    """A parameter is refused: ``params.<field>: expected <what>, found <value>``.

    The command line shows the same refusal as ``argument --<flag>: expected ...``.
    """

    def __init__(self, field: str, expected: str, found: str) -> None:
        self.field, self.expected, self.found = field, expected, found
        super().__init__(f"params.{field}: expected {expected}, found {found}")


class CannotStart(Exception):
    """A service cannot start with these parameters in this environment (a state file
    it cannot load, a variable its Captain should have set): the runner logs
    ``refusing to start: <message>`` and exits with status 1."""


@dataclasses.dataclass(frozen=True)
class Option:
    """What a field declares beyond its type and default (see :func:`option`)."""

    help: str
    required: bool = False
    lo: float | None = None
    hi: float | None = None
    gt: float | None = None
    choices: tuple[str, ...] | None = None
    repeat: bool = False
    metavar: str | None = None


def option(default: Any = None, *, help: str, required: bool = False,
           lo: float | None = None, hi: float | None = None, gt: float | None = None,
           choices: Iterable[str] | None = None, repeat: bool = False,
           metavar: str | None = None) -> Any:
    """A parameter field: ``default`` (``None`` for a required field, ``()`` for a
    repeatable one), inclusive bounds ``lo``/``hi``, exclusive lower bound ``gt``,
    allowed string ``choices``, ``repeat`` for an option given any number of times."""
    if required and default is not None:
        raise TypeError("a required option has no default")
    if lo is not None and gt is not None:
        raise TypeError("a lower bound is either inclusive (lo) or exclusive (gt)")
    if repeat and default is None:
        default = ()
    spec = Option(help, required, lo, hi, gt, tuple(choices) if choices is not None else None,
                  repeat, metavar)
    return dataclasses.field(default=default, metadata={_META: spec})


def shown(value: Any) -> str:
    """A value as an error message shows it: ``repr``, containers summarised."""
    if isinstance(value, Mapping):
        return f"<mapping with {len(value)} keys>"
    if isinstance(value, (list, tuple, set)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclasses.dataclass(frozen=True)
class _Field:
    """One field of a Config, resolved: its kind and its declaration."""

    name: str
    kind: type  # int, float, str or bool (of one value, for a repeatable option)
    optional: bool
    default: Any
    spec: Option

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def _range(self) -> str:
        """The bounds in words: `` in [1, 12]``, `` in (0, 1]``, `` > 0``, or nothing."""
        lo, hi, gt = self.spec.lo, self.spec.hi, self.spec.gt
        if hi is not None and (lo is not None or gt is not None):
            low = f"[{_number(lo)}" if lo is not None else f"({_number(gt)}"
            return f" in {low}, {_number(hi)}]"
        if lo is not None:
            return f" >= {_number(lo)}"
        if gt is not None:
            return f" > {_number(gt)}"
        return f" <= {_number(hi)}" if hi is not None else ""

    def expected_one(self) -> str:
        """What one value of this field must be, in words."""
        if self.kind is bool:
            return "true or false"
        if self.kind is int:
            return "an integer" + self._range()
        if self.kind is float:
            return "a finite number" + self._range()
        if self.spec.choices is not None:
            return "one of " + ", ".join(self.spec.choices)
        return "a string"

    def expected(self) -> str:
        """What a scenario may give for this field, in words."""
        one = self.expected_one()
        return f"{one}, or a list of them" if self.spec.repeat else one

    def _in_range(self, value: float) -> bool:
        lo, hi, gt = self.spec.lo, self.spec.hi, self.spec.gt
        return ((lo is None or value >= lo) and (hi is None or value <= hi)
                and (gt is None or value > gt))

    def accepts(self, value: Any) -> Any:
        """One value, normalised (an integer for a float field becomes a float); raises
        :class:`ValueError` when it is not valid."""
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is int:
            ok = is_int(value) and self._in_range(value)
            value = int(value) if ok else value
        elif self.kind is float:
            ok = is_number(value, finite=True) and self._in_range(value)
            value = float(value) if ok else value
        else:
            ok = is_text(value) and (
                self.spec.choices is None or value in self.spec.choices
                or PLACEHOLDER.search(value) is not None)
        if not ok:
            raise ValueError(value)
        return value

    def check(self, value: Any) -> Any:
        """A scenario's value for this field, normalised (a list for a repeatable
        field), or a :class:`ParamError`."""
        try:
            if value is None and self.optional:
                return None
            if self.spec.repeat:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self.accepts(item) for item in items]
            return self.accepts(value)
        except ValueError:
            raise ParamError(self.name, self.expected(), shown(value)) from None

    def parse(self, text: str) -> Any:
        """An argparse ``type``: one command-line value of this field."""
        try:
            value: Any = self.kind(text)
            return self.accepts(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {self.expected_one()}, found {text!r}") from None

    def argv(self, value: Any) -> list[str]:
        """The command-line words for a valid ``value`` of this field."""
        if value is None or value is False:
            return []
        if value is True:
            return [self.flag]
        words: list[str] = []
        for item in value if self.spec.repeat else [value]:
            text = repr(float(item)) if self.kind is float else str(item)
            # "--lon=-88.2": a value that looks like an option stays a value
            words += [f"{self.flag}={text}"] if text.startswith("-") else [self.flag, text]
        return words


def _resolve(name: str, hint: Any, field: dataclasses.Field[Any], spec: Option) -> _Field:
    """The :class:`_Field` of one dataclass field; :class:`TypeError` if unsupported."""
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"{name}: a union is only allowed as X | None")
        optional, hint = True, rest[0]
    if spec.repeat:
        args = typing.get_args(hint)
        if typing.get_origin(hint) is not tuple or len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{name}: a repeatable option is a tuple[X, ...]")
        hint = args[0]
    if hint not in _SCALARS or (hint is bool and (optional or spec.repeat)):
        raise TypeError(f"{name}: unsupported parameter type {hint!r}")
    if hint is bool and field.default is not False:
        raise TypeError(f"{name}: a flag (bool) defaults to False")
    if spec.choices is not None and hint is not str:
        raise TypeError(f"{name}: choices are for string options")
    if optional and field.default is not None:
        raise TypeError(f"{name}: an optional (X | None) parameter defaults to None")
    return _Field(name, hint, optional, field.default, spec)


@functools.cache
def fields_of(config_cls: type) -> tuple[_Field, ...]:
    """The declared parameters of ``config_cls``, in declaration order."""
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls!r} is not a dataclass")
    hints = typing.get_type_hints(config_cls)
    found = []
    for field in dataclasses.fields(config_cls):
        spec = field.metadata.get(_META)
        if spec is None:
            raise TypeError(f"{config_cls.__name__}.{field.name}: declare it with option()")
        found.append(_resolve(field.name, hints[field.name], field, spec))
    return tuple(found)


def _build(config_cls: type[C], values: Mapping[str, Any]) -> C:
    """``config_cls(**values)``, repeatable values as tuples (runs ``__post_init__``)."""
    return config_cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def validate_params(config_cls: type, params: Mapping[str, Any],
                    reserved: Iterable[str] = ()) -> dict[str, Any]:
    """Check a scenario's ``params`` against ``config_cls``; a clean copy of them.

    Refuses, with a :class:`ParamError` (a :class:`ValueError` reading ``params.<field>:
    expected <what>, found <value>``), an unknown key, a key in ``reserved`` (the
    executor passes it from the scenario), a missing required field (unless reserved),
    a value of the wrong type, out of range or not among the choices, and whatever the
    Config's own cross-field check refuses. The copy holds the keys given, normalised:
    floats for float fields, lists for repeatable ones. Defaults are not filled in: a
    parameter left out is the program's default.
    """
    if not isinstance(params, Mapping):
        # the scenario loader's contract: every refusal of params is a ValueError
        raise ValueError(f"params: expected a mapping, found {shown(params)}")  # noqa: TRY004
    declared = {f.name: f for f in fields_of(config_cls)}
    reserved = set(reserved)
    for key in params:
        if key in reserved:
            raise ParamError(key, RESERVED, shown(params[key]))
        if key not in declared:
            allowed = [name for name in declared if name not in reserved]
            keys = f"one of the keys {', '.join(allowed)}" if allowed else "no keys"
            raise ParamError(str(key), keys, "<unknown key>")
    for name, field in declared.items():
        if field.spec.required and name not in params and name not in reserved:
            raise ParamError(name, "a value (the field is required)", "<missing>")
    clean = {key: declared[key].check(value) for key, value in params.items()}
    _build(config_cls, clean)
    return clean


def to_argv(config_cls: type, params: Mapping[str, Any]) -> list[str]:
    """The command-line words for validated (and placeholder-expanded) ``params``.

    ``--key value`` per parameter in declaration order (``--key=value`` when the value
    starts with ``-``), ``--key v`` once per value of a repeatable one, a flag alone
    when true, nothing for ``None`` or a false flag. Each value is checked again
    (:class:`ParamError`), so the words always parse; required fields are not, as a
    caller may add some words itself.
    """
    declared = fields_of(config_cls)
    names = {f.name for f in declared}
    for key in params:
        if key not in names:
            raise ParamError(str(key), f"one of the keys {', '.join(sorted(names))}",
                             "<unknown key>")
    argv: list[str] = []
    for field in declared:
        if field.name in params:
            argv += field.argv(field.check(params[field.name]))
    return argv


def add_options(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """Add an option to ``parser`` for every field of ``config_cls``."""
    for field in fields_of(config_cls):
        spec = field.spec
        shown_default = not (field.default is None or field.default is False
                             or field.default in ((), ""))
        help_text = spec.help + (f" (default: {field.default})" if shown_default else "")
        if field.kind is bool:
            parser.add_argument(field.flag, dest=field.name, action="store_true", help=help_text)
            continue
        metavar = spec.metavar or ("{" + ",".join(spec.choices) + "}" if spec.choices
                                   else field.name.upper())
        parser.add_argument(
            field.flag, dest=field.name, type=field.parse, required=spec.required,
            action="append" if spec.repeat else "store",
            default=[] if spec.repeat else field.default, metavar=metavar,
            help=help_text + (" (repeatable)" if spec.repeat else ""),
        )


def params_from_args(config_cls: type[C], args: argparse.Namespace,
                     parser: argparse.ArgumentParser) -> C:
    """The Config of parsed ``args``; a failed cross-field check exits through
    ``parser.error`` naming the option, like any bad option (status 2)."""
    values = {f.name: getattr(args, f.name) for f in fields_of(config_cls)}
    try:
        return _build(config_cls, values)
    except ParamError as exc:
        flag = "--" + exc.field.replace("_", "-")
        parser.error(f"argument {flag}: expected {exc.expected}, found {exc.found}")
        raise  # parser.error exits; this satisfies the type checker


def make_parser(config_cls: type, prog: str, description: str) -> argparse.ArgumentParser:
    """The argparse parser of ``config_cls`` alone (no ``--host``/``--port``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_options(parser, config_cls)
    return parser


def parse_argv(config_cls: type[C], argv: Sequence[str] | None, prog: str,
               description: str) -> C:
    """Parse ``argv`` (``sys.argv[1:]`` when ``None``) into a ``config_cls`` instance;
    a bad option exits with status 2 and a message naming it."""
    parser = make_parser(config_cls, prog, description)
    return params_from_args(config_cls, parser.parse_args(argv), parser)
