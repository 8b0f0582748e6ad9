"""The Cargo's embedded store: one SQLite database per Cargo, used from one thread.

It holds every application allocated on the Cargo (its parameters, peers and state),
their records with each record's version ``(ts, origin)`` and local sequence number,
and, per peer, the last sequence number that peer applied, so replication resumes where
it stopped after a restart. The database (``<data dir>/cargo.sqlite3``) is in WAL mode
with ``synchronous=FULL``: a commit returns once the write-ahead log is fsynced, so a
write the service acknowledges after its commit survives the process being killed
(SIGKILL included). Writes apply last-writer-wins on the version and can be bounded by a
quota (:class:`QuotaExceededError`). The service (:mod:`nodes.armada.cargo.service`)
runs every call in one dedicated thread, in submission order.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Row = tuple[int, bytes, int, str]  # id, float64 little-endian vector, ts, origin


class QuotaExceededError(Exception):
    """A client write or a data set does not fit in the application's quota."""


class Store:
    """The embedded store: one SQLite database, used from a single thread."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS apps (
        app TEXT PRIMARY KEY, quota_bytes INTEGER NOT NULL, dim INTEGER NOT NULL,
        consistency TEXT NOT NULL, peers TEXT NOT NULL, created_at REAL NOT NULL,
        state TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS records (
        app TEXT NOT NULL, id INTEGER NOT NULL, vector BLOB NOT NULL, ts INTEGER NOT NULL,
        origin TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (app, id)) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS records_outbox ON records (app, origin, seq);
    CREATE TABLE IF NOT EXISTS acked (
        app TEXT NOT NULL, peer TEXT NOT NULL, seq INTEGER NOT NULL,
        PRIMARY KEY (app, peer));
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise RuntimeError(f"{path}: cannot use WAL mode (got {mode})")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(self.SCHEMA)
        #: Highest committed sequence number (read by the event loop thread).
        self.seq: int = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM records").fetchone()[0]
        self.counts: dict[str, int] = dict(
            self.db.execute("SELECT app, COUNT(*) FROM records GROUP BY app")
        )

    def close(self) -> None:
        self.db.close()

    def _transaction(self) -> contextlib.AbstractContextManager[None]:
        db = self.db

        @contextlib.contextmanager
        def txn() -> Any:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

        return txn()

    def apps(self) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT app, quota_bytes, dim, consistency, peers, created_at, state FROM apps"
        ).fetchall()
        names = ("app", "quota_bytes", "dim", "consistency", "peers", "created_at", "state")
        apps = [dict(zip(names, row, strict=True)) for row in rows]
        for app in apps:
            app["peers"] = json.loads(app["peers"])
        return apps

    def acked(self, app: str) -> dict[str, int]:
        return dict(self.db.execute("SELECT peer, seq FROM acked WHERE app = ?", (app,)))

    def create(self, app: str, quota_bytes: int, dim: int, consistency: str,
               peers: list[str], created_at: float) -> None:
        with self._transaction():
            self.db.execute("INSERT INTO apps VALUES (?, ?, ?, ?, ?, ?, 'syncing')",
                            (app, quota_bytes, dim, consistency, json.dumps(peers), created_at))
            self.db.executemany("INSERT OR REPLACE INTO acked VALUES (?, ?, ?)",
                                [(app, peer, self.seq) for peer in peers])

    def set_state(self, app: str, state: str) -> None:
        with self._transaction():
            self.db.execute("UPDATE apps SET state = ? WHERE app = ?", (state, app))

    def drop(self, app: str) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM records WHERE app = ?", (app,))
            self.db.execute("DELETE FROM acked WHERE app = ?", (app,))
            self.db.execute("DELETE FROM apps WHERE app = ?", (app,))
        self.counts.pop(app, None)

    def set_peers(self, app: str, peers: list[str], acked: dict[str, int]) -> None:
        """New peer list; the position of a removed peer is kept (it may come back)."""
        with self._transaction():
            self.db.execute("UPDATE apps SET peers = ? WHERE app = ?", (json.dumps(peers), app))
            self.db.executemany("INSERT OR IGNORE INTO acked VALUES (?, ?, ?)",
                                [(app, peer, acked[peer]) for peer in peers])

    def set_acked(self, app: str, peer: str, seq: int) -> None:
        with self._transaction():
            self.db.execute("UPDATE acked SET seq = MAX(seq, ?) WHERE app = ? AND peer = ?",
                            (seq, app, peer))

    def write(self, app: str, rows: Iterable[Row], quota_records: int | None
              ) -> tuple[list[Row], int]:
        """Apply ``rows`` last-writer-wins in one transaction; the applied rows and the
        last sequence number given (0 when nothing was applied).

        With ``quota_records``, raises :class:`QuotaExceededError` (and writes nothing)
        when the new ids would take the application past that many records.
        """
        newest: dict[int, Row] = {}
        for row in rows:
            old = newest.get(row[0])
            if old is None or (row[2], row[3]) >= (old[2], old[3]):
                newest[row[0]] = row
        seq = self.seq
        applied: list[Row] = []
        new = 0
        with self._transaction():
            if self.db.execute("SELECT 1 FROM apps WHERE app = ?", (app,)).fetchone() is None:
                raise KeyError(app)
            for row in newest.values():
                old = self.db.execute("SELECT ts, origin FROM records WHERE app = ? AND id = ?",
                                      (app, row[0])).fetchone()
                if old is None:
                    new += 1
                elif (row[2], row[3]) <= tuple(old):
                    continue
                applied.append(row)
            count = self.counts.get(app, 0)
            if quota_records is not None and new and count + new > quota_records:
                raise QuotaExceededError(
                    f"quota: {new} new records would make {count + new}, the quota holds "
                    f"{quota_records}"
                )
            for rid, blob, ts, origin in applied:
                seq += 1
                self.db.execute(
                    "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (app, id) DO "
                    "UPDATE SET vector = excluded.vector, ts = excluded.ts, "
                    "origin = excluded.origin, seq = excluded.seq",
                    (app, rid, blob, ts, origin, seq),
                )
        self.seq = seq
        self.counts[app] = count + new
        return applied, seq if applied else 0

    def page(self, app: str, after: int, limit: int) -> list[Row]:
        return self.db.execute(
            "SELECT id, vector, ts, origin FROM records WHERE app = ? AND id > ? "
            "ORDER BY id LIMIT ?", (app, after, limit),
        ).fetchall()

    def outbox(self, app: str, origin: str, after: int, limit: int
               ) -> list[tuple[int, bytes, int, str, int]]:
        return self.db.execute(
            "SELECT id, vector, ts, origin, seq FROM records WHERE app = ? AND origin = ? "
            "AND seq > ? ORDER BY seq LIMIT ?", (app, origin, after, limit),
        ).fetchall()

    def scan(self, app: str) -> list[Row]:
        return self.db.execute("SELECT id, vector, ts, origin FROM records WHERE app = ?",
                               (app,)).fetchall()

    def disk_bytes(self) -> int:
        suffixes = ("", "-wal", "-shm")
        paths = [self.path.with_name(self.path.name + s) for s in suffixes]
        return sum(p.stat().st_size for p in paths if p.exists())
