"""Type checks for values decoded from JSON or YAML, shared by every layer.

Python counts ``True`` as the integer 1; a field that wants a number never wants a
boolean, so these refuse booleans (NumPy's too) and accept NumPy's integers and floats.
"""

from __future__ import annotations

import math
import numbers
from typing import Any


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


def is_text(value: Any, nonempty: bool = False) -> bool:
    """A string; with ``nonempty``, not the empty one."""
    return isinstance(value, str) and (not nonempty or value != "")
