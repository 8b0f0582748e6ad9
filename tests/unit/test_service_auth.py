"""Every state-changing endpoint of every service needs the run secret.

The services are built as their ``main`` builds them and started (startup hooks run),
then every route that is not public is called three ways: without an ``Authorization``
header (401), with a wrong bearer credential (403) and with the run secret. The body is
deliberately not a JSON object: a refusal that came from the handler would be a 400, so
a 401/403 shows that the check ran before the body was read (a refused request changes
nothing), and an answer other than 401/403 with the secret shows that it is accepted.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from nodes.common import OWN, PUBLIC, SECRET
from nodes.secret import (
    SECRET_ENV,
    RunSecret,
    SecretError,
    make_secret,
    read_secret_file,
    secret_from,
    write_secret_file,
)
from testbed.poll import wait_until
from tests.secured import AUTH, secret_file, secured
from tests.unit.test_openapi import SERVICES, build

#: The state-changing methods that are public by design: queries that only read, and
#: the workload requests a service exists to serve (a task, a frame, a match).
PUBLIC_CHANGES = {
    ("armada.app_manager", "POST", "/query"),
    ("armada.beacon", "POST", "/query"),
    ("armada.cargo", "POST", "/apps/{app}/match"),
    ("armada.cargo_manager", "POST", "/query"),
    ("armada.detect_task", "POST", "/infer"),
    ("armada.echo_task", "POST", "/infer"),
    ("armada.face_task", "POST", "/recognise"),
    ("tier_server", "POST", "/task"),
}


def routes_of(app) -> list[tuple[str, str, str]]:
    """(method, path, access) of every route of ``app``'s table."""
    from nodes.common import ROUTES_KEY

    return [(r.method, r.path, r.access()) for r in app[ROUTES_KEY]]


def concrete(path: str) -> str:
    """A path with its parameters filled in."""
    return re.sub(r"\{[^}]+\}", "x1", path)


@pytest.mark.parametrize("name", SERVICES)
async def test_every_change_needs_the_run_secret(name: str, tmp_path: Path) -> None:
    app = secured(build(name, tmp_path))
    table = routes_of(app)
    changes = [(m, p, a) for m, p, a in table if m not in ("GET", "HEAD")]
    public = {(name, m, p) for m, p, a in changes if a == PUBLIC}
    assert public <= PUBLIC_CHANGES, public - PUBLIC_CHANGES
    guarded = [(m, p) for m, p, a in changes if a in (SECRET, OWN)]
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
        for method, path in guarded:
            url = server.make_url(concrete(path))
            # the last header's bytes are not UTF-8 (0xff 0xfe, sent as Latin-1 text)
            for headers, refused in (({}, 401), ({"Authorization": "Basic abc"}, 401),
                                     ({"Authorization": "Bearer not-the-secret"}, 403),
                                     ({"Authorization": "Bearer \xff\xfe"}, 403)):
                async with http.request(method, url, data=b"[not json", headers=headers) as resp:
                    body = await resp.json()
                    assert resp.status == refused, (method, path, headers, body)
                    assert body["error"].startswith("authorization:"), body
            async with http.request(method, url, data=b"[not json", headers=AUTH) as resp:
                assert resp.status not in (401, 403, 500), (method, path, await resp.text())


async def test_a_service_without_a_secret_refuses_every_change(tmp_path: Path) -> None:
    app = build("tier_server", tmp_path)  # no app[SECRET_KEY]
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
        async with http.post(server.make_url("/admin/workers"), json={"active": 0},
                             headers=AUTH) as resp:
            assert resp.status == 403 and "holds no run secret" in (await resp.json())["error"]
        async with http.get(server.make_url("/health")) as resp:
            assert resp.status == 200


async def test_a_refused_change_changes_nothing(tmp_path: Path) -> None:
    app = secured(build("tier_server", tmp_path))
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with http.post(server.make_url("/admin/workers"), json={"active": 0},
                                 headers=headers) as resp:
                assert resp.status in (401, 403)
        async with http.get(server.make_url("/state")) as resp:
            state = await resp.json()
        assert state["active"] == state["c"] > 0
        async with http.post(server.make_url("/admin/workers"), json={"active": 0},
                             headers=AUTH) as resp:
            assert resp.status == 200 and (await resp.json())["active"] == 0


def _start(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nodes.offloading.tier_server", "--port", "0", "--workers", "1",
         "--speed", "1", "--time-scale", "1", "--mu", "1", *args],
        check=False, env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)


def test_a_service_started_without_a_secret_exits_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    done = _start(tmp_path, env)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to start: no run secret" in lines[0], done.stderr
    loose = tmp_path / "loose.secret"
    loose.write_text(make_secret().value)
    loose.chmod(0o644)
    done = _start(tmp_path, env, "--secret-file", str(loose))
    assert done.returncode == 1 and "expected permissions 0600" in done.stderr
    assert make_secret().value not in " ".join(done.args)


def test_secret_files_and_values(tmp_path: Path) -> None:
    path = secret_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_secret_file(path).value == AUTH["Authorization"].split()[1]
    assert secret_from(None, {SECRET_ENV: str(path)}).accepts(
        AUTH["Authorization"].split()[1].encode())
    with pytest.raises(SecretError, match="no run secret"):
        secret_from(None, {})
    with pytest.raises(SecretError, match="cannot open"):
        read_secret_file(tmp_path / "missing")
    short = tmp_path / "short"
    write_secret_file(tmp_path / "ok", make_secret())
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(SecretError, match="at least 16"):
        read_secret_file(short)
    secret = RunSecret("x" * 20)
    assert "xxxx" not in repr(secret) and not secret.accepts(b"x" * 19)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket process ``pid`` listens on, read from
    ``/proc`` (its socket inodes matched against its namespace's ``net/tcp`` and
    ``net/tcp6`` tables; IPv6 addresses as 32 hex digits)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                if table == "tcp":  # four bytes, little-endian on the machines we run on
                    address = socket.inet_ntoa(bytes.fromhex(address)[::-1])
                found.add((address, int(port, 16)))
    return found


def test_a_service_started_by_hand_listens_on_loopback_only(tmp_path: Path) -> None:
    """Without ``--host`` a service listens on 127.0.0.1 only, not on the machine's real
    interfaces (the emulation passes ``--host 0.0.0.0`` itself, inside a namespace). It
    is started from the repository root, as by hand, so it runs this checkout's code."""
    assert os.environ.get(SECRET_ENV)  # the session's secret (tests/conftest.py)
    log = tmp_path / "service.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodes.offloading.tier_server", "--port", "0", "--workers", "1",
             "--speed", "1", "--time-scale", "1", "--mu", "1"],
            stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
    try:
        line = wait_until(lambda: re.search(r"listening on (\S+):(\d+)", log.read_text()),
                          timeout=30, what="the service's 'listening on' line")
        assert line.group(1) == "127.0.0.1", log.read_text()
        port = int(line.group(2))
        assert listening_addresses(proc.pid) == {("127.0.0.1", port)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("args", "task_host"), [
    ((), "127.0.0.1"),
    (("--host", "0.0.0.0"), "0.0.0.0"),
    (("--task-host", "10.0.0.5"), "10.0.0.5"),
])
def test_a_captains_tasks_bind_where_it_listens_unless_told(
        args: tuple[str, ...], task_host: str, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """A Captain's tasks bind its own ``--host`` when ``--task-host`` is not given, so a
    Captain started by hand on loopback does not put its tasks on the real interfaces."""
    from aiohttp import web

    import nodes.common
    from nodes.armada import captain

    served: dict[str, web.Application] = {}

    async def serve_async(app: web.Application, host: str, port: int, **_: object) -> None:
        served["app"] = app

    monkeypatch.setattr(nodes.common, "serve_async", serve_async)
    assert captain.main(["--port", "0", "--beacon", "http://127.0.0.1:9", "--node-id", "ea",
                         "--lat", "0", "--lon", "0", "--cpu", "1", "--memory-mb", "64",
                         "--workdir", str(tmp_path), *args]) == 0
    assert served["app"][captain.CAPTAIN_KEY].config.task_host == task_host
