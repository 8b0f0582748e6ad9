"""Containers a service starts beside itself in its node's pod, on the node's engine.

A docker node of the harness is a pod (``docs/docker.md``): a *sandbox* container holds
the node's network namespace and a *service* container, which joins it, runs the node's
services. A service that is given its node's engine (the engine's socket is mounted into
the pod and the pod's service container is named to it) can start further containers as
*siblings* in that pod: :class:`~nodes.pod_engine.PodEngine` starts each one in the pod's network
namespace, with the pod's read-only host mounts (the interpreter, the virtual
environment, the run secret's folder), with CPU and memory limits of its own, and
labelled with the pod's ``edge-testbed.*`` labels plus :data:`LABEL_PARENT` = the pod's
name.

That label is the contract with the harness: before the pod's services start, the
harness records in the run ledger that every container labelled with this parent is
the pod's (ledger kind ``docker_children``), so ``testbed clean`` and every teardown
remove them, and a crash of the node kills them with it, whatever the service did or
failed to do.

Images are built locally (:meth:`~nodes.pod_engine.PodEngine.ensure_image`): a build context made in
memory, ``FROM`` the pod's own image, never pulled. A registry is neither needed nor
reachable on the project's machines.

The engine itself is :class:`nodes.pod_engine.PodEngine`; this module holds the contract
and imports nothing heavy, so a service that never gets an engine never loads the Docker
SDK.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Labels of the pod a sibling carries too (the run, the node).
LABEL_PREFIX = "edge-testbed."
#: The pod's service container's name, on every sibling container it starts.
LABEL_PARENT = "edge-testbed.parent"


class PodError(Exception):
    """The engine refused or could not do what was asked; the message says why."""


@dataclass(frozen=True)
class Exit:
    """How a sibling container ended."""

    code: int
    oom_killed: bool
