"""The services that run inside emulated hosts, each started as ``python -m nodes.NAME``.

:mod:`nodes.common` holds what every aiohttp service shares (JSON errors, request-body
validation, precise timed waits, serving until SIGTERM); :mod:`nodes.offloading.tier_server` is the
multi-worker FIFO server that stands for one tier of the compute continuum.
"""
