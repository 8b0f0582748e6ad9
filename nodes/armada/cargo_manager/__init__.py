"""The Cargo Manager: Armada's storage resource manager.

One module per job: :mod:`~nodes.armada.cargo_manager.state` (the Cargos and allocations
it keeps, and its state file), :mod:`~nodes.armada.cargo_manager.placement` (the pure rule
that picks an application's next Cargo), :mod:`~nodes.armada.cargo_manager.bodies` (the
fields of its request bodies) and :mod:`~nodes.armada.cargo_manager.service` (the HTTP
service, health checks, allocation, re-replication, the intent log and the command line;
its docstring holds the design decisions). The contract is ``docs/armada.md`` ("Storage
layer").

The package is the program the harness registers: ``python -m nodes.armada.cargo_manager``
runs :func:`main`, and ``main`` and ``app_from_params`` are here, as on every service
module.
"""

from nodes.armada.cargo_manager.service import app_from_params, main

__all__ = ["app_from_params", "main"]
