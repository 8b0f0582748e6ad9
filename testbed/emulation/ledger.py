"""The run ledger: every resource a run creates is written down before it is used.

Each run owns one append-only JSON-lines file under ``LEDGER_ROOT``. An entry is
written (and fsynced) right after the resource exists, and a matching ``undone`` line
after it is removed. Inside :meth:`Ledger.phase` (a bring-up or teardown phase making
hundreds of resources) each line is still written to the file before the call returns,
so a killed run leaves every line in the file for ``clean``, but the file is fsynced
once when the phase ends rather than once a line: the fsync only matters when the
machine itself goes down, and then the processes, namespaces and interfaces the lines
name are gone too. :meth:`Ledger.teardown` removes what is still open in reverse order
of creation; :func:`clean_stale` does the same for the ledgers of runs whose owning
process is gone (a crash or ``kill -9``), and touches nothing that is not written in
a ledger. A ledger becomes visible only with its owner's header in it, so a concurrent
``clean`` never mistakes a starting run for a stopped one; an owner that is a zombie
has ended (once no other thread of it remains: :func:`threads_remain`); a ledger that
vanishes while ``clean`` reads it is skipped.

Undo handlers are keyed by entry kind and must be idempotent: removing something that
is already gone is success. A resource whose name could belong to someone else is
recorded *before* it is made (the intent) and :meth:`Ledger.confirm`-ed after, with what
identifies the very object made (an interface's ifindex); its undo removes a confirmed
one only if it is still that object, and an unconfirmed one only while the run's name
prefix is still reserved for the run (:mod:`testbed.emulation.names`).

A process entry with ``group`` set leads a process group (the service launcher): its
undo signals the whole group, also when the leader itself is already dead, and waits
until every member has ended, so children the run never recorded end with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LEDGER_ROOT = Path(os.environ.get("TESTBED_LEDGER_ROOT", "/run/edge-testbed/ledgers"))


@dataclass(frozen=True)
class Entry:
    """One created resource."""

    seq: int
    kind: str
    data: dict


UndoHandler = Callable[[dict], None]
UNDO: dict[str, UndoHandler] = {}


def undo_handler(kind: str) -> Callable[[UndoHandler], UndoHandler]:
    """Register the function that removes resources of ``kind``."""

    def register(fn: UndoHandler) -> UndoHandler:
        UNDO[kind] = fn
        return fn

    return register


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), None if
    the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it is gone.

    Stored with every process entry so a recycled pid is never signalled by mistake.
    """
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def threads_remain(pid: int) -> bool:
    """Whether the zombie thread-group leader ``pid`` still has other threads, which keep
    the process's descriptors (and the ``flock`` locks on them) until they end too."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def is_running(pid: int, start: int | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` still exists (a zombie, which
    only waits for its parent to collect its status, does not count, unless it is a
    leader whose other threads are still exiting: see :func:`threads_remain`)."""
    fields = _stat_fields(pid)  # one read: start time and state of the same process
    if fields is None or int(fields[19]) != start:
        return False
    return fields[0] != "Z" or threads_remain(pid)


def _same_process(data: dict) -> bool:
    return process_start_time(data["pid"]) == data.get("start")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its own parent collects it


def wait_gone(pid: int, start: int | None, timeout: float) -> bool:
    """Wait until ``pid`` (with that start time) has ended; reap it if it is our child."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_running(pid, start):
            _reap(pid)
            return True
        time.sleep(0.01)
    return False


def _group_table() -> dict[int, list[int]]:
    """Start times of the live (not zombie) processes, by process group id."""
    groups: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            groups.setdefault(int(fields[2]), []).append(int(fields[19]))
    return groups


def _group_table_for(entries: list[dict]) -> dict[int, list[int]] | None:
    """A :func:`_group_table` when some entry leads a group (one scan of /proc serves
    them all), else None."""
    return _group_table() if any(d.get("group") for d in entries) else None


def _alive(data: dict, groups: dict[int, list[int]] | None = None) -> bool:
    """Whether the recorded process (for a group: any member of its group started no
    earlier than its leader) still runs; ``groups`` is a :func:`_group_table` to reuse.

    A group outlives a killed leader; its id cannot be given to a new process while a
    member lives. A live process of the leader's pid with another start time means the
    pid was reused, so the group is not ours.
    """
    if not data.get("group", False):
        return is_running(data["pid"], data.get("start"))
    start = process_start_time(data["pid"])
    if start is not None and start != data.get("start"):
        return False
    members = (groups if groups is not None else _group_table()).get(data["pid"], [])
    return any(data.get("start") is None or s >= data["start"] for s in members)


def _signal(data: dict, sig: signal.Signals) -> None:
    try:
        if data.get("group", False):
            os.killpg(data["pid"], sig)
        else:
            os.kill(data["pid"], sig)
    except ProcessLookupError:
        pass


def end_processes(entries: list[dict], grace: float = 3.0) -> None:
    """Terminate many processes at once: SIGTERM to all, one shared wait, then SIGKILL.

    Ending them one after another would cost a polling round per process, which adds
    up to seconds for the hundreds of processes a large topology runs.
    """
    groups = _group_table_for(entries)
    live = [d for d in entries if _same_process(d) or _alive(d, groups)]  # zombies: reaped
    for first, wait in ((True, grace), (False, 3.0)):
        for data in live:
            # An entry may name its polite signal (interactive shells ignore SIGTERM).
            _signal(data, signal.Signals[data.get("term", "SIGTERM")] if first
                    else signal.SIGKILL)
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            groups = _group_table_for(live)
            ended = [d for d in live if not _alive(d, groups)]
            for data in ended:
                _reap(data["pid"])  # after the check: one that died just now is collected too
            live = [d for d in live if d not in ended]
            if live:
                time.sleep(0.01)
        if not live:
            return


@undo_handler("process")
def _undo_process(data: dict) -> None:
    """Terminate a process (its whole process group when it leads one)."""
    end_processes([data], grace=data.get("grace", 3.0))


def _run_quiet(argv: list[str]) -> None:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def ifindex(name: str) -> int | None:
    """The kernel's index of interface ``name`` in this namespace, None if it is absent."""
    try:
        return int(Path(f"/sys/class/net/{name}/ifindex").read_text())
    except (OSError, ValueError):
        return None


def _owned_interface(data: dict) -> bool:
    """Whether the interface of an entry exists and is the run's own.

    Confirmed (``ifindex`` recorded after it was made): only that very interface.
    Recorded as an intent only (the run stopped before confirming): only while the
    name's prefix is still reserved for the entry's run, since nobody else may then
    make that name. Entries of older ledgers carry neither and are removed by name.
    """
    found = ifindex(data["name"])
    if found is None:
        return False
    if "ifindex" in data:
        return found == data["ifindex"]
    if "prefix" in data:
        from testbed.emulation.names import reserved_by

        return reserved_by(data["prefix"]) == data.get("run")
    return True


@undo_handler("link")
def _undo_link(data: dict) -> None:
    """Delete a network interface of the run in the root namespace (one end of a veth
    deletes both)."""
    if _owned_interface(data):
        _run_quiet(["ip", "link", "del", data["name"]])


@undo_handler("bridge")
def _undo_bridge(data: dict) -> None:
    """Delete a Linux bridge created by the run."""
    if _owned_interface(data):
        _run_quiet(["ip", "link", "set", data["name"], "down"])
        _run_quiet(["ip", "link", "del", data["name"]])


@undo_handler("cgroup")
def _undo_cgroup(data: dict) -> None:
    """Remove a cgroup folder (its processes must have ended first)."""
    path = Path(data["path"])
    if path.is_dir():
        for _ in range(100):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


@undo_handler("iptables")
def _undo_iptables(data: dict) -> None:
    """Delete a rule the run inserted (``rule`` is the argv after the table/chain flag)."""
    probe = ["iptables", "-t", data.get("table", "filter"), "-C", data["chain"], *data["rule"]]
    while subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        _run_quiet(["iptables", "-t", data.get("table", "filter"), "-D", data["chain"],
                    *data["rule"]])


@undo_handler("dir")
def _undo_dir(data: dict) -> None:
    """Remove a folder the run created for its own scratch state."""
    shutil.rmtree(data["path"], ignore_errors=True)


class Ledger:
    """The append-only record of one run's resources."""

    def __init__(self, run_id: str, root: Path | None = None) -> None:
        self.run_id = run_id
        self.root = Path(root) if root is not None else LEDGER_ROOT
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / f"{run_id}.jsonl"
        self._seq = 0
        self._open: dict[int, Entry] = {}
        self._removed_hooks: list[Callable[[], None]] = []
        self._phase: IO[str] | None = None  # the file held open during a phase
        self._phase_depth = 0
        # Lines come from several threads (a replay's event lanes start services while
        # the driver starts its clients): one at a time, each with its own number.
        self._lock = threading.Lock()
        self._publish({"owner": os.getpid(), "owner_start": process_start_time(os.getpid()),
                       "run": run_id, "time": time.time()})

    def _publish(self, header: dict) -> None:
        """Make the ledger visible with its header already in it (written to a temporary
        name, then linked into place): a ``clean`` never sees a ledger without an owner.
        ``link`` fails if the name exists, so two runs never share one ledger."""
        tmp = self.root / f".{self.path.name}.{os.getpid()}.tmp"
        with tmp.open("w") as fh:
            fh.write(json.dumps(header, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            raise FileExistsError(f"ledger {self.path} already exists") from None
        finally:
            tmp.unlink(missing_ok=True)

    def _append(self, obj: dict) -> None:
        line = json.dumps(obj, sort_keys=True) + "\n"
        if self._phase is not None:
            self._phase.write(line)
            self._phase.flush()  # in the file now: a killed run leaves it for clean
            return
        with self.path.open("a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    @contextmanager
    def phase(self) -> Iterator[None]:
        """Batch the lines written inside: each is in the file when its call returns
        (a crash of the run leaves it for ``clean``), one fsync covers them all when
        the phase ends. Phases nest; the outermost one syncs."""
        if self._phase is None:
            self._phase = self.path.open("a")
        self._phase_depth += 1
        try:
            yield
        finally:
            self._phase_depth -= 1
            if self._phase_depth == 0:
                fh, self._phase = self._phase, None
                try:
                    fh.flush()
                    os.fsync(fh.fileno())
                finally:
                    fh.close()

    def record(self, kind: str, **data: object) -> Entry:
        """Write down a resource that now exists; returns its entry for :meth:`forget`."""
        if kind not in UNDO:
            raise KeyError(f"no undo handler for ledger kind {kind!r}")
        with self._lock:
            self._seq += 1
            entry = Entry(self._seq, kind, dict(data))
            self._append({"seq": entry.seq, "kind": kind, "data": entry.data})
            self._open[entry.seq] = entry
        return entry

    def confirm(self, entry: Entry, **data: object) -> None:
        """Add what identifies the resource now that it exists (an intent recorded
        before creating it becomes a confirmed entry)."""
        with self._lock:
            entry.data.update(data)
            self._append({"confirm": entry.seq, "data": dict(data)})

    def intend_interface(self, kind: str, name: str, prefix: str) -> Entry:
        """Record a ``link`` or ``bridge`` the run is about to make under its reserved
        ``prefix`` (an intent: :meth:`confirm_interfaces` pins it once it exists)."""
        return self.record(kind, name=name, prefix=prefix, run=self.run_id)

    def confirm_interfaces(self, entries: Iterable[Entry]) -> None:
        """Pin each made interface to its ifindex, so its undo removes only that one."""
        for entry in entries:
            index = ifindex(entry.data["name"])
            if index is not None:
                self.confirm(entry, ifindex=index)

    def on_removed(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once the ledger file is removed, i.e. everything it listed is
        gone (what must outlive every resource of the run, like its name prefix)."""
        self._removed_hooks.append(hook)

    def record_process(self, pid: int, group: bool = False, **data: object) -> Entry:
        """Record a process, pinned to its start time so a recycled pid is never hit."""
        return self.record("process", pid=pid, start=process_start_time(pid), group=group,
                           **data)

    def forget(self, entry: Entry) -> None:
        """Mark a resource as removed by its owner (nothing left for teardown)."""
        with self._lock:
            if self._open.pop(entry.seq, None) is not None:
                self._append({"undone": entry.seq})

    def release(self, entry: Entry) -> None:
        """Remove one resource now and mark it removed."""
        UNDO[entry.kind](entry.data)
        self.forget(entry)

    def open_entries(self) -> list[Entry]:
        return sorted(self._open.values(), key=lambda e: e.seq)

    def teardown(self) -> list[str]:
        """Remove every open resource, newest first. Returns the errors met, if any."""
        with self.phase():
            errors = _undo_all(self.open_entries(), self._append)
        self._open.clear()
        if not errors:
            self.path.unlink(missing_ok=True)
            for hook in self._removed_hooks:
                hook()
            self._removed_hooks.clear()
        return errors


def _undo_all(entries: list[Entry], mark: Callable[[dict], None]) -> list[str]:
    """Undo newest first; a run of consecutive process entries is ended all at once."""
    errors = []
    ordered = sorted(entries, key=lambda e: e.seq, reverse=True)
    i = 0
    while i < len(ordered):
        batch = [ordered[i]]
        if ordered[i].kind == "process":
            while i + len(batch) < len(ordered) and ordered[i + len(batch)].kind == "process":
                batch.append(ordered[i + len(batch)])
        i += len(batch)
        try:
            if batch[0].kind == "process":
                end_processes([e.data for e in batch],
                              grace=max(e.data.get("grace", 3.0) for e in batch))
            else:
                handler = UNDO.get(batch[0].kind)
                if handler is None:
                    raise KeyError(f"no undo handler for kind {batch[0].kind!r}")
                handler(batch[0].data)
            for entry in batch:
                mark({"undone": entry.seq})
        except Exception as exc:  # noqa: BLE001 - keep removing the rest; report each
            errors.extend(f"{e.kind} {e.data}: {exc}" for e in batch)
    return errors


def read_ledger(path: Path) -> tuple[dict, list[Entry]]:
    """Parse a ledger file: its header and the entries not yet undone."""
    header: dict = {}
    entries: dict[int, Entry] = {}
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a crash
        if "owner" in obj:
            header = obj
        elif "undone" in obj:
            entries.pop(obj["undone"], None)
        elif "confirm" in obj:
            if obj["confirm"] in entries:
                entries[obj["confirm"]].data.update(obj["data"])
        elif "seq" in obj:
            entries[obj["seq"]] = Entry(obj["seq"], obj["kind"], obj["data"])
    return header, sorted(entries.values(), key=lambda e: e.seq)


def stale_ledgers(root: Path | None = None) -> Iterator[Path]:
    """Ledgers whose owning process no longer runs."""
    root = Path(root) if root is not None else LEDGER_ROOT
    if not root.is_dir():
        return
    for path in sorted(root.glob("*.jsonl")):
        try:
            header, _ = read_ledger(path)
        except FileNotFoundError:
            continue  # its run tore down (or another clean removed it) meanwhile
        owner = header.get("owner")
        # A zombie owner has ended (its other threads too, see is_running): only its
        # parent has yet to collect its status.
        if owner is None or not is_running(owner, header.get("owner_start")):
            yield path


def clean_stale(root: Path | None = None) -> dict[str, list[str]]:
    """Undo what crashed runs left behind, from their ledgers only.

    Returns, per cleaned run, the errors met (an empty list when all went).
    """
    load_handlers()
    report: dict[str, list[str]] = {}
    for path in list(stale_ledgers(root)):
        try:
            _, entries = read_ledger(path)
        except FileNotFoundError:
            continue  # another clean got there first; go on with the others

        def mark(obj: dict, path: Path = path) -> None:
            try:  # "r+" never re-creates a ledger another clean has removed
                with path.open("r+") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.write(json.dumps(obj) + "\n")
            except FileNotFoundError:
                pass

        errors = _undo_all(entries, mark)
        report[path.stem] = errors
        if not errors:
            path.unlink(missing_ok=True)
    return report


def load_handlers() -> None:
    """Import every module that registers undo handlers of its own kinds."""
    import importlib

    for module in ("testbed.emulation.docker_runtime", "testbed.emulation.ovs",
                   "testbed.emulation.delayer"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
