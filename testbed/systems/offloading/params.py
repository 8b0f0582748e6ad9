"""The tier server's scenario parameters, checked when a scenario loads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: How a tier server spends a task's service time: hold a worker, or compute on the CPU.
SERVICE_MODELS = ("hold", "compute")
MAX_WORKERS = 4_096


def tier_server_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``workers`` (int in [1, 4096]), ``mu`` (> 0) and ``model`` (hold or compute).

    Raises ``ValueError("params.<field>: expected ..., found ...")``.
    """
    for key in params:
        if key not in ("workers", "mu", "model"):
            raise ValueError(f"params.{key}: expected one of the keys workers, mu, model, "
                             "found <unknown key>")
    for key in ("workers", "mu"):
        if key not in params:
            raise ValueError(f"params.{key}: expected a value (the field is required), "
                             "found <missing>")
    workers = params["workers"]
    if not isinstance(workers, int) or isinstance(workers, bool) \
            or not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"params.workers: expected an integer in [1, {MAX_WORKERS}], "
                         f"found {workers!r}")
    mu = params["mu"]
    if not isinstance(mu, (int, float)) or isinstance(mu, bool) or not 0 < mu < float("inf"):
        raise ValueError(f"params.mu: expected a finite number > 0, found {mu!r}")
    model = params.get("model", "hold")
    if model not in SERVICE_MODELS:
        raise ValueError(f"params.model: expected one of {', '.join(SERVICE_MODELS)}, "
                         f"found {model!r}")
    return {"workers": workers, "mu": float(mu), "model": model}
