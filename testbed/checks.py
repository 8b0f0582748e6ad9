"""Type checks for values decoded from JSON or YAML, shared by every layer.

Python counts ``True`` as the integer 1; a field that wants a number never wants a
boolean, so these refuse booleans (NumPy's too) and accept NumPy's integers and floats.

Text is refused when it holds a NUL or a lone surrogate (``"\\ud800"`` decodes from JSON
into a Python string that cannot be encoded as UTF-8): neither is a name, a path or a
message anyone means, and either breaks a file name, a command line, a log line or a
UTF-8 response far from where it came in. :func:`unclean_text_at` finds the first such
string anywhere in a decoded document, so a service can refuse a whole body at once.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: What no accepted text may contain: NUL and the surrogate code points (in a decoded
#: Python string a surrogate is always a lone one: pairs decode to one character).
_UNCLEAN = re.compile("[\x00\ud800-\udfff]")


def is_int(value: Any) -> bool:
    """An integer, not a boolean."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any, finite: bool = False) -> bool:
    """An integer or a float, not a boolean; with ``finite``, not NaN or infinite.

    An integer too large for a float (``1`` and 400 zeros) is not finite: every use of a
    number here ends in float arithmetic, where it would overflow.
    """
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    if not finite:
        return True
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_clean_text(value: str) -> bool:
    """``value`` holds neither a NUL nor a lone surrogate."""
    return _UNCLEAN.search(value) is None


def is_text(value: Any, nonempty: bool = False) -> bool:
    """A string without NUL or lone surrogates; with ``nonempty``, not the empty one."""
    return isinstance(value, str) and is_clean_text(value) and (not nonempty or value != "")


def unclean_text_at(value: Any, path: str = "") -> str | None:
    """The path (``field``, ``field.sub``, ``field[2]``) of the first string in a decoded
    JSON/YAML ``value`` (keys included) holding a NUL or a lone surrogate, else None.
    ``path`` names ``value`` itself (empty for a whole document: then ``body``)."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if not is_clean_text(item):
                return where or "body"
        elif isinstance(item, Mapping):
            children = []
            for key, sub in item.items():
                name = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and not is_clean_text(key):
                    return where or "body"
                children.append((name, sub))
            stack.extend(reversed(children))
        elif isinstance(item, Sequence) and not isinstance(item, (bytes, bytearray)):
            stack.extend(reversed([(f"{where}[{i}]", sub) for i, sub in enumerate(item)]))
    return None
