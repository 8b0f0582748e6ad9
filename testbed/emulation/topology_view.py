"""What the parts a running emulation calls back into may use of it.

The executor's :class:`~testbed.emulation.executor.EmulatedTopology` hands itself to the
node runtimes (to start, end and crash services), to the event scheduler (to apply and
prepare events) and to the fidelity watch (to probe paths). Those parts sit below the
executor, so they name the topology by this protocol, not by importing the executor:
the imports then run one way, and the protocol lists exactly what they rely on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from testbed.emulation.built_network import BuiltNetwork
    from testbed.emulation.launcher import LauncherClient
    from testbed.emulation.ledger import Ledger
    from testbed.scenario.model import Event, Scenario


class HelpersView(Protocol):
    """The run's long-lived helpers (:class:`~testbed.emulation.executor.Infrastructure`)."""

    ledger: Ledger
    delayer: Any
    launcher: LauncherClient | None


class TopologyView(Protocol):
    """A built, started scenario as runtimes, events and the fidelity watch see it."""

    scenario: Scenario
    workdir: Path
    net: BuiltNetwork
    infra: HelpersView
    #: Every replay's ``events.jsonl`` lines, for the fidelity guard.
    event_records: list[dict[str, Any]]

    def service_env(self) -> dict[str, str]:
        """The environment every started program gets."""
        ...

    def event_effect(self, event: Event) -> Callable[[], None] | None:
        """Make ``event``'s change take effect now."""
        ...

    def join_pending(self, node: str) -> bool:
        """Whether a join of ``node`` has services (or a container) to start."""
        ...

    def join_cost_s(self, node: str) -> float:
        """Estimated wall seconds to bring ``node``'s services back."""
        ...

    def can_prepare_join(self, node: str) -> bool:
        """Whether a join of ``node`` can be prepared behind its gate."""
        ...

    def prepare_join(self, node: str) -> None:
        """Start ``node``'s stopped services behind its closed gate."""
        ...

    def commit_join(self, node: str) -> None:
        """The join takes effect: links up, gate open."""
        ...
