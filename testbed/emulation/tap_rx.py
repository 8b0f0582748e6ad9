"""Where the receiving host's network stack runs for a frame the delayer writes to a TAP.

A write to a plain TAP runs the receiving namespace's whole stack (IP, UDP or TCP, the
socket wake-up, a TCP ACK going out) inside the ``write`` call, that is on the delayer's
own relaying thread. Each released frame then costs the link the host's receive work, and
a burst of small frames is released later and later while that work piles up (at a few
hundred thousand frames/s on the project's 2-CPU VM: ``tests/bench/README.md``).

Two modes, per link:

* ``inline`` (the default): the plain TAP, as above. Cheapest per frame, so best for bulk
  TCP on few CPUs.
* ``threaded``: the TAP is opened with ``IFF_NAPI`` and its NAPI instance switched to a
  kernel thread (``/sys/class/net/<tap>/threaded``). A write then only queues the frame;
  the receive work runs in the kernel thread ``napi/<tap>-<id>``, scheduled like the
  host's other work, as a real NIC's interrupt work would be on the host's own CPU. The
  link's release timing no longer includes the receiver's work, so it stays on time at
  higher frame rates (a receiver short of CPU still drops frames in its own socket
  buffers, in either mode); each frame costs one more thread wake-up, which bulk TCP
  pays for on a small VM.

The ``threaded`` switch is a sysfs write, and sysfs shows the devices of the network
namespace that mounted it, so it runs in a short-lived ``nsenter``/``unshare --mount``
process that mounts sysfs privately inside the TAP's namespace.
"""

from __future__ import annotations

import os
import subprocess

#: ``IFF_NAPI`` (linux/if_tun.h): the TAP queues written frames to a NAPI instance.
IFF_NAPI = 0x0010
RX_MODES = ("inline", "threaded")
RX_ENV = "TESTBED_SHAPER_RX"


def check_rx(value: object, what: str = "rx") -> str:
    """``value`` if it names a receive mode, else a ValueError naming ``what``."""
    if value not in RX_MODES:
        raise ValueError(f"{what} must be one of {list(RX_MODES)}, got {value!r}")
    return str(value)


def env_rx() -> str:
    """The default receive mode asked for by ``TESTBED_SHAPER_RX`` (``inline`` if unset)."""
    return check_rx(os.environ.get(RX_ENV) or "inline", RX_ENV)


def tap_flags(rx: str) -> int:
    """Extra ``TUNSETIFF`` flags a TAP of receive mode ``rx`` is opened with."""
    return IFF_NAPI if check_rx(rx) == "threaded" else 0


def _with_sysfs(netns_pid: int, command: str, ifname: str,
                timeout: float) -> subprocess.CompletedProcess:
    """Run shell ``command`` (``$1`` is ``ifname``) after mounting a private sysfs inside
    the network namespace of ``netns_pid``."""
    argv = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", "unshare", "--mount",
            "--propagation", "private", "sh", "-c", f"mount -t sysfs sysfs /sys && {command}",
            "sh", ifname]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def set_threaded(netns_pid: int, ifname: str, timeout: float = 10.0) -> None:
    """Run the NAPI instance of TAP ``ifname`` (opened with :data:`IFF_NAPI` in the network
    namespace of ``netns_pid``) in a kernel thread; OSError naming the TAP if refused."""
    try:
        out = _with_sysfs(netns_pid, 'printf 1 > "/sys/class/net/$1/threaded"', ifname,
                          timeout)
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"switching tap {ifname!r} to threaded NAPI took over "
                      f"{timeout:g} s") from exc
    if out.returncode != 0:
        raise OSError(f"cannot switch tap {ifname!r} (namespace of pid {netns_pid}) to "
                      f"threaded NAPI: {out.stderr.strip() or f'exit {out.returncode}'}")


def is_threaded(netns_pid: int, ifname: str) -> bool:
    """Whether TAP ``ifname`` in the namespace of ``netns_pid`` runs NAPI in a thread."""
    out = _with_sysfs(netns_pid, 'cat "/sys/class/net/$1/threaded"', ifname, 10.0)
    return out.returncode == 0 and out.stdout.strip() not in ("", "0")
