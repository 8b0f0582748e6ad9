"""The private Docker engine, the base image, DockerHost and the firewall guard.

Needs root and Debian's docker.io (dockerd 20.10). Engines whose start/stop/teardown is
inspected get their own data root under ``tmp_path``; the rest share one engine on the
default (persistent) data root, so the base image is built at most once.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.emulation import require_docker

pytestmark = pytest.mark.emulation

require_docker()

from mininet.net import Mininet
from mininet.nodelib import LinuxBridge

from testbed.emulation import docker_engine
from testbed.emulation.docker_engine import (
    Engine,
    ensure_base_image,
    start_engine,
    venv_python,
)
from testbed.emulation.docker_runtime import DockerHost
from testbed.emulation.ledger import Ledger, clean_stale
from testbed.errors import EmulationError
from testbed.poll import wait_until

PY = venv_python()
TAG = f"t{os.getpid() % 100000}"  # prefix of every root-namespace name the tests make


def _run_id(label: str) -> str:
    return f"test-docker-{os.getpid()}-{label}-{time.monotonic_ns() % 10**6}"


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting for init to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _assert_engine_gone(engine: Engine, pids: list[int]) -> None:
    """Nothing of ``engine`` may survive: processes, mounts, sockets, cgroups, folder."""
    for pid in pids:
        assert not _running(pid), f"pid {pid} survived the engine"
    assert not engine.dir.exists(), "exec root / socket folder left behind"
    assert not engine.socket.exists()
    assert docker_engine._pids_mentioning(str(engine.dir)) == []
    assert docker_engine._mounts_under(engine.dir) == []
    assert docker_engine._mounts_under(engine.data_root) == []
    parent = f"/edge-testbed-{engine.dir.name}"
    assert docker_engine._cgroup_dirs(parent) == [], "cgroup parent left behind"


@pytest.fixture(scope="module")
def ledger() -> Iterator[Ledger]:
    led = Ledger(_run_id("shared"))
    yield led
    assert led.teardown() == []


@pytest.fixture(scope="module")
def engine(ledger: Ledger) -> Iterator[Engine]:
    eng = start_engine(ledger)
    yield eng
    eng.stop()


# ------------------------------------------------------------------------- engine


def test_engine_starts_and_stops_leaving_nothing(tmp_path: Path) -> None:
    led = Ledger(_run_id("life"), root=tmp_path / "ledgers")
    started = time.monotonic()
    eng = start_engine(led, data_root=tmp_path / "docker")
    print(f"engine ready in {time.monotonic() - started:.2f} s")
    assert eng.client.ping()
    containerd = eng.containerd_pid()
    assert containerd is not None
    assert (eng.exec_root / "containerd" / "containerd.sock").exists()
    image = ensure_base_image(eng.client)
    box = eng.client.containers.run(image, detach=True, network_mode="none", init=True,
                                    mounts=docker_engine.base_mounts())
    box.reload()
    shim_pids = docker_engine._pids_mentioning(str(eng.dir))
    pids = [eng.pid, containerd, box.attrs["State"]["Pid"], *shim_pids]
    started = time.monotonic()
    eng.stop()
    print(f"engine stopped in {time.monotonic() - started:.2f} s")
    _assert_engine_gone(eng, pids)
    assert led.open_entries() == []


def test_second_engine_on_the_same_data_root_is_refused(tmp_path: Path) -> None:
    led = Ledger(_run_id("lock"), root=tmp_path / "ledgers")
    with (start_engine(led, data_root=tmp_path / "docker"),
          pytest.raises(EmulationError, match=r"data root .* is still in use by run "
                                                 r".*-lock-.* after 0.3 s")):
        start_engine(led, data_root=tmp_path / "docker", lock_timeout=0.3)
    assert led.teardown() == []


def test_ledger_teardown_removes_container_and_engine(tmp_path: Path) -> None:
    led = Ledger(_run_id("teardown"), root=tmp_path / "ledgers")
    eng = start_engine(led, data_root=tmp_path / "docker")
    host = DockerHost("d9", engine=eng)
    led.record_process(host.pid, group=True, grace=0.2)  # as the network builder does
    pids = [eng.pid, host.container_pid, host.pid]
    assert led.teardown() == []  # the host is left to the ledger: no net.stop()
    _assert_engine_gone(eng, pids)
    again = start_engine(led, data_root=tmp_path / "docker", lock_timeout=1.0)
    assert again.client.containers.list(all=True) == []
    again.stop()


_CRASHING_HARNESS = """
import sys, time
from pathlib import Path
from testbed.emulation import docker_runtime  # registers the "container" undo handler
from testbed.emulation.docker_engine import base_mounts, ensure_base_image, start_engine
from testbed.emulation.ledger import Ledger
led = Ledger(sys.argv[1], root=Path(sys.argv[2]))
eng = start_engine(led, data_root=Path(sys.argv[3]))
box = eng.client.containers.run(ensure_base_image(eng.client), detach=True, init=True,
                                network_mode="none", mounts=base_mounts())
led.record("container", socket=str(eng.socket), id=box.id, name=box.name)
box.reload()
print(eng.dir, eng.pid, box.attrs["State"]["Pid"], flush=True)
time.sleep(600)
"""


def test_killed_harness_is_cleaned_from_its_ledger(tmp_path: Path) -> None:
    """kill -9 of the harness leaves dockerd running; ``clean_stale`` removes it all."""
    ledgers, data_root = tmp_path / "ledgers", tmp_path / "docker"
    harness = subprocess.Popen(
        [PY, "-c", _CRASHING_HARNESS, _run_id("crash"), str(ledgers), str(data_root)],
        stdout=subprocess.PIPE, text=True, cwd=docker_engine.PROJECT_ROOT)
    try:
        engine_dir, dockerd, box = harness.stdout.readline().split()
        harness.kill()
        harness.wait()
        assert _running(int(dockerd))  # it outlived the harness
        with pytest.raises(EmulationError, match="in use"):  # and still holds the root
            start_engine(Ledger(_run_id("blocked"), root=tmp_path / "other"),
                         data_root=data_root, lock_timeout=0.2)
    finally:
        harness.kill()
        harness.wait()
        report = clean_stale(ledgers)
    assert list(report.values()) == [[]]
    for pid in (int(dockerd), int(box)):
        assert not _running(pid)
    assert not Path(engine_dir).exists()
    assert docker_engine._pids_mentioning(engine_dir) == []
    assert docker_engine._mounts_under(data_root) == []
    assert list(ledgers.glob("*.jsonl")) == []


# -------------------------------------------------------------------------- image


def test_base_image_is_built_once_and_runs_the_venv(engine: Engine) -> None:
    started = time.monotonic()
    tag = ensure_base_image(engine.client)
    print(f"base image ready in {time.monotonic() - started:.3f} s")
    assert ensure_base_image(engine.client) == tag
    assert len(engine.client.images.list(name=tag)) == 1
    out = engine.client.containers.run(
        tag, [PY, "-c", "import sys, aiohttp, testbed; print(sys.prefix)"], remove=True,
        network_mode="none", mounts=docker_engine.base_mounts())
    assert out.decode().strip() == str(docker_engine.venv_root())


# ---------------------------------------------------------------------- DockerHost


_FETCH = """
import sys, time, urllib.request
deadline = time.monotonic() + 10
while True:
    try:
        print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode(), end="")
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
"""


def _ping_ok(ping: Callable[[], str]) -> bool:
    return bool(wait_until(lambda: " 0% packet loss" in ping(), 10, "ping"))


def _bridge_and_start(net: Mininet, ledger: Ledger, bridge: str, hosts: tuple) -> None:
    """Link ``hosts`` to a new Linux bridge (both in the ledger), build and start."""
    switch = net.addSwitch(bridge)
    ledger.record("bridge", name=bridge)
    for host in hosts:
        link = net.addLink(host, switch)
        ledger.record("link", name=link.intf2.name)
    net.build()
    net.start()


def test_mininet_net_with_a_docker_host(engine: Engine, ledger: Ledger, tmp_path: Path
                                        ) -> None:
    """Ping and HTTP both ways between a DockerHost and a plain host on a Linux bridge."""
    from testbed.emulation.firewall_guard import guard_bridges

    workdir = tmp_path / "d1"
    (workdir / "www").mkdir(parents=True)
    (workdir / "www" / "hello.txt").write_text("from the container\n")
    (workdir / "fetch.py").write_text(_FETCH)
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello.txt").write_text("from the host\n")
    net = Mininet(topo=None, controller=None, switch=LinuxBridge, build=False)
    bridge = f"{TAG}s1"
    try:
        started = time.monotonic()
        d1 = net.addHost("d1", cls=DockerHost, engine=engine, ip="10.77.0.1/24",
                         workdir=str(workdir))
        print(f"docker host ready in {time.monotonic() - started:.2f} s")
        h1 = net.addHost("h1", ip="10.77.0.2/24")
        _bridge_and_start(net, ledger, bridge, (d1, h1))
        guard_bridges(ledger, [bridge])
        # the shell lives in the container's network namespace, nothing else
        ns = os.readlink(f"/proc/{d1.container_pid}/ns/net")
        assert os.readlink(f"/proc/{d1.pid}/ns/net") == ns
        assert os.readlink(f"/proc/{d1.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
        code, out = d1.exec_run(["ip", "-o", "addr", "show", "d1-eth0"])
        assert code == 0 and "10.77.0.1/24" in out

        assert _ping_ok(lambda: h1.cmd("ping -c1 -W1 10.77.0.1"))
        assert _ping_ok(lambda: d1.cmd("ping -c1 -W1 10.77.0.2"))
        assert _ping_ok(lambda: d1.exec_run(["ping", "-c1", "-W1", "10.77.0.2"])[1])

        server = d1.exec_service([PY, "-m", "http.server", "8080", "--bind", "10.77.0.1",
                                  "--directory", str(workdir / "www")])
        got = h1.cmd(PY, str(workdir / "fetch.py"), "http://10.77.0.1:8080/hello.txt")
        assert got.strip() == "from the container"
        host_server = h1.popen([PY, "-m", "http.server", "8081", "--bind", "10.77.0.2",
                                "--directory", str(tmp_path / "www")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            code, got = d1.exec_run([PY, str(workdir / "fetch.py"),
                                     "http://10.77.0.2:8081/hello.txt"])
            assert (code, got) == (0, "from the host\n")
        finally:
            host_server.terminate()
            host_server.wait()
        d1.stop_service(server)
        assert not server.running()
        assert "GET /hello.txt" in server.log_path.read_text()
    finally:
        net.stop()
    container = d1.container.name
    assert not engine.client.containers.list(all=True, filters={"name": container})
    assert not Path(f"/sys/class/net/{bridge}").exists()


_BUSY = """
import time
wall, cpu = time.monotonic(), time.process_time()
while time.monotonic() - wall < 1.5:
    pass
print((time.process_time() - cpu) / (time.monotonic() - wall))
"""


def test_cpu_limit_and_live_update(engine: Engine) -> None:
    cores = os.cpu_count() or 1
    host = DockerHost("c1", engine=engine, cpu=0.5 / cores)  # the machine's share: 0.5 CPU
    try:
        code, out = host.exec_run([PY, "-c", _BUSY])
        print(f"--cpus 0.5 measured {float(out):.2f} CPU")
        assert code == 0 and 0.4 <= float(out) <= 0.6
        host.set_cpu(0.2 / cores)
        code, out = host.exec_run([PY, "-c", _BUSY])
        print(f"updated to 0.2: measured {float(out):.2f} CPU")
        assert code == 0 and 0.12 <= float(out) <= 0.28
    finally:
        host.terminate()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a CPU set needs 2 CPUs")
def test_cpuset_confines_the_service_container(engine: Engine) -> None:
    """``cpuset`` (the hosts' side of a CPU partition) is the CPU list every process of
    the service container may run on, exec'd ones included."""
    first = min(os.sched_getaffinity(0))
    host = DockerHost("s1", engine=engine, cpuset=str(first))
    try:
        code, out = host.exec_run([PY, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
        assert code == 0 and out.strip() == str([first])
        assert os.sched_getaffinity(host.container_pid) == {first}
    finally:
        host.terminate()


def test_memory_limit_kills_an_over_allocation(engine: Engine) -> None:
    host = DockerHost("m1", engine=engine, memory_mb=128)
    try:
        assert host.exec_run([PY, "-c", "b = b'x' * (40 << 20)"])[0] == 0
        assert host.exec_run([PY, "-c", "b = b'x' * (400 << 20)"])[0] == 137
        host.container.reload()
        assert host.container.status == "running"
    finally:
        host.terminate()


_SERVICE = """
import signal
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
print("started", flush=True)
signal.sigwait([signal.SIGTERM])
print("stopping", flush=True)
"""


def test_service_stop_crash_and_terminate(engine: Engine, ledger: Ledger) -> None:
    host = DockerHost("v1", engine=engine)
    service = host.exec_service([PY, "-c", _SERVICE], env={"PYTHONUNBUFFERED": "1"})
    wait_until(lambda: "started" in service.log_path.read_text(), 10, "service start")
    assert service.running()
    assert host.stop_service(service) == 0
    assert "stopping" in service.log_path.read_text()

    second = host.exec_service([PY, "-c", _SERVICE], log=host.run_dir / "second.log")
    host.crash()
    wait_until(lambda: not second.running(), 10, "the crash to end the service")
    host.container.reload()
    assert host.container.status == "exited"
    with pytest.raises(EmulationError, match="outside the run folder"):
        host.exec_service(["true"], log="/tmp/elsewhere.log")
    host.terminate()
    assert host.shell is None
    assert not engine.client.containers.list(all=True, filters={"id": host.container.id})
    assert all(e.data.get("id") != host.container.id for e in ledger.open_entries())


def test_crash_restart_and_recreate_keep_links_and_volumes(engine: Engine, ledger: Ledger
                                                          ) -> None:
    """The sandbox holds the namespace: the service container can die, start again or be
    replaced while the link keeps working; a named volume keeps its files through all of
    it, the writable layer only through a restart; teardown removes both."""
    net = Mininet(topo=None, controller=None, switch=LinuxBridge, build=False)
    bridge = f"{TAG}s2"
    try:
        d2 = net.addHost("d2", cls=DockerHost, engine=engine, ip="10.78.0.1/24",
                         volumes={"data": "/var/lib/node-data"})
        h2 = net.addHost("h2", ip="10.78.0.2/24")
        _bridge_and_start(net, ledger, bridge, (d2, h2))
        volume = d2.volumes["data"][0]
        assert engine.client.volumes.get(volume).attrs["Labels"]["edge-testbed.node"] == "d2"
        write = ["/usr/bin/sh", "-c",
                 "echo kept > /var/lib/node-data/f && echo layer > /var/lib/layer"]
        assert d2.exec_run(write)[0] == 0
        assert _ping_ok(lambda: h2.cmd("ping -c1 -W1 10.78.0.1"))

        d2.crash()
        assert not d2.running()
        assert d2.sandbox.attrs["State"]["Pid"] and _running(d2.sandbox_pid)
        first_pid = d2.container_pid
        assert d2.restart() != first_pid and d2.running()
        assert _ping_ok(lambda: d2.exec_run(["ping", "-c1", "-W1", "10.78.0.2"])[1])
        code, out = d2.exec_run(["/usr/bin/cat", "/var/lib/node-data/f", "/var/lib/layer"])
        assert (code, out) == (0, "kept\nlayer\n")

        old_id = d2.container.id
        d2.recreate()
        assert d2.container.id != old_id
        assert not engine.client.containers.list(all=True, filters={"id": old_id})
        assert _ping_ok(lambda: h2.cmd("ping -c1 -W1 10.78.0.1"))
        assert d2.exec_run(["/usr/bin/cat", "/var/lib/node-data/f"]) == (0, "kept\n")
        assert d2.exec_run(["/usr/bin/test", "-e", "/var/lib/layer"])[0] == 1
    finally:
        net.stop()
    assert not engine.client.volumes.list(filters={"name": volume})
    assert not engine.client.containers.list(all=True, filters={"name": d2.container_name})
    assert all(e.data.get("name") != volume for e in ledger.open_entries())


def test_volume_must_have_an_absolute_path(engine: Engine, ledger: Ledger) -> None:
    before = len(ledger.open_entries())
    with pytest.raises(EmulationError, match="absolute path"):
        DockerHost("d3", engine=engine, volumes={"data": "relative/dir"})
    assert len(ledger.open_entries()) == before


# ------------------------------------------------------------------ firewall guard


_GUARD = """
import json, sys
from pathlib import Path
from testbed.emulation.firewall_guard import guard_bridges
from testbed.emulation.ledger import Ledger
led = Ledger(sys.argv[1], root=Path(sys.argv[2]))
print(json.dumps([e.data for e in guard_bridges(led, [sys.argv[3]])]))
"""


def _sh(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_firewall_guard_in_a_private_namespace(tmp_path: Path) -> None:
    """A DROP FORWARD policy with br_netfilter blocks a bridge until the guard's rule."""
    router, left, right = f"{TAG}fw", f"{TAG}fa", f"{TAG}fb"
    bridge = f"{TAG}br"
    ledgers = tmp_path / "ledgers"
    try:
        for ns in (router, left, right):
            assert _sh("ip", "netns", "add", ns).returncode == 0
        for ns, addr in ((left, "10.78.0.1/24"), (right, "10.78.0.2/24")):
            _sh("ip", "-n", router, "link", "add", f"{ns}p", "type", "veth", "peer",
                "name", "eth0", "netns", ns)
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        _sh("ip", "-n", router, "link", "add", bridge, "type", "bridge")
        for ns in (left, right):
            _sh("ip", "-n", router, "link", "set", f"{ns}p", "master", bridge, "up")
        _sh("ip", "-n", router, "link", "set", bridge, "up")

        def inside(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run(["ip", "netns", "exec", router, *argv], text=True,
                                  capture_output=True, cwd=docker_engine.PROJECT_ROOT,
                                  check=False)

        def ping() -> bool:
            return _sh("ip", "netns", "exec", left, "ping", "-c1", "-W1",
                       "10.78.0.2").returncode == 0

        def guard(run: str) -> list:
            out = inside(PY, "-c", _GUARD, run, str(ledgers), bridge)
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)

        assert inside("cat", "/proc/sys/net/bridge/bridge-nf-call-iptables").stdout == "1\n"
        assert wait_until(ping, 10, "bridge forwarding")
        assert guard(_run_id("accepting")) == []  # nothing to fix, nothing touched
        assert inside("iptables", "-P", "FORWARD", "DROP").returncode == 0
        assert not ping()
        entries = guard(_run_id("guard"))
        assert [(e["chain"], e["rule"][:4]) for e in entries] == [
            ("FORWARD", ["-i", bridge, "-o", bridge])]
        assert wait_until(ping, 10, "forwarding through the guard rule")
        cleaned = inside(PY, "-c", "import sys, pathlib; from testbed.emulation.ledger "
                         "import clean_stale; print(clean_stale(pathlib.Path(sys.argv[1])))",
                         str(ledgers))
        assert cleaned.returncode == 0, cleaned.stderr
        assert "edge-testbed" not in inside("iptables", "-S", "FORWARD").stdout
        assert not ping()
    finally:
        for ns in (router, left, right):
            _sh("ip", "netns", "del", ns)


def test_guard_is_idle_without_bridge_filtering(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    from testbed.emulation import firewall_guard

    monkeypatch.setattr(firewall_guard, "BRIDGE_NF_SYSCTL", tmp_path / "absent")
    led = Ledger(_run_id("idle"), root=tmp_path)
    assert firewall_guard.guard_bridges(led, ["whatever"]) == []
    assert led.teardown() == []
