"""Dispatcher benchmarks: saturation throughput and per-task harness overhead.

Topology: one client host ``c1`` and one server host ``srv`` joined by a single link of
1 ms one-way delay (served by the userspace delayer here, netem elsewhere); ``srv`` runs
a tier server with 512 workers and every task holds a worker for 1 ms of wall time, so
the server's capacity (~500k tasks/s) is far above what a client can send.

Both clients run inside ``c1``, started by the run's launcher exactly as the executor
starts dispatchers, against the same server over the same link:

* the real dispatcher (``python -m nodes.offloading.dispatcher CONFIG``: policy ``jsq``, ``/state``
  polling every 100 ms, one JSON row written per task);
* the peer: a minimal aiohttp loop (this module run as ``__main__``) that sends the same
  trace on the same schedule with the same cap on requests in flight, and only keeps
  four timestamps per task in memory.

Throughput: a trace whose arrivals are compressed far beyond what either client can
send; completed tasks / (last response - first send). Overhead: a light trace (100
tasks/s); per task, the client-measured latency minus the server's own time (``end -
server_arrival``) minus the configured round trip (2 x 1 ms x 1 hop), p50 and p99.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from testbed.systems.offloading.driver import reset_tier_servers
from tests.bench import Sandbox, percentile

LINK_DELAY_MS = 1.0
HOPS = 1
WORKERS = 512
SERVICE_S = 0.001  # model seconds; time_scale 1, so also the wall hold time
MAX_INFLIGHT = 256
LOW_RATE = 100.0  # tasks/s for the overhead measurement
SATURATING_RATE = 100_000.0  # tasks/s offered for the throughput measurement
START_LEAD_S = 1.0
CLIENT_TIMEOUT_S = 30.0


def scenario_dict() -> dict[str, Any]:
    """The scenario the dispatcher benchmarks bring up (its workload is not used: the
    benchmark writes its own traces)."""
    return {
        "name": "bench-dispatch",
        "seed": 1,
        "topology": {
            "nodes": [{"name": "c1", "role": "client", "tier": "local"},
                      {"name": "srv", "role": "server", "tier": "edge"}],
            "links": [{"a": "c1", "b": "srv", "delay_ms": LINK_DELAY_MS}],
        },
        "services": [{"name": "edge", "program": "tier_server", "node": "srv",
                      "params": {"workers": WORKERS, "mu": 1.0 / SERVICE_S}}],
        "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": 1.0}},
        "policies": ["jsq"],
        "duration": 10,
        "time_scale": 1,
    }


def write_bench_trace(folder: Path, n: int, rate: float) -> Path:
    """``n`` tasks of client ``c1``, one every ``1/rate`` s, each ``SERVICE_S`` long."""
    from workloads.trace import Task, write_trace

    tasks = [Task(i, "c1", i / rate, SERVICE_S, "bench") for i in range(n)]
    write_trace(tasks, folder, {"generator": "bench", "rate": rate, "n": n})
    return folder


# ------------------------------------------------------------------- the peer client


async def _peer(config: dict[str, Any]) -> list[list[float]]:
    """Send every task of the trace at its arrival instant; keep four timestamps each."""
    import aiohttp

    from workloads.trace import read_trace

    tasks, _ = read_trace(config["trace"])
    url = config["url"]
    limit = asyncio.Semaphore(config["max_inflight"])
    timeout = aiohttp.ClientTimeout(total=config["timeout_s"])
    results: list[list[float]] = []
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        async with session.get(url.rsplit("/", 1)[0] + "/health") as resp:
            await resp.read()

        async def send(task: Any) -> None:
            try:
                payload = {"task_id": task.task_id, "size": task.size, "client": task.client}
                sent = time.time()
                async with session.post(url, json=payload) as resp:
                    body = await resp.json(content_type=None)
                done = time.time()
                if resp.status == 200:
                    results.append([sent, done, body["server_arrival"], body["end"]])
            finally:
                limit.release()

        start_wall = max(config["start_at"], time.time())
        offset = loop.time() - time.time()
        async with asyncio.TaskGroup() as group:
            for task in tasks:
                due = start_wall + task.arrival + offset
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                await limit.acquire()
                group.create_task(send(task))
    return results


def peer_main(argv: list[str]) -> int:
    """``python -m tests.bench.bench_dispatch CONFIG.json``: run the peer client."""
    config = json.loads(Path(argv[0]).read_text())
    results = asyncio.run(_peer(config))
    Path(config["out"]).write_text(json.dumps(results))
    return 0


# ----------------------------------------------------------------------- the driver


def _samples_from_rows(rows: list[dict[str, Any]]) -> list[list[float]]:
    """The dispatcher's ok rows as [sent, done, server_arrival, end]."""
    return [[r["dispatch_wall"], r["response_wall"], r["server_arrival_wall"], r["end_wall"]]
            for r in rows if r.get("outcome") == "ok"]


def _throughput(samples: list[list[float]]) -> float:
    if len(samples) < 2:
        return 0.0
    span = max(s[1] for s in samples) - min(s[0] for s in samples)
    return len(samples) / span


def _overhead_ms(samples: list[list[float]]) -> list[float]:
    """Per task: client latency - server time - configured round trip, in ms."""
    rtt = 2 * LINK_DELAY_MS * HOPS / 1000.0
    return [((done - sent) - (end - arrived) - rtt) * 1000.0
            for sent, done, arrived, end in samples]


class DispatchBench:
    """One brought-up topology on which both clients replay traces."""

    def __init__(self, topo: Any, sandbox: Sandbox) -> None:
        self.topo = topo
        self.sandbox = sandbox
        self.counter = 0
        svc = topo.scenario.service("edge")
        self.base_url = topo.url(svc, "c1")

    def _spawn_and_wait(self, module: str, config: dict[str, Any], tag: str) -> None:
        workdir = self.sandbox.workdir
        path = workdir / f"{tag}.json"
        path.write_text(json.dumps(config))
        host = self.topo.net.hosts["c1"]
        launcher = self.topo.infra.launcher
        pid = launcher.spawn(host.pid, module, [str(path)], workdir / f"{tag}.log")
        self.sandbox.ledger.record_process(pid, what=f"bench client {tag}")
        code = launcher.wait(pid, timeout=START_LEAD_S + CLIENT_TIMEOUT_S + 60)
        if code != 0:
            log = (workdir / f"{tag}.log").read_text()[-1500:]
            raise RuntimeError(f"{module} exited with {code}: {log}")

    def run(self, client: str, n: int, rate: float) -> list[list[float]]:
        """Replay ``n`` tasks at ``rate`` with ``client`` (``dispatcher`` or ``peer``)."""
        self.counter += 1
        tag = f"{client}-{self.counter}"
        trace = write_bench_trace(self.sandbox.workdir / f"trace-{tag}", n, rate)
        out = self.sandbox.workdir / f"out-{tag}.json"
        start_at = time.time() + START_LEAD_S
        reset_tier_servers(self.topo, since=start_at)
        if client == "dispatcher":
            config = {"run": self.sandbox.run_id, "client": "c1", "policy": "jsq",
                      "policy_seed": 1, "repetition": 0, "trace": str(trace),
                      "targets": [{"name": "edge", "tier": "edge", "url": self.base_url}],
                      "poll_interval_s": self.topo.scenario.executor.poll_interval_ms / 1000,
                      "time_scale": 1, "start_at": start_at, "out": str(out),
                      "timeout_s": CLIENT_TIMEOUT_S, "max_inflight": MAX_INFLIGHT}
            self._spawn_and_wait("nodes.offloading.dispatcher", config, tag)
            rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
            samples = _samples_from_rows(rows)
        else:
            config = {"trace": str(trace), "url": f"{self.base_url}/task",
                      "start_at": start_at, "out": str(out), "max_inflight": MAX_INFLIGHT,
                      "timeout_s": CLIENT_TIMEOUT_S}
            self._spawn_and_wait("tests.bench.bench_dispatch", config, tag)
            samples = json.loads(out.read_text())
        if len(samples) != n:
            print(f"  {client}: only {len(samples)}/{n} tasks completed ok")
        return samples


def run(quick: bool, progress: Any = print) -> dict[str, Any]:
    """Bring up the topology, measure both clients, tear down; returns the numbers."""
    from testbed.emulation.executor import bring_up
    from testbed.emulation.network import stop_network
    from testbed.scenario.loader import scenario_from_dict

    n_sat = 2000 if quick else 10000
    n_low = 200 if quick else 500
    rounds = 1 if quick else 5
    scenario = scenario_from_dict(scenario_dict(), source="<bench-dispatch>")
    result: dict[str, Any] = {"n_saturation": n_sat, "n_low": n_low, "rounds": rounds,
                              "max_inflight": MAX_INFLIGHT}
    with Sandbox("dispatch") as sandbox:
        topo = bring_up(scenario, sandbox.ledger, sandbox.workdir, sandbox.prefix,
                        lambda msg: progress(f"  {msg}"))
        result["backend"] = topo.net.backend
        try:
            bench = DispatchBench(topo, sandbox)
            bench.run("peer", 200, 1000.0)  # warm-up: connections, ARP, caches
            bench.run("dispatcher", 200, 1000.0)
            tput: dict[str, list[float]] = {"dispatcher": [], "peer": []}
            low: dict[str, list[list[float]]] = {"dispatcher": [], "peer": []}
            for index in range(rounds):
                # Alternate which client goes first so neither always runs second.
                order = ("dispatcher", "peer") if index % 2 == 0 else ("peer", "dispatcher")
                for client in order:
                    rate = _throughput(bench.run(client, n_sat, SATURATING_RATE))
                    tput[client].append(rate)
                    progress(f"  saturation {client}: {rate:.0f} tasks/s")
                for client in order:
                    low[client] += bench.run(client, n_low // rounds, LOW_RATE)
        finally:
            sandbox.snapshot()
            stop_network(topo.net)
            errors = sandbox.teardown()
        problems = sandbox.verify()
    for client in ("dispatcher", "peer"):
        result[f"{client}_tasks_per_s"] = statistics.median(tput[client])
        result[f"{client}_tasks_per_s_all"] = tput[client]
        overhead = _overhead_ms(low[client])
        result[f"{client}_overhead_p50_ms"] = percentile(overhead, 50)
        result[f"{client}_overhead_p99_ms"] = percentile(overhead, 99)
    # Rounds alternate the two clients, so each round's ratio is a paired comparison
    # that drifting background load on the machine affects less than the medians do.
    result["throughput_ratio"] = statistics.median(
        d / p for d, p in zip(tput["dispatcher"], tput["peer"], strict=True))
    result["overhead_p50_ratio"] = (result["dispatcher_overhead_p50_ms"]
                                    / result["peer_overhead_p50_ms"])
    result["overhead_p99_ratio"] = (result["dispatcher_overhead_p99_ms"]
                                    / result["peer_overhead_p99_ms"])
    result["teardown_errors"] = errors
    result["left_behind"] = problems
    return result


if __name__ == "__main__":
    sys.exit(peer_main(sys.argv[1:]))
