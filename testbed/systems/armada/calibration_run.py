"""``testbed calibrate armada-detector``: the real detector's times against CPU share.

For each CPU share of the size, one detection replica (``nodes.armada.detect_task``,
the program a Captain starts, one worker and one OpenCV thread as in the fleets) runs
in a cgroup with that CPU quota: the same kernel mechanism that limits an emulated
node (:class:`~testbed.emulation.cgroups.NodeCgroup`). Measured per share:

* start-up: from the spawn to its first healthy ``GET /health`` (``startups`` times);
* per request, one at a time after a warm-up (so no queueing is measured, only
  service), the time of the whole request over loopback (receiving it, decoding,
  detection and answering, all under the quota): every frame of the fleets' frame set
  (``frame_s``) and the small probe of ``armada-light`` (``probe_small_s``); the
  replica's own ``processing_ms`` of each frame is kept beside (``frame_processing_s``),
  so the report can say how much of a request is HTTP.

The result is the calibration file the simulator reads
(:mod:`testbed.systems.armada.sim_calibration`): by default the committed
``testbed/systems/armada/data/armada-calibration.json``; the report beside it
(``docs/results/armada/calibration.md``) gives the quantiles per share. Every
process, cgroup and secret folder is recorded in a ledger and removed at the end, or
by ``testbed clean`` after a crash. Needs root (cgroups).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.systems.armada.sim_calibration import DEFAULT_PATH, FORMAT, load_calibration

Progress = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[3]
#: The fleets' frame set (builders.Fleet's default frame size).
FRAME_SPEC = {"width": 240, "height": 180, "count": 30}
START_TIMEOUT_S = 300.0  # a replica on 0.05 cores imports OpenCV in about a minute
REQUEST_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class CalibrationSize:
    """The CPU shares measured (cores), and how much at each."""

    shares: tuple[float, ...]
    startups: int
    rounds: int  # passes over the frame set (and as many small probes per pass)


SIZES = {"small": CalibrationSize((0.05, 1.0), startups=1, rounds=1),
         "full": CalibrationSize((0.05, 0.07, 0.1, 0.15, 0.25, 0.5, 1.0), startups=3,
                                 rounds=3)}


def _frames(folder: Path) -> tuple[list[bytes], bytes]:
    """The fleets' frames and the small probe, written as the drivers write them."""
    from testbed.systems.armada.control import write_frames
    from testbed.systems.armada.fleet import write_small_probe

    frames_dir = write_frames({"frames": FRAME_SPEC}, folder / "frames")
    probe = write_small_probe(frames_dir).read_bytes()
    return [p.read_bytes() for p in sorted(frames_dir.glob("*.jpg"))], probe


class _Replica:
    """One detection replica in its own CPU-limited cgroup, recorded in ``ledger``."""

    def __init__(self, ledger: Any, run_id: str, name: str, cores: float,
                 secret_env: dict[str, str], log: Path) -> None:
        from testbed.emulation.cgroups import NodeCgroup

        cgroup = NodeCgroup(ledger, run_id, name, cores / (os.cpu_count() or 1), None)
        # the shell joins the cgroup, then becomes the replica: under the quota from its
        # first instruction
        join = 'for f in $TESTBED_CGROUP_PROCS; do echo $$ > "$f"; done; exec "$0" "$@"'
        self.began = time.perf_counter()
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            ["sh", "-c", join, sys.executable, "-m", "nodes.armada.detect_task", "--host",
             "127.0.0.1", "--port", "0", "--workers", "1", "--threads", "1"],
            cwd=ROOT, stdout=self.log, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **secret_env, "PYTHONPATH": str(ROOT),
                 "TESTBED_CGROUP_PROCS": " ".join(cgroup.procs_files)})
        self.entry = ledger.record_process(self.proc.pid)
        self.ledger = ledger
        self.url = ""

    def wait_healthy(self) -> float:
        """Seconds from the spawn to the first healthy answer."""
        import requests

        from testbed.poll import wait_until

        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # the one 'listening on host:port' line
        if "listening on" not in line:
            raise TestbedError(f"detection replica did not start: {line.strip() or 'no output'}")
        self.url = f"http://127.0.0.1:{int(line.rsplit(':', 1)[1])}"

        def healthy() -> bool:
            try:
                return requests.get(f"{self.url}/health", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_until(healthy, START_TIMEOUT_S, interval=0.02,
                   what=f"the detection replica at {self.url} to answer /health")
        return time.perf_counter() - self.began

    def request_s(self, data: bytes) -> tuple[float, float]:
        """One JPEG: the request's time over loopback and the replica's own processing
        time (seconds)."""
        import requests

        began = time.perf_counter()
        resp = requests.post(f"{self.url}/infer", data=data,
                             headers={"Content-Type": "image/jpeg"}, timeout=REQUEST_TIMEOUT_S)
        took = time.perf_counter() - began
        body = resp.json()
        if resp.status_code != 200:
            raise TestbedError(f"{self.url}/infer answered {resp.status_code}: {body}")
        return took, float(body["processing_ms"]) / 1e3

    def stop(self) -> None:
        """End the replica and forget it in the ledger."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.log.close()
        self.ledger.release(self.entry)


def measure(size: CalibrationSize, workdir: Path, progress: Progress = print
            ) -> dict[str, Any]:
    """Every share of ``size`` measured (module docstring); the calibration document."""
    from testbed.emulation.ledger import Ledger
    from testbed.emulation.run_secret import start_run_secret
    from testbed.runner import machine_details

    frames, probe = _frames(workdir)
    run_id = f"armada-cal-{os.getpid()}-{time.time_ns()}"
    ledger = Ledger(run_id)
    shares = []
    try:
        secret = start_run_secret(ledger, run_id)
        for k, cores in enumerate(size.shares):
            startups: list[float] = []
            frame_s: list[float] = []
            processing_s: list[float] = []
            probe_s: list[float] = []
            for attempt in range(size.startups):
                replica = _Replica(ledger, run_id, f"r{k}-{attempt}", cores, secret.env(),
                                   workdir / f"replica-{k}-{attempt}.log")
                try:
                    startups.append(replica.wait_healthy())
                    if attempt == 0:  # the requests: once per share, on a warm replica
                        replica.request_s(frames[0])
                        for _ in range(size.rounds):
                            for frame in frames:
                                took, processing = replica.request_s(frame)
                                frame_s.append(took)
                                processing_s.append(processing)
                                if len(probe_s) < len(frame_s) // 2 + 1:
                                    probe_s.append(replica.request_s(probe)[0])
                finally:
                    replica.stop()
            shares.append({"cores": cores, "startup_s": startups, "frame_s": frame_s,
                           "frame_processing_s": processing_s, "probe_small_s": probe_s})
            progress(f"  {cores:g} cores: start-up {np.median(startups):.1f} s, frame median "
                     f"{1e3 * np.median(frame_s):.1f} ms (p95 "
                     f"{1e3 * np.percentile(frame_s, 95):.1f}), small probe median "
                     f"{1e3 * np.median(probe_s):.1f} ms")
    finally:
        left = ledger.teardown()
        if left:
            progress(f"teardown left: {left}")
    return {"format": FORMAT, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine_details(),
            "frame": {"spec": FRAME_SPEC, "bytes": float(np.mean([len(f) for f in frames])),
                      "probe_small_bytes": float(len(probe))},
            "shares": shares}


def run_calibration(size_name: str, out: Path, progress: Progress = print,
                    target: Path | None = None) -> Path:
    """Measure at ``size_name`` into ``out/armada-calibration.json``; the ``full`` size
    also replaces the committed calibration (``target``, default :data:`DEFAULT_PATH`).
    Returns ``out``."""
    size = SIZES[size_name]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="armada-cal-") as tmp:
        doc = measure(size, Path(tmp), progress)
    doc["size"] = size_name
    path = out / DEFAULT_PATH.name
    path.write_text(json.dumps(doc, indent=1) + "\n")
    load_calibration(path)  # what the simulator will read must parse
    if size_name == "full":
        committed = target or DEFAULT_PATH
        committed.parent.mkdir(parents=True, exist_ok=True)
        committed.write_text(path.read_text())
    return out


def write_calibration_report(out: Path, report: Path, command: str) -> Path:
    """The Markdown ``report``: per share, start-up and request-time quantiles."""
    cal = load_calibration(out / DEFAULT_PATH.name)
    doc = json.loads((out / DEFAULT_PATH.name).read_text())
    lines = ["# Armada calibration: the real detector against CPU share", "",
             (f"Command: `{command}` (size `{doc.get('size', '?')}`, measured "
             f"{doc.get('measured', '?')} on {cal.machine.get('cpus', '?')} CPUs, kernel "
             f"{cal.machine.get('kernel', '?')})."), "",
             ("One detection replica per share, in a cgroup with that CPU quota (the "
              "mechanism that limits an emulated node); times are whole requests over "
              "loopback, one at a time, so service only (HTTP, decoding, detection). The simulator "
              "draws its replicas' service and start-up times from these samples "
              "(`testbed/systems/armada/sim_calibration.py`, interpolated in log-log space between "
              f"shares). Frames: {FRAME_SPEC['width']}x{FRAME_SPEC['height']} JPEG, "
              f"{cal.frame_bytes:.0f} bytes on average; the small probe "
              f"{cal.probe_small_bytes:.0f} bytes."), "",
             ("| cores | start-ups | start-up median (s) | frames | frame p50 (ms) | "
             "frame p95 (ms) | of it processing, p50 (ms) | small probes | probe p50 (ms) | "
             "frame p50 x cores (ms) |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    raw = {float(s["cores"]): s for s in doc["shares"]}
    for s in cal.shares:
        f50 = 1e3 * float(np.median(s.frame_s))
        processing = raw[s.cores].get("frame_processing_s") or [math.nan]
        lines.append(
            f"| {s.cores:g} | {len(s.startup_s)} | {np.median(s.startup_s):.1f} | "
            f"{len(s.frame_s)} | {f50:.1f} | {1e3 * np.percentile(s.frame_s, 95):.1f} | "
            f"{1e3 * np.median(processing):.1f} | "
            f"{len(s.probe_small_s)} | {1e3 * np.median(s.probe_small_s):.1f} | "
            f"{f50 * s.cores:.1f} |")
    work = [1e3 * float(np.median(s.frame_s)) * s.cores for s in cal.shares]
    lines += ["", (f"The last column is the CPU work of a median frame: it spans "
                   f"{min(work):.1f}-{max(work):.1f} ms-cores over the shares; a constant "
                   "would mean time inversely proportional to the share (the quota's "
                   "granularity and the decoding's fixed costs move it).")]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")
    return report
