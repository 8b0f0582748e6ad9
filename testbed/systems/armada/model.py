"""What an Armada frame stream is, for both executors: the policies, the clients'
timeouts and probe rounds, and the seeds of a replay's users. Pure.

The emulation driver (:mod:`testbed.systems.armada.fleet`) hands these to the in-host
users; the simulator (:mod:`testbed.systems.armada.sim`) gives the same ones to its users, so a
policy meets the same timeouts, probe rounds and seeds on either executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.checks import is_number
from testbed.scenario.model import Scenario

APP = "det"  # the detection application every frame-stream scenario deploys
REPLICA_MEMORY_MB = 256  # what each detection replica asks for
FRAME_TIMEOUT_S = 5.0  # a frame not answered by then is a timeout row
#: Each request of a client: past it the SDK (and a baseline) sends the frame to its next
#: choice, so a user herded onto an overloaded replica moves before its frames expire.
REQUEST_TIMEOUT_S = 2.0
REPROBE_S = (5.0, 7.0)
#: The replica set has settled when nothing changed for this long.
SETTLE_QUIET_S = 6.0
#: Users register again this often while the replica set settles (the Application
#: Manager forgets a user after its TTL).
REGISTER_EVERY_S = 5.0
RECONNECT = "server-reconnect"
POLICIES = ("armada", "armada-light", "geo-nearest", "random", "edge-to-cloud", RECONNECT)
#: ``armada-light`` is the SDK probing with a small request (one 64x128 HOG window as a
#: JPEG of about 2 KB) instead of a whole frame.
SDK_POLICIES = ("armada", "armada-light")
#: What an SDK policy entry may set (``nodes.armada.sdk.choice.Selection``'s knobs).
SDK_PARAMS = ("near_equal",)
#: What any policy entry may set about its replay's deployment (not the client's): how
#: the Captains run the replicas, and whether the nodes' task images are removed first.
DEPLOY_PARAMS: dict[str, tuple[str, ...]] = {"task_runtime": ("process", "docker"),
                                             "task_images": ("cached", "fresh")}


def replay_seed(scenario: Scenario, repetition: int) -> int:
    """The seed of a replay's clients (registered as the system's ``policy_seed``): the
    same for every policy of a repetition, so their jitter and random draws are paired."""
    return scenario.seed * 1000 + repetition * 100


def user_seed(scenario: Scenario, repetition: int, index: int) -> int:
    """The seed of the ``index``-th user's client in a replay (:func:`replay_seed` + it)."""
    return replay_seed(scenario, repetition) + index


def probe_kind(policy: str) -> str:
    """What ``policy``'s SDK probes with: ``small`` for ``armada-light``, else ``frame``."""
    return "small" if policy == "armada-light" else "frame"


def check_policy_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario loader's check of an Armada policy entry's ``params`` (the system's
    ``policy_params`` hook): the SDK policies take ``near_equal`` (a fraction in [0, 1):
    spread users among candidates that probed within it of the fastest); every policy
    may set its replay's deployment (:data:`DEPLOY_PARAMS`: ``task_runtime`` process or
    docker, ``task_images`` cached or fresh), which makes each of its replays start from
    a deployment of its own. Raises ``ValueError("params.<field>: expected ...,
    found ...")``."""
    checked: dict[str, Any] = {}
    for key, value in params.items():
        if key in DEPLOY_PARAMS:
            if value not in DEPLOY_PARAMS[key]:
                raise ValueError(f"params.{key}: expected one of "
                                 f"{', '.join(DEPLOY_PARAMS[key])}, found {value!r}")
            checked[key] = str(value)
            continue
        if name not in SDK_POLICIES or key not in SDK_PARAMS:
            allowed = ", ".join((*SDK_PARAMS, *DEPLOY_PARAMS) if name in SDK_POLICIES
                                else DEPLOY_PARAMS)
            raise ValueError(f"params.{key}: expected {allowed} (policy {name}), found an "
                             "unknown key")
        if not is_number(value, finite=True) or not 0 <= value < 1:
            raise ValueError(f"params.{key}: expected a number in [0, 1), found {value!r}")
        checked[key] = float(value)
    return checked


def deployment_of(params: Mapping[str, Any]) -> dict[str, str]:
    """The deployment settings among a policy entry's checked ``params`` (empty when it
    sets none)."""
    return {k: str(v) for k, v in params.items() if k in DEPLOY_PARAMS}
