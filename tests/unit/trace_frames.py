"""Trace frames for the report and comparison tests."""

from __future__ import annotations

import pandas as pd

from testbed.analysis.traces import rows_to_frame


def frame(latencies: dict[str, list[float]], repetitions: int = 1, failed=()) -> pd.DataFrame:
    """A trace frame: ``latencies[policy][i]`` is task i's latency (s) in every repetition.

    ``failed`` lists (policy, task_id) pairs recorded as timeouts instead.
    """
    rows = []
    for policy, values in latencies.items():
        for rep in range(repetitions):
            for task_id, latency in enumerate(values):
                ok = (policy, task_id) not in failed
                rows.append(
                    {
                        "run": "r",
                        "policy": policy,
                        "repetition": rep,
                        "kind": "task",
                        "task_id": task_id,
                        "client": "c1",
                        "target": f"t{task_id % 2}",
                        "tier": "edge",
                        "size": 0.01,
                        "cls": "small",
                        "arrival_model": float(task_id),
                        "dispatch_model": float(task_id),
                        "arrival_wall": 100.0 + task_id,
                        "dispatch_wall": 100.0 + task_id,
                        "state_age_s": 0.0,
                        "decision_us": 1.0,
                        "outcome": "ok" if ok else "timeout",
                        **(_ok_columns(task_id, latency) if ok else {}),
                    }
                )
    return rows_to_frame(rows)


def _ok_columns(task_id: int, latency: float) -> dict:
    wall = 100.0 + task_id
    return {
        "response_model": task_id + latency,
        "server_arrival_wall": wall,
        "start_wall": wall,
        "end_wall": wall + latency,
        "response_wall": wall + latency,
        "latency_s": latency,
        "network_s": 0.0,
        "wait_s": 0.0,
        "service_s": latency,
        "latency_wall_s": latency,
        "queue_at_arrival": 0,
    }
