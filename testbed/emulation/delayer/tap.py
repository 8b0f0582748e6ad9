"""The TAP devices of the delayer's links, made inside each end's network namespace.

A link is a pair of TAPs, one in each end's namespace under the interface name the
topology wants; the delayer holds both file descriptors, so closing them removes the
devices. The compiled data path opens them with virtio-net headers and segmentation
offloads (TCP segments cross a link whole), the Python one as plain Ethernet TAPs.
"""

from __future__ import annotations

import fcntl
import os
import struct

from testbed.emulation.netns import setns
from testbed.emulation.tap_rx import tap_flags

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUNSETOFFLOAD = 0x400454D0
TUNSETVNETHDRSZ = 0x400454D8
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN = 0x01, 0x02, 0x04, 0x08
TUN_F_USO4, TUN_F_USO6 = 0x20, 0x40
VNET_HDR_LEN = 12


def _disable_ipv6(ifname: str) -> None:
    """Turn IPv6 off on a new TAP (this thread's namespace), if the kernel has IPv6.

    Emulated hosts talk IPv4; IPv6 start-up chatter (router and neighbour solicitations)
    would otherwise be flooded to every bridge port and relayed by the delayer, a cost
    that grows with the square of the number of hosts.
    """
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as fh:
            fh.write("1")
    except FileNotFoundError:
        pass


def set_offloads(fd: int, offload: bool) -> None:
    """Turn a virtio-net-header TAP's checksum/TSO/USO offloads on or off (at any time).

    With offloads on, the host's stack hands the TAP whole 64 KB TCP segments with partial
    checksums, described by the header in front of each frame; writing the frame with that
    header to the peer TAP hands the segment on whole. USO is tried first (kernels >= 6.2).
    Off, the stack segments and checksums before the TAP (in software, also for sockets
    that were sending segments) and the header stays empty: every frame is one packet.
    """
    if not offload:
        fcntl.ioctl(fd, TUNSETOFFLOAD, 0)
        return
    base = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
    try:
        fcntl.ioctl(fd, TUNSETOFFLOAD, base | TUN_F_USO4 | TUN_F_USO6)
    except OSError:
        fcntl.ioctl(fd, TUNSETOFFLOAD, base)


def open_tap(netns_pid: int, ifname: str, home_ns: int, vnet: bool = False,
             offload: bool = True, rx: str = "inline") -> int:
    """Create TAP ``ifname`` inside the network namespace of ``netns_pid``; return its fd.

    The device lives in the namespace where ``/dev/net/tun`` was opened, so the calling
    thread enters the target namespace for the open and returns to ``home_ns`` after.
    ``vnet`` makes a TAP whose frames carry a virtio-net header and (``offload``)
    segmentation offloads (the compiled data path); without it frames are plain Ethernet
    (the Python one). ``rx`` ``threaded`` opens it for NAPI (see
    :mod:`testbed.emulation.tap_rx`; the caller then switches NAPI to its thread).
    """
    if not ifname or len(ifname.encode()) > 15:
        raise ValueError(f"interface name must be 1..15 bytes, got {ifname!r}")
    target = os.open(f"/proc/{netns_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(target)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                flags = IFF_TAP | IFF_NO_PI | (IFF_VNET_HDR if vnet else 0) | tap_flags(rx)
                fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", ifname.encode(), flags))
                if vnet:
                    fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
                    set_offloads(fd, offload)
                _disable_ipv6(ifname)
            except OSError:
                os.close(fd)
                raise
        finally:
            setns(home_ns)
    finally:
        os.close(target)
    return fd
