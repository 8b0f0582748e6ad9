"""The userspace link delayer: delay, jitter, loss and queue caps where the kernel has no netem.

The process entry point, ``python -m testbed.emulation.delayer --control /path/ctl.sock``
(:func:`~testbed.emulation.delayer.launcher.start_delayer` runs it for a run): it reads
the options, confines itself to its CPUs before any relaying thread exists, and serves
(:class:`~testbed.emulation.delayer.server.Delayer`) until SIGTERM or SIGINT, then removes
every link it served.
"""

from __future__ import annotations

import argparse
import os
import signal

from testbed.emulation.cpu_partition import CPUS_ENV, confine, partition
from testbed.emulation.delayer.compiled import DATA_PATH_ENV, DATA_PATHS, env_data_path
from testbed.emulation.delayer.server import Delayer
from testbed.emulation.tap_rx import RX_MODES, env_rx


def main(argv: list[str] | None = None) -> None:
    """Run the delayer with the options in ``argv`` (the command line's when None)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control", required=True, help="path of the control unix socket")
    parser.add_argument("--data-path", choices=("auto", *DATA_PATHS),
                        default=env_data_path(),
                        help=f"who relays frames (default: ${DATA_PATH_ENV} or auto)")
    parser.add_argument("--rx", choices=RX_MODES, default=env_rx(),
                        help="where receiving hosts process the frames of links that do not "
                             "name a mode (default: $TESTBED_SHAPER_RX or inline)")
    parser.add_argument("--cpus",
                        help=f"run only on these CPUs, a CPU list (default: ${CPUS_ENV}; "
                             "unset: every CPU); see testbed.emulation.cpu_partition")
    args = parser.parse_args(argv)
    try:
        cpus = (partition(args.cpus, "--cpus") if args.cpus is not None
                else partition(os.environ.get(CPUS_ENV)))
    except ValueError as exc:
        parser.error(str(exc))
    if cpus is not None:
        confine(cpus.shaper)  # before the shaper's threads exist: they inherit it

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delayer = Delayer(args.control, args.data_path, args.rx, cpus)
    try:
        delayer.serve()
    finally:
        delayer.close()


if __name__ == "__main__":
    main()
