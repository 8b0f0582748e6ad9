"""The userspace link delayer, moved into a package of its own: :mod:`.server` holds it whole
for now (its module docstring describes it); this package exports the names the rest of the
project imports, and ``python -m testbed.emulation.delayer`` runs it (``__main__.py``).
"""

from testbed.emulation.delayer.server import (
    DATA_PATH_ENV,
    DATA_PATHS,
    FIFO_ENV,
    SPIN_ENV,
    THREADS_ENV,
    Delayer,
    DelayerClient,
    LatenessHistogram,
    choose_data_path,
    env_data_path,
    env_number,
    start_delayer,
)

__all__ = ["DATA_PATHS", "DATA_PATH_ENV", "FIFO_ENV", "SPIN_ENV", "THREADS_ENV", "Delayer",
           "DelayerClient", "LatenessHistogram", "choose_data_path", "env_data_path",
           "env_number", "start_delayer"]
