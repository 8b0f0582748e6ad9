"""What the Armada simulator knows of real replicas: times measured against CPU share.

A replica in the simulator is a single-worker FIFO server whose service times come from
measurements of the real detector (``nodes.armada.detect_task``) run under a CPU limit
of the same kind the emulated nodes get (a node cgroup's CFS quota):
``testbed calibrate armada-detector`` (:mod:`testbed.systems.armada.calibration_run`)
measures, for each of several CPU shares (cores), the start-up time of a replica (spawn
to its first healthy answer), the detection time of every frame of the fleet's frame set
and of the small probe of ``armada-light``, and writes them as samples. A file measured on this machine kind
is committed (:data:`DEFAULT_PATH`), so the simulator works from a fresh clone.

Between measured shares a time is interpolated in log-log space at the same quantile
(a draw ``u`` in [0, 1) picks the ``u``-quantile at both neighbours), so the shape of
the distribution carries over; outside the measured range the nearest share's samples
are used unchanged (a detector with one OpenCV thread gains nothing from a second core,
and nothing below the smallest share is claimed). Pure: reading JSON only.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError

FORMAT = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "armada-calibration.json"
KINDS = ("frame", "probe_small")


@dataclasses.dataclass(frozen=True)
class ShareSamples:
    """What was measured at one CPU share: start-up and per-request times, seconds."""

    cores: float
    startup_s: tuple[float, ...]
    frame_s: tuple[float, ...]
    probe_small_s: tuple[float, ...]

    def times(self, kind: str) -> tuple[float, ...]:
        """The sorted samples of ``kind`` (``frame`` or ``probe_small``)."""
        return self.frame_s if kind == "frame" else self.probe_small_s


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A calibration file, read and checked: the shares in increasing order of cores,
    the mean JPEG sizes of a frame and of the small probe, and where it came from."""

    path: str
    frame_bytes: float
    probe_small_bytes: float
    shares: tuple[ShareSamples, ...]
    machine: Mapping[str, Any]

    def _neighbours(self, cores: float) -> tuple[ShareSamples, ShareSamples, float]:
        """The measured shares around ``cores`` and the weight of the upper one (log)."""
        levels = [s.cores for s in self.shares]
        if cores <= levels[0]:
            return self.shares[0], self.shares[0], 0.0
        if cores >= levels[-1]:
            return self.shares[-1], self.shares[-1], 0.0
        k = bisect.bisect_right(levels, cores)
        lo, hi = self.shares[k - 1], self.shares[k]
        return lo, hi, math.log(cores / lo.cores) / math.log(hi.cores / lo.cores)

    def _at(self, samples: Sequence[ShareSamples], weight: float, kind: str,
            u: float) -> float:
        lo, hi = (quantile(s.times(kind) if kind != "startup" else s.startup_s, u)
                  for s in samples)
        if weight == 0.0:
            return lo
        return math.exp((1.0 - weight) * math.log(lo) + weight * math.log(hi))

    def service_s(self, kind: str, cores: float, u: float) -> float:
        """The time of one request of ``kind`` (``frame`` or ``probe_small``) on a
        replica with ``cores`` of CPU: the ``u``-quantile, interpolated (module doc)."""
        if kind not in KINDS:
            raise TestbedError(f"{self.path}: no samples of {kind!r} (expected one of "
                               f"{', '.join(KINDS)})")
        lo, hi, weight = self._neighbours(cores)
        return self._at((lo, hi), weight, kind, u)

    def startup_s(self, cores: float, u: float = 0.5) -> float:
        """How long a replica on ``cores`` takes from its start to its first healthy
        answer (the ``u``-quantile of the measured start-ups, interpolated)."""
        lo, hi, weight = self._neighbours(cores)
        return self._at((lo, hi), weight, "startup", u)


def quantile(samples: Sequence[float], u: float) -> float:
    """The ``u``-quantile of sorted ``samples`` (linear between order statistics)."""
    if len(samples) == 1:
        return samples[0]
    x = min(max(u, 0.0), 1.0) * (len(samples) - 1)
    k = min(int(x), len(samples) - 2)
    return samples[k] + (x - k) * (samples[k + 1] - samples[k])


def _positive_list(path: Path, where: str, value: Any) -> tuple[float, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                       and math.isfinite(v) and v > 0 for v in value)):
        raise TestbedError(f"{path}: {where}: expected a non-empty list of positive "
                           f"seconds, found {str(value)[:80]}")
    return tuple(sorted(float(v) for v in value))


def _positive(path: Path, where: str, value: Any) -> float:
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value) or value <= 0):
        raise TestbedError(f"{path}: {where}: expected a positive number, found {value!r}")
    return float(value)


def parse_calibration(doc: Any, path: Path) -> Calibration:
    """A calibration document checked field by field; a bad one is a
    :class:`TestbedError` naming ``path`` and the field."""
    if not isinstance(doc, dict):
        raise TestbedError(f"{path}: expected a JSON object (an Armada calibration)")
    if doc.get("format") != FORMAT:
        raise TestbedError(f"{path}: format: expected {FORMAT}, found {doc.get('format')!r}")
    frame = doc.get("frame")
    if not isinstance(frame, dict):
        raise TestbedError(f"{path}: frame: expected an object with bytes and "
                           "probe_small_bytes")
    shares = doc.get("shares")
    if not isinstance(shares, list) or not shares:
        raise TestbedError(f"{path}: shares: expected a non-empty list")
    found = []
    for i, share in enumerate(shares):
        where = f"shares[{i}]"
        if not isinstance(share, dict):
            raise TestbedError(f"{path}: {where}: expected an object")
        found.append(ShareSamples(
            _positive(path, f"{where}.cores", share.get("cores")),
            _positive_list(path, f"{where}.startup_s", share.get("startup_s")),
            _positive_list(path, f"{where}.frame_s", share.get("frame_s")),
            _positive_list(path, f"{where}.probe_small_s", share.get("probe_small_s"))))
    levels = [s.cores for s in found]
    if len(set(levels)) != len(levels):
        raise TestbedError(f"{path}: shares: expected each cores value once, found {levels}")
    machine = doc.get("machine", {})
    return Calibration(str(path), _positive(path, "frame.bytes", frame.get("bytes")),
                       _positive(path, "frame.probe_small_bytes",
                                 frame.get("probe_small_bytes")),
                       tuple(sorted(found, key=lambda s: s.cores)),
                       machine if isinstance(machine, dict) else {})


def load_calibration(path: Path | str | None = None) -> Calibration:
    """The calibration at ``path`` (default: the committed :data:`DEFAULT_PATH`); a
    missing, unreadable or malformed file is one :class:`TestbedError` naming it."""
    where = DEFAULT_PATH if path is None else Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise TestbedError(f"{where}: cannot read the Armada calibration ({exc.strerror or exc}"
                           "); `testbed calibrate armada-detector` writes one") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TestbedError(f"{where}: expected JSON (an Armada calibration), found: "
                           f"{exc}") from None
    return parse_calibration(doc, where)
