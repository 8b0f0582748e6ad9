"""A Cargo in a container keeps every acknowledged write on its Docker volume.

A scenario puts the Cargo on a ``runtime: docker`` node whose store lives on a named
volume. Four writers on a client node write through the emulated network; the node is
crashed by the harness (its container killed: SIGKILL to every process) with writes in
flight, then joins again (the container and the Cargo start again). Every write the
Cargo acknowledged must be read back identical, after each of two crashes and after the
container is replaced by a fresh one of the image (the writable layer gone, the volume
kept).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from tests.emulation import require_docker

pytestmark = pytest.mark.emulation

require_docker()

from testbed.emulation.executor import EmulatedTopology
from testbed.emulation.probe import in_netns
from testbed.poll import wait_until
from testbed.scenario import Event, scenario_from_dict
from tests.emulation.built_topology import built_topology

PORT = 7300
STORE = "/var/lib/armada-cargo"
DIM = 128


def _scenario() -> Any:
    doc = {
        "name": "cargo-docker", "seed": 3,
        "topology": {
            "nodes": [
                {"name": "u1", "role": "client"},
                {"name": "sw", "role": "switch"},
                {"name": "ctl", "role": "server"},
                {"name": "st", "role": "server", "runtime": "docker", "cpu": 0.25,
                 "memory_mb": 512, "volumes": {"store": STORE}}],
            "links": [{"a": "u1", "b": "sw", "delay_ms": 2.0, "bw_mbit": 100},
                      {"a": "ctl", "b": "sw", "delay_ms": 0.5},
                      {"a": "st", "b": "sw", "delay_ms": 2.0, "bw_mbit": 100}]},
        "services": [
            # the scenario's entry point (a self-contained program); not called here
            {"name": "beacon", "program": "armada.beacon", "node": "ctl", "port": 8000,
             "params": {"app_manager": "http://127.0.0.1:8001",
                        "spinner": "http://127.0.0.1:8002"}},
            {"name": "cargo", "program": "armada.cargo", "node": "st", "port": PORT,
             "params": {"data_dir": STORE, "cargo_id": "st", "lat": 45.0, "lon": 7.6}}],
        "workload": {"generator": "face-recognition", "seed": 3,
                     "params": {"mode": "write", "frames": 2, "fps": 1}},
        "policies": [], "duration": 5}
    return scenario_from_dict(doc, source="<cargo-docker test>")


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedTopology]:
    yield from built_topology(_scenario(), "cargo-docker", tmp_path_factory)


class Writers:
    """Writer threads in the client's namespace; ``acked`` holds what the Cargo
    acknowledged (a 200 answer), nothing else."""

    def __init__(self, url: str, vectors: np.ndarray, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers  # the run secret's
        self.vectors = vectors
        self.acked: dict[int, list[float]] = {}
        self.lock = threading.Lock()
        self.next_id = iter(range(len(vectors)))
        self.stop = threading.Event()
        self.errors: list[str] = []

    def take(self, n: int) -> list[int]:
        with self.lock:
            return [i for _ in range(n) if (i := next(self.next_id, None)) is not None]

    def write(self) -> None:
        while not self.stop.is_set():
            batch = self.take(2)
            if not batch:
                return
            body = {"records": [{"id": i, "vector": self.vectors[i].tolist()} for i in batch]}
            try:
                resp = requests.post(f"{self.url}/apps/faces/records", json=body, timeout=5,
                                     headers=self.headers)
            except requests.RequestException:
                time.sleep(0.05)  # the Cargo is down: this write was not acknowledged
                continue
            if resp.status_code == 200:
                with self.lock:
                    self.acked.update({i: self.vectors[i].tolist() for i in batch})
            elif resp.status_code not in (404, 503):  # 404/503: restarting, not ready
                self.errors.append(f"{resp.status_code} {resp.text[:200]}")

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def snapshot(self) -> dict[int, list[float]]:
        with self.lock:
            return dict(self.acked)


def _serving(url: str) -> bool:
    try:
        return requests.get(f"{url}/apps/faces", timeout=2).json().get("state") == "ready"
    except (requests.RequestException, ValueError):
        return False


def _missing(url: str, acked: dict[int, list[float]]) -> list[int]:
    bad = []
    with requests.Session() as http:
        for rid, vector in acked.items():
            resp = http.get(f"{url}/apps/faces/records/{rid}", timeout=5)
            if resp.status_code != 200 or resp.json()["vector"] != vector:
                bad.append(rid)
    return bad


def test_acknowledged_writes_survive_container_crashes_and_a_new_container(
        topo: EmulatedTopology) -> None:
    host = topo.net.hosts["st"]
    client = topo.net.hosts["u1"]
    url = f"http://{topo.net.ip('st')}:{PORT}"
    vectors = np.random.default_rng(11).normal(size=(5000, DIM)).round(6)

    def workload() -> tuple[Writers, list[int]]:
        status = requests.post(f"{url}/apps", json={"app": "faces", "quota_bytes": 10**7,
                                                    "dim": DIM}, timeout=10,
                               headers=topo.secret.header()).status_code
        assert status == 201
        writers = Writers(url, vectors, topo.secret.header())
        threads = [threading.Thread(target=writers.write, daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        counts = []
        for crash in range(2):
            target = writers.count() + 60
            wait_until(lambda t=target: writers.count() >= t, 60, "acknowledged writes")
            topo.apply_event(Event(at=0, action="crash", target="st"))
            assert not host.running()
            counts.append(writers.count())
            topo.apply_event(Event(at=0, action="join", target="st"))
            wait_until(lambda: _serving(url), 60, f"the Cargo after crash {crash + 1}")
            assert not _missing(url, writers.snapshot())
        target = writers.count() + 30
        wait_until(lambda: writers.count() >= target, 60, "writes after the last restart")
        writers.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        assert writers.errors == []
        return writers, counts

    writers, counts = in_netns(client.pid, workload)
    assert counts[0] < counts[1] < writers.count()
    # The store is on the named volume, not in the container's writable layer.
    volume = host.volumes["store"][0]
    mountpoint = Path(host.client.volumes.get(volume).attrs["Mountpoint"])
    assert (mountpoint / "cargo.sqlite3").exists()

    # A fresh container of the image: only the volume carries the data over.
    topo.stop_service("cargo")
    host.recreate()
    topo.start_service(topo.scenario.service("cargo"))
    in_netns(client.pid, lambda: wait_until(lambda: _serving(url), 60, "the Cargo in a new "
                                                                   "container"))
    assert in_netns(client.pid, lambda: _missing(url, writers.acked)) == []
    status, body = in_netns(client.pid, lambda: (
        (r := requests.get(f"{url}/apps/faces", timeout=5)).status_code, r.json()))
    assert status == 200 and body["records"] >= writers.count()
