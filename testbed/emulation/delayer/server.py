"""The delayer's control server and event loop: one process serving every delayed link of a run.

:class:`Delayer` owns the TAPs of every link (:mod:`testbed.emulation.delayer.tap`) and one
``epoll`` loop over the control socket, the release timer and, on the Python data path,
the TAPs it relays (:mod:`testbed.emulation.delayer.relay`); on the compiled one the shaper's
own threads relay and the loop only serves requests
(:mod:`testbed.emulation.delayer.compiled`).

Control: a unix stream socket speaking JSON lines; each request ``{"op": ..., ...}`` gets
exactly one reply ``{"ok": true, ...}`` or ``{"ok": false, "error": reason}``. A bad request
never stops the delayer. Operations: ``ping``, ``add_link``, ``set``, ``up``, ``remove``,
``remove_all``, ``stats``, ``lateness``. Closing the TAP fds removes the devices, so ending
the process removes every link it served.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from testbed.emulation.cpu_partition import Partition
from testbed.emulation.delayer.compiled import DATA_PATHS, CDirection, choose_data_path
from testbed.emulation.delayer.lateness import LatenessHistogram
from testbed.emulation.delayer.relay import DEFAULT_QUEUE, Direction, PythonRelay
from testbed.emulation.delayer.tap import open_tap
from testbed.emulation.delayer.timer import TimerFd, tune_process
from testbed.emulation.tap_rx import check_rx, set_threaded

MAX_REQUEST = 1 << 20
LINK_PARAMS = ("delay_ms", "jitter_ms", "loss_pct", "queue", "seed")


@dataclass
class LinkState:
    """Both directions of one link and the TAP fds it owns."""

    link_id: str
    fds: tuple[int, int]
    ab: Direction | CDirection
    ba: Direction | CDirection
    params: dict[str, Any]
    up: bool = True


def _number(req: dict, key: str, low: float, high: float, integer: bool = False) -> float:
    value = req[key]
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"{key} must be {'an integer' if integer else 'a number'}, "
                         f"got {value!r}")
    if not (low <= value <= high) or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{key} must be in [{low}, {high}], got {value!r}")
    return value


def validate_params(req: dict, defaults: dict[str, Any]) -> dict[str, Any]:
    """Merge the shaping parameters present in ``req`` into ``defaults`` after checking them."""
    params = dict(defaults)
    limits = {"delay_ms": (0, 3_600_000, False), "jitter_ms": (0, 3_600_000, False),
              "loss_pct": (0, 100, False), "queue": (1, 10_000_000, True),
              "seed": (-(2**63), 2**63 - 1, True)}
    for key, (low, high, integer) in limits.items():
        if key in req:
            params[key] = _number(req, key, low, high, integer)
    return params


class Delayer:
    """The event loop: TAP readiness, release timer and control requests."""

    def __init__(self, control_path: str, data_path: str = "auto",
                 rx: str = "inline", cpus: Partition | None = None) -> None:
        self.control_path = control_path
        self.cpus = cpus  # the CPU partition main() confined this process to, if any
        self.rx = check_rx(rx)  # links' receive mode unless their request names one
        self.shaper, self.data_path_reason = choose_data_path(data_path)
        self.data_path = DATA_PATHS["python" if self.shaper is None else "c"]
        self.home_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.epoll = select.epoll()
        self.timer = TimerFd()
        self.links: dict[str, LinkState] = {}
        self.relay = PythonRelay(self.epoll, self.timer)
        self.clients: dict[int, tuple[socket.socket, bytearray]] = {}
        try:
            os.unlink(control_path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(control_path)
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.epoll.register(self.listener.fileno(), select.EPOLLIN)
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        if self.shaper is None:
            self.scheduling = tune_process(realtime=True)
        else:
            tune_process(realtime=False)  # the shaper's own thread asks for SCHED_FIFO
            prio = self.shaper.scheduling()
            self.scheduling = f"fifo{prio}" if prio > 0 else "other"

    # -- control -------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            conn.setblocking(False)
            self.clients[conn.fileno()] = (conn, bytearray())
            self.epoll.register(conn.fileno(), select.EPOLLIN)

    def _client(self, fd: int) -> None:
        conn, buf = self.clients[fd]
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.epoll.unregister(fd)
            del self.clients[fd]
            conn.close()
            return
        buf += data
        if len(buf) > MAX_REQUEST and b"\n" not in buf:
            buf.clear()
            self._reply(conn, {"ok": False, "error": "request line too long"})
            return
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if line.strip():
                self._reply(conn, self.handle_line(line))

    @staticmethod
    def _reply(conn: socket.socket, reply: dict[str, Any]) -> None:
        """Send one (small) reply line; a vanished or stuck client is not the delayer's error."""
        conn.settimeout(1.0)
        try:
            conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass
        finally:
            conn.setblocking(False)

    def handle_line(self, line: bytes) -> dict[str, Any]:
        """Answer one request line; every failure becomes ``{"ok": false, "error": ...}``."""
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise TypeError("a request must be a JSON object")
            op = req.get("op")
            handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if handler is None:
                raise ValueError(f"unknown op {op!r}; expected one of "
                                 "ping, add_link, set, up, remove, remove_all, stats, "
                                 "lateness")
            return {"ok": True, **handler(req)}
        except KeyError as exc:
            return {"ok": False, "error": f"missing field {exc}"}
        except Exception as exc:  # noqa: BLE001 - a request must never stop the data path
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def _link(self, req: dict) -> LinkState:
        link_id = req["id"]
        if link_id not in self.links:
            raise ValueError(f"no link {link_id!r}")
        return self.links[link_id]

    def op_ping(self, req: dict) -> dict[str, Any]:
        return {"pid": os.getpid(), "links": len(self.links), "scheduling": self.scheduling,
                "data_path": self.data_path, "data_path_reason": self.data_path_reason,
                "rx": self.rx, "cpus": self.cpus.as_dict() if self.cpus else None}

    def op_add_link(self, req: dict) -> dict[str, Any]:
        link_id = req["id"]
        if not isinstance(link_id, str) or not link_id:
            raise ValueError("id must be a non-empty string")
        if link_id in self.links:
            raise ValueError(f"link {link_id!r} already exists")
        ends = []
        for side in ("a", "b"):
            end = req[side]
            if not isinstance(end, dict) or not isinstance(end.get("pid"), int) \
                    or not isinstance(end.get("ifname"), str):
                raise TypeError(f"{side} must be {{pid: int, ifname: str}}")
            ends.append((end["pid"], end["ifname"]))
        offload = req.get("offload", True)
        if not isinstance(offload, bool):
            raise TypeError(f"offload must be true or false, got {offload!r}")
        rx = check_rx(req.get("rx", self.rx))
        defaults = {"delay_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0,
                    "queue": DEFAULT_QUEUE, "seed": 0}
        params = validate_params(req, defaults)
        fds: list[int] = []
        try:
            for pid, ifname in ends:
                try:
                    fds.append(open_tap(pid, ifname, self.home_ns,
                                        vnet=self.shaper is not None, offload=offload, rx=rx))
                except OSError as exc:
                    raise OSError(exc.errno, f"cannot create tap {ifname!r} in the "
                                  f"namespace of pid {pid}: {exc.strerror}") from exc
                if rx == "threaded":
                    set_threaded(pid, ifname)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        made: list[Direction | CDirection] = []
        try:
            for name, src, dst in ((f"{link_id}:a>b", fds[0], fds[1]),
                                   (f"{link_id}:b>a", fds[1], fds[0])):
                d = self._direction(name, src, dst, offload)
                made.append(d)
                d.configure(params, reseed=True)
        except OSError:
            for d in made:
                self._detach(d)
            for fd in fds:
                os.close(fd)
            raise
        self.links[link_id] = LinkState(link_id, (fds[0], fds[1]), made[0], made[1], params)
        return {"id": link_id, "rx": rx}

    def _direction(self, name: str, src: int, dst: int,
                   offload: bool) -> Direction | CDirection:
        """A relayed direction on the data path in use (the compiled one polls ``src``
        from its own thread, with offloads if ``offload``; the Python one registers it with
        this loop)."""
        if self.shaper is not None:
            return CDirection(name, self.shaper, self.shaper.add(src, dst), src, offload,
                              offload)
        return self.relay.add(name, src, dst)

    def _detach(self, d: Direction | CDirection) -> None:
        """Stop relaying ``d`` and drop its held frames (before its fds are closed); safe
        to repeat, so a removal interrupted by SIGTERM can be finished by :meth:`close`."""
        if isinstance(d, CDirection):
            if not d.removed:
                d.removed = True
                d.shaper.remove(d.handle)
        else:
            self.relay.detach(d)

    def op_set(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        unknown = set(req) - {"op", "id", "direction", *LINK_PARAMS}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}; expected {list(LINK_PARAMS)}")
        direction = req.get("direction", "both")
        dirs = {"both": (link.ab, link.ba), "a>b": (link.ab,), "b>a": (link.ba,)}
        if direction not in dirs:
            raise ValueError(f"direction must be one of {list(dirs)}, got {direction!r}")
        params = validate_params(req, link.params)
        if direction == "both":
            link.params = params
        for d in dirs[direction]:
            d.configure(params, reseed="seed" in req)
        return {"id": link.link_id, "params": params}

    def op_up(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        up = req["up"]
        if not isinstance(up, bool):
            raise TypeError(f"up must be true or false, got {up!r}")
        link.up = up
        for d in (link.ab, link.ba):
            d.set_up(up)
        return {"id": link.link_id, "up": up}

    def op_remove(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        del self.links[link.link_id]  # first: an interrupted removal is never redone
        for d in (link.ab, link.ba):
            self._detach(d)
        for fd in link.fds:
            os.close(fd)
        return {"id": link.link_id}

    def op_remove_all(self, _req: dict) -> dict[str, Any]:
        """Remove every link at once.

        Closing a TAP waits for the kernel to unregister the device (about 15-20 ms
        each, mostly waiting), so the closes run on a thread pool instead of one by one.
        """
        links = list(self.links.values())
        removed = sorted(self.links)
        self.links.clear()  # first: an interrupted removal is never redone
        fds = []
        for link in links:
            for d in (link.ab, link.ba):
                self._detach(d)
            fds.extend(link.fds)
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(os.close, fds))
        return {"removed": removed}

    def op_stats(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        return {"id": link.link_id, "up": link.up, "params": link.params,
                "a_to_b": link.ab.stats(), "b_to_a": link.ba.stats()}

    def op_lateness(self, req: dict) -> dict[str, Any]:
        """Release lateness of every frame since the last reset; ``reset: true`` starts a
        new count after answering (a run resets it when its replays begin)."""
        reset = req.get("reset", False)
        if not isinstance(reset, bool):
            raise TypeError(f"reset must be true or false, got {reset!r}")
        if self.shaper is not None:
            copy = self.shaper.histogram(reset)
            return LatenessHistogram.from_counts(copy.counts, copy.n, copy.max_ns).summary()
        return self.relay.lateness_summary(reset)

    # -- loop ----------------------------------------------------------------------------
    def serve(self) -> None:
        """Run until SIGTERM/SIGINT."""
        listener_fd, timer_fd = self.listener.fileno(), self.timer.fd
        relay, clients = self.relay, self.clients
        readers = relay.readers
        while True:
            for fd, _ in self.epoll.poll():
                d = readers.get(fd)
                if d is not None:
                    relay.read(d)
                elif fd == timer_fd:
                    self.timer.clear()
                elif fd == listener_fd:
                    self._accept()
                elif fd in clients:
                    self._client(fd)
            if relay.heap:
                relay.release()

    def close(self) -> None:
        """Remove every link (one failing does not stop the others), stop the compiled
        shaper and remove the control socket."""
        try:
            for link_id in list(self.links):
                try:
                    self.op_remove({"id": link_id})
                except OSError as exc:
                    print(f"delayer: removing link {link_id!r} failed: {exc}",
                          file=sys.stderr, flush=True)
        finally:
            if self.shaper is not None:
                self.shaper.close()
            try:
                os.unlink(self.control_path)
            except FileNotFoundError:
                pass

