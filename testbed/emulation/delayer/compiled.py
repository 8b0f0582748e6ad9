"""The delayer's compiled data path (``shaper-c``) as its control plane sees it, and the
choice between the two data paths.

The compiled shaper (:mod:`testbed.emulation.shaper`) relays frames on its own threads
between TAPs with virtio-net headers, so TCP segmentation offloads cross a link whole;
:class:`CDirection` gives one of its directions the interface of the Python
:class:`~testbed.emulation.delayer.relay.Direction`. :func:`choose_data_path` uses the
compiled one when its library loads and otherwise says why in one log line, so the
Python loop relays. ``--data-path`` (or ``TESTBED_SHAPER``: ``auto``, ``c``, ``python``)
forces one; the ``TESTBED_SHAPER_FIFO``, ``_SPIN_US`` and ``_THREADS`` variables tune the
compiled one's threads.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.emulation.delayer.relay import STAT_COUNTERS, seed_text
from testbed.emulation.delayer.tap import VNET_HDR_LEN, set_offloads
from testbed.emulation.shaper import LIBRARY, CShaper
from testbed.emulation.shaper import load as load_shaper
from testbed.errors import EmulationError

#: Names of the two data paths, as ``ping`` reports them and run metadata records them.
DATA_PATHS = {"c": "shaper-c", "python": "delayer-py"}
DATA_PATH_ENV = "TESTBED_SHAPER"
#: Tuning of the compiled shaper's loop threads: SCHED_FIFO priority (0: SCHED_OTHER), how
#: close (us) a release must be to be awaited by polling rather than sleeping, and how many
#: threads share the links (default 1: on 2 CPUs a second thread measured slower, as the
#: threads then compete with the hosts' own processes).
FIFO_ENV, SPIN_ENV = "TESTBED_SHAPER_FIFO", "TESTBED_SHAPER_SPIN_US"
THREADS_ENV = "TESTBED_SHAPER_THREADS"
#: Most segments one 64 KB GSO frame carries (64 KB / 1448-byte MSS is 45). A queue shorter
#: than this could never admit a whole GSO frame, so such a direction reads single packets.
MAX_GSO_SEGMENTS = 64


@dataclass
class CDirection:
    """One direction of a link relayed by the compiled shaper (same interface as
    :class:`~testbed.emulation.delayer.relay.Direction` for the control plane)."""

    name: str
    shaper: CShaper
    handle: int
    src_fd: int
    #: The link may offload (``add_link``'s ``offload``); the source TAP offloads now.
    offload: bool = True
    offloads_on: bool = True
    removed: bool = False

    def configure(self, params: dict[str, Any], reseed: bool) -> None:
        """Apply validated link parameters; ``reseed`` restarts the loss/jitter draws
        from a 64-bit seed derived from the link's seed and this direction's side.

        Loss and the queue count packets: a direction with loss, or a queue too short for
        a whole GSO frame, turns its source TAP's offloads off so that it reads single
        packets (a GSO frame would be dropped whole, ~44 packets at once), and back on when
        neither holds."""
        wanted = self.offload and params["loss_pct"] == 0 \
            and params["queue"] >= MAX_GSO_SEGMENTS
        if wanted != self.offloads_on:
            set_offloads(self.src_fd, wanted)
            self.offloads_on = wanted
        seed = None
        if reseed:
            digest = hashlib.blake2b(seed_text(params, self.name).encode(), digest_size=8)
            seed = int.from_bytes(digest.digest(), "little")
        self.shaper.configure(self.handle, round(params["delay_ms"] * 1e6),
                              round(params["jitter_ms"] * 1e6), float(params["loss_pct"]),
                              int(params["queue"]), seed)

    def set_up(self, up: bool) -> None:
        """Bring the direction up or down (down drops its held frames)."""
        self.shaper.set_up(self.handle, up)

    def stats(self) -> dict[str, Any]:
        """The direction's counters, held packets/bytes, largest frame (Ethernet bytes,
        virtio-net header excluded) and lateness p99/max (us), as
        :class:`~testbed.emulation.delayer.relay.Direction`."""
        raw = self.shaper.stats(self.handle)
        out: dict[str, Any] = {k: raw[k] for k in STAT_COUNTERS}
        out["max_frame"] = raw["max_frame"] - VNET_HDR_LEN if raw["max_frame"] else 0

        def us(ns: int | None) -> float | None:
            return None if ns is None else ns / 1000

        out.update(held=raw["held"], held_bytes=raw["held_bytes"],
                   late_p99_us=us(raw["late_p99_ns"]), late_max_us=us(raw["late_max_ns"]))
        return out


def env_number(name: str, default: float, low: float, high: float,
               integer: bool = True) -> float:
    """The number in environment variable ``name`` (``default`` if unset), checked to be
    an integer (or any number) in ``[low, high]``; a bad value raises ValueError naming the
    variable and what was expected."""
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return default
    kind = "an integer" if integer else "a number"
    wrong = ValueError(f"{name} must be {kind} in [{low:g}, {high:g}], got {text!r}")
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise wrong from None
    if not low <= value <= high:
        raise wrong
    return value


def env_data_path() -> str:
    """The data path asked for by ``TESTBED_SHAPER`` (``auto`` if unset), checked."""
    value = os.environ.get(DATA_PATH_ENV) or "auto"
    if value not in ("auto", *DATA_PATHS):
        raise ValueError(f"{DATA_PATH_ENV} must be one of {['auto', *DATA_PATHS]}, "
                         f"got {value!r}")
    return value


def choose_data_path(requested: str, library: Path = LIBRARY) -> tuple[CShaper | None, str]:
    """The compiled shaper (from ``library``) for ``auto``/``c`` when it loads, else None
    (the Python loop relays); plus the reason, logged in one line. ``c`` refuses to fall
    back."""
    if requested not in ("auto", *DATA_PATHS):
        raise ValueError(f"data path must be one of {['auto', *DATA_PATHS]}, "
                         f"got {requested!r}")
    shaper, reason = None, "requested"
    if requested != "python":
        lib, reason = load_shaper(library)
        if lib is not None:
            try:
                shaper = CShaper(lib, fifo_priority=int(env_number(FIFO_ENV, 50, 0, 99)),
                                 spin_ns=round(env_number(SPIN_ENV, 30, 0, 1e6, False) * 1000),
                                 threads=int(env_number(THREADS_ENV, 1, 1, 64)))
            except OSError as exc:
                reason = str(exc)
        if shaper is None and requested == "c":
            raise EmulationError(f"the compiled shaper was requested but cannot be used: "
                                 f"{reason}")
    name = DATA_PATHS["python" if shaper is None else "c"]
    print(f"delayer data path: {name} ({reason})", file=sys.stderr, flush=True)
    return shaper, reason
