"""The Cargo: Armada's storage node, one per storage-contributing edge node.

One module per job: :mod:`~nodes.armada.cargo.codec` (the record and its binary data-set
format), :mod:`~nodes.armada.cargo.store` (the durable SQLite store),
:mod:`~nodes.armada.cargo.index` (an application's records in memory, for reads and
nearest-neighbour matches) and :mod:`~nodes.armada.cargo.service` (the HTTP service,
replication and the command line; its docstring holds the design decisions). The
contract is ``docs/armada.md`` ("Storage layer").

The package is the program the harness registers: ``python -m nodes.armada.cargo`` runs
:func:`main`, and ``main`` and ``app_from_params`` are here, as on every service module.
"""

from nodes.armada.cargo.service import app_from_params, main

__all__ = ["app_from_params", "main"]
