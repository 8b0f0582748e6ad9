"""One Armada user inside its emulated host: measures replicas, selects, streams.

Started by the experiment driver (:mod:`testbed.experiments.armada`) through the run's
launcher inside the user's host, so every request leaves from the user's place in the
emulated network: ``python -m testbed.experiments.armada_user CONFIG.json``. The config
(JSON) names the ``mode``:

* ``matrix``: send real frames straight to every replica (``replicas``: ``[{task_id,
  node_id, url}]``), one at a time, round-robin over the replicas so a passing load burst
  hits every column alike: one warm-up frame each, then ``samples`` timed ones. Writes
  ``{"user", "samples": {node: [{"latency_ms", "processing_ms", "queue_ms"}]}}`` to ``out``.
* ``stream``: at ``probe_at`` (wall epoch) start the SDK (query through the Beacon, probe
  every candidate), record what it picked, then stream this user's frames of the trace
  (``trace``) from ``start_at`` through the SDK's sender, one row per frame appended to
  ``rows``. Writes ``{"user", "pick", "probe_ms", "candidates", "events"}`` to ``out``.

Frames are the JPEG files of ``frames_dir`` (written by the driver, so no encoding here).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import aiohttp

from nodes.common import sleep_until
from testbed.armada_sdk import ArmadaClient, frame_sender
from testbed.frame_client import StreamConfig, stream_frames
from workloads.trace import read_trace

JPEG = {"Content-Type": "image/jpeg"}


def read_frames(folder: Path) -> list[bytes]:
    """The driver's frames, in file-name order."""
    return [path.read_bytes() for path in sorted(folder.glob("*.jpg"))]


async def _timed(session: aiohttp.ClientSession, url: str, frame: bytes) -> dict[str, float]:
    """One frame to one replica: end-to-end latency and the replica's own timings."""
    began = time.perf_counter()
    async with session.post(f"{url}/infer", data=frame, headers=JPEG) as resp:
        body = await resp.json(content_type=None)
        if resp.status != 200:
            raise RuntimeError(f"{url}/infer answered {resp.status}: {body}")
    latency = time.perf_counter() - began
    return {"latency_ms": latency * 1e3, "processing_ms": float(body["processing_ms"]),
            "queue_ms": float(body["queue_ms"])}


async def measure_matrix(config: dict[str, Any], frames: list[bytes]) -> dict[str, Any]:
    """Latency samples of every replica from this user (see the module docstring)."""
    replicas = config["replicas"]
    samples: dict[str, list[dict[str, float]]] = {r["node_id"]: [] for r in replicas}
    timeout = aiohttp.ClientTimeout(total=config.get("timeout_s", 10.0))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for replica in replicas:
            await _timed(session, replica["url"], frames[0])  # warm connection and replica
        for k in range(config["samples"]):
            for replica in replicas:
                sample = await _timed(session, replica["url"], frames[(k + 1) % len(frames)])
                samples[replica["node_id"]].append(sample)
    return {"user": config["user"], "samples": samples}


async def select_and_stream(config: dict[str, Any], frames: list[bytes],
                            out: IO[str]) -> dict[str, Any]:
    """Start the SDK at ``probe_at``, record its pick, stream from ``start_at`` (rows to
    ``out``)."""
    await sleep_until(config["probe_at"] + asyncio.get_running_loop().time() - time.time())
    client = ArmadaClient(
        config["beacon"], config["app"], config["lat"], config["lon"],
        probe_payload=frames[0], user=config["user"], content_type="image/jpeg",
        reprobe_s=tuple(config["reprobe_s"]), request_timeout_s=config["timeout_s"],
        seed=config["seed"])
    async with client:
        first = next(e for e in client.events if e.kind == "probe")
        pick = client.current
        result: dict[str, Any] = {
            "user": config["user"],
            "pick": None if pick is None else {"task_id": pick.task_id, "node_id": pick.node_id},
            "candidates": [{"task_id": c.task_id, "node_id": c.node_id, "reason": c.reason}
                           for c in client.candidates],
            "probe_ms": first.detail["latency_ms"],
        }
        tasks, _ = read_trace(Path(config["trace"]))
        stream = StreamConfig(run=config["run"], policy="armada", client=config["user"],
                              stream=f"cam-{config['user']}", timeout_s=config["timeout_s"],
                              start_at=config["start_at"])
        await stream_frames(stream, tasks, frames, frame_sender(client, config["tiers"]),
                            out=out)
    result["events"] = [asdict(e) for e in client.events]
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the mode of the config file given as the only argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m testbed.experiments.armada_user CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    frames = read_frames(Path(config["frames_dir"]))
    if config["mode"] == "matrix":
        result = asyncio.run(measure_matrix(config, frames))
    else:
        with Path(config["rows"]).open("a") as out:
            result = asyncio.run(select_and_stream(config, frames, out))
    Path(config["out"]).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
