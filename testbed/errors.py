"""The project's own exception types.

Every error a user can cause (a bad scenario file, a bad command-line value, a machine
that lacks something) is raised as a :class:`TestbedError` subclass with a message that
names what was wrong and what was expected.
"""

from __future__ import annotations


class TestbedError(Exception):
    """Base class of every error the harness raises on purpose."""

    __test__ = False  # not a pytest test class despite the name


class ScenarioError(TestbedError):
    """A scenario or topology file is invalid.

    The message names the file, the field path inside it (``links[2].delay_ms``), what
    was expected and what was found. Nothing is built when this is raised.
    """

    def __init__(self, file: str, path: str, expected: str, found: object) -> None:
        self.file = str(file)
        self.path = path or "<top level>"
        self.expected = expected
        self.found = found
        shown = found if isinstance(found, str) and found.startswith("<") else repr(found)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"{self.file}: {self.path}: expected {expected}, found {shown}")


class EmulationError(TestbedError):
    """The emulated network or one of its services could not be built or driven."""


class Incomplete(TestbedError):
    """Part of a run or study failed; its folder holds, and names, everything else.

    The command line exits 1 for it (2 for other errors): results exist, but not all.
    """
