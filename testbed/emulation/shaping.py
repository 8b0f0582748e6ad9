"""Which link-shaping backend this machine supports, and the tc commands for bandwidth.

Two backends emulate a link's one-way delay, jitter, loss and queue cap:

* ``netem``: the kernel's ``sch_netem`` qdisc (through Mininet's ``TCLink``), available on
  ordinary distribution kernels;
* ``userspace``: the delayer process of :mod:`testbed.emulation.delayer`, for kernels built
  without netem (the project's CI machine). Its frames are relayed by the compiled shaper
  (``shaper-c``) where its library is built, else by the delayer's Python loop
  (``delayer-py``); :func:`shaping_engine` names the one a run used and
  :func:`shaping_rx` where the receiving hosts processed its frames.

Bandwidth is shaped with HTB in both cases. tc shapes egress only, so both ends of a link
get a shaper and each direction is limited by the shaper of the interface it leaves.
The backend is detected once per process by trying netem inside a throwaway network
namespace, and the result is recorded in every run's metadata by the executor.
"""

from __future__ import annotations

import functools
import subprocess
from typing import Any

from testbed.errors import EmulationError

BACKENDS = ("netem", "userspace")
REQUESTS = ("auto", *BACKENDS)
PROBE_IFNAME = "tbtprobe0"


@functools.cache
def detect_backend() -> str:
    """``"netem"`` if the kernel can add a netem qdisc, else ``"userspace"`` (cached).

    The probe runs in an anonymous network namespace (``unshare --net``) that vanishes with
    the probing process, so it leaves nothing behind even if it is killed midway.
    """
    script = (f"ip link add {PROBE_IFNAME} type dummy && "
              f"tc qdisc add dev {PROBE_IFNAME} root netem delay 1ms")
    try:
        probe = subprocess.run(["unshare", "--net", "sh", "-c", script],
                               check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "userspace"
    return "netem" if probe.returncode == 0 else "userspace"


def resolve_backend(requested: str = "auto") -> str:
    """Turn a requested backend into the one to use; refuse ``netem`` where it is missing."""
    if requested not in REQUESTS:
        raise EmulationError(f"link backend must be one of {list(REQUESTS)}, got {requested!r}")
    if requested == "auto":
        return detect_backend()
    if requested == "netem" and detect_backend() != "netem":
        raise EmulationError("link backend 'netem' was requested but this kernel has no "
                             "sch_netem (tc netem qdisc); use 'userspace' or 'auto'")
    return requested


def shaping_engine(backend: str, delayer: Any = None) -> str:
    """What shaped a run's links: ``netem``, or the delayer's data path (``shaper-c`` or
    ``delayer-py``, as its ``ping`` reports it) for the userspace backend."""
    if backend != "userspace":
        return backend
    if delayer is None:
        raise EmulationError("the userspace link backend needs a running delayer")
    return str(delayer.ping()["data_path"])


def shaping_rx(backend: str, delayer: Any = None) -> str | None:
    """Where receiving hosts processed the delayer's frames by default (``inline`` or
    ``threaded``, see :mod:`testbed.emulation.tap_rx`); None for ``netem`` links."""
    if backend != "userspace":
        return None
    if delayer is None:
        raise EmulationError("the userspace link backend needs a running delayer")
    return str(delayer.ping()["rx"])


def htb_commands(ifname: str, bw_mbit: float) -> list[str]:
    """tc commands that cap the egress of ``ifname`` at ``bw_mbit`` Mbit/s.

    The layout (root ``5:0`` HTB defaulting to class ``5:1``, 15 kB burst) is the one
    Mininet's ``TCIntf`` builds, so both backends shape bandwidth identically.
    """
    if not bw_mbit > 0:
        raise EmulationError(f"bandwidth must be > 0 Mbit/s, got {bw_mbit!r}")
    return [f"tc qdisc add dev {ifname} root handle 5:0 htb default 1",
            f"tc class add dev {ifname} parent 5:0 classid 5:1 htb rate {bw_mbit:f}Mbit burst 15k"]


def clear_command(ifname: str) -> str:
    """tc command that removes any root qdisc of ``ifname`` (back to the default)."""
    return f"tc qdisc del dev {ifname} root"
