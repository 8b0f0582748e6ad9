"""The service parameter declarations (``nodes.config``) and every program's Config.

A scenario's ``params`` are refused with one message form (``params.<field>: expected
..., found ...``) for every kind of mistake; ``to_argv`` followed by ``parse_argv`` gives
back the validated values for every program; the Config modules load without aiohttp;
the built-in scenario files' service params are valid.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodes.armada import configs as armada_configs
from nodes.config import (
    CannotStart,
    ParamError,
    fields_of,
    option,
    parse_argv,
    to_argv,
    validate_params,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Program:
    """A program, its Config and representative params (every field set where sensible)."""

    module: str
    config: str  # "module:Class"
    params: dict[str, Any]
    reserved: tuple[str, ...] = ()

    @property
    def config_cls(self) -> type:
        module, _, name = self.config.partition(":")
        return getattr(importlib.import_module(module), name)


PROGRAMS: dict[str, Program] = {
    "tier_server": Program(
        "nodes.offloading.tier_server", "nodes.offloading.tier_server_config:TierServerParams",
        {"workers": 4, "mu": 1, "window_s": 5, "model": "compute"},
        ("speed", "time_scale", "task_timeout")),
    "cpu_load": Program("nodes.cpu_load", "nodes.cpu_load:CpuLoadParams",
                        {"duty": 0.25, "seconds": 3}),
    "armada.beacon": Program(
        "nodes.armada.beacon", "nodes.armada.configs:BeaconParams",
        {"app_manager": "http://127.0.0.1:8001", "spinner": "http://127.0.0.1:8002",
         "cargo_manager": "http://{ip:ctl}:8003", "timeout_s": 3}),
    "armada.app_manager": Program(
        "nodes.armada.app_manager", "nodes.armada.configs:AppManagerParams",
        {"spinner": "http://127.0.0.1:8002", "cargo_manager": "http://127.0.0.1:8003",
         "poll_s": 0.5, "precision": 6, "overload": 50, "topn": 2, "users_per_replica": 10,
         "scale_up_util": 50, "scale_down_util": 0.1, "cooldown_s": 0, "user_ttl_s": 30,
         "max_replicas": 5}),
    "armada.spinner": Program(
        "nodes.armada.spinner", "nodes.armada.configs:SpinnerParams",
        {"health_interval_s": 2, "health_timeout_s": 1.5, "max_missed": 4, "precision": 4}),
    "armada.captain": Program(
        "nodes.armada.captain", "nodes.armada.configs:CaptainParams",
        {"beacon": "http://{ip:ctl}:8000", "node_id": "ea",
         "lat": 40.1106, "lon": -88.2073, "cpu": 0.4, "memory_mb": 512,
         "node_type": "dedicated", "tags": "gpu,ssd", "advertise_host": "{ip:ea}",
         "task_host": "0.0.0.0", "recheck_s": 2, "start_timeout_s": 30, "sample_s": 0.5,
         "task_module": ["nodes.armada.echo_task", "-odd.module"],
         "cgroup_parent": "/sys/fs/cgroup/edge",
         "workdir": "/tmp/captains"}),
    "armada.cargo_manager": Program(
        "nodes.armada.cargo_manager", "nodes.armada.configs:CargoManagerParams",
        {"health_interval_s": 1, "health_timeout_s": 1, "max_missed": 3, "quota_mb": 1.5,
         "seed": 7, "state_dir": "cargo-manager"}),
    "armada.cargo": Program(
        "nodes.armada.cargo", "nodes.armada.configs:CargoParams",
        {"data_dir": "store", "cargo_id": "c1", "lat": -33.9, "lon": 18.4,
         "capacity_gb": 0.5, "node_type": "volunteer", "tags": "", "beacon":
         "http://{ip:ctl}:8000", "advertise_host": "{ip:c1}", "recheck_s": 2,
         "write_timeout_s": 2, "max_lag_s": 3, "peer_timeout_s": 4}),
    "armada.detect_task": Program(
        "nodes.armada.detect_task", "nodes.armada.configs:DetectTaskParams",
        {"workers": 2, "threads": 1, "max_body_bytes": 100_000, "queue_limit": 3,
         "detector": "haar-face"}),
    "armada.face_task": Program(
        "nodes.armada.face_task", "nodes.armada.configs:FaceTaskParams",
        {"memory_store": True, "op": "read", "model_seed": 3, "initial": 5,
         "threshold": 0.5, "workers": 2, "threads": 1, "max_body_bytes": 100_000,
         "queue_limit": 4}),
    "armada.echo_task": Program("nodes.armada.echo_task", "nodes.armada.configs:EchoTaskParams",
                                {"work_ms": 2.5, "name": "-dash"}),
    "person_search.coordinator": Program(
        "nodes.person_search.coordinator", "nodes.person_search.configs:CoordinatorParams", {}),
    "person_search.edge_server": Program(
        "nodes.person_search.edge_server", "nodes.person_search.configs:EdgeServerParams",
        {"server_index": 3, "tc": 10, "time_scale": 250, "sharing": "processor-sharing"}),
}
#: What the executor adds to the tier server's params (``context`` in the registry).
EXECUTOR_VALUES = {"speed": 1.5, "time_scale": 10, "task_timeout": 60}


def command_line(name: str, tmp_path: Path) -> list[str]:
    """What the executor runs ``PROGRAMS[name]`` with (after ``--host``/``--port``): its
    params validated, directories under ``tmp_path``, placeholders expanded, ``to_argv``."""
    program = PROGRAMS[name]
    params = {**program.params, **(EXECUTOR_VALUES if program.reserved else {})}
    for key in ("data_dir", "state_dir", "workdir"):
        if key in params:
            params[key] = str(tmp_path / key)
    expanded = {k: v.replace("{ip:ctl}", "10.0.0.1").replace("{ip:ea}", "10.0.0.2")
                .replace("{ip:c1}", "10.0.0.3") if isinstance(v, str) else v
                for k, v in validate_params(program.config_cls, params).items()}
    return to_argv(program.config_cls, expanded)


def refusal(config_cls: type, params: Any, reserved: tuple[str, ...] = ()) -> str:
    """The message of the ValueError ``validate_params`` raises for ``params``."""
    with pytest.raises(ValueError) as info:
        validate_params(config_cls, params, reserved)
    return str(info.value)


# ----------------------------------------------------------------- error messages


def test_every_kind_of_mistake_has_its_message() -> None:
    tier = PROGRAMS["tier_server"].config_cls
    reserved = PROGRAMS["tier_server"].reserved
    cases = [
        ({"workers": 2, "mu": 1, "mux": 1},
         ("params.mux: expected one of the keys workers, mu, window_s, window_model_s, max_hold_s, "
         "model, found <unknown key>")),
        ({"mu": 1}, "params.workers: expected a value (the field is required), found <missing>"),
        ({"workers": 2.0, "mu": 1}, "params.workers: expected an integer in [1, 4096], found 2.0"),
        ({"workers": True, "mu": 1},
         "params.workers: expected an integer in [1, 4096], found True"),
        ({"workers": 0, "mu": 1}, "params.workers: expected an integer in [1, 4096], found 0"),
        ({"workers": 4097, "mu": 1},
         "params.workers: expected an integer in [1, 4096], found 4097"),
        ({"workers": 2, "mu": "1"}, "params.mu: expected a finite number > 0, found '1'"),
        ({"workers": 2, "mu": 0}, "params.mu: expected a finite number > 0, found 0"),
        ({"workers": 2, "mu": float("nan")}, "params.mu: expected a finite number > 0, found nan"),
        ({"workers": 2, "mu": [1]}, ("params.mu: expected a finite number > 0, found <list of 1 "
                                    "items>")),
        ({"workers": 2, "mu": 1, "model": "fast"},
         "params.model: expected one of hold, compute, found 'fast'"),
        ({"workers": 2, "mu": 1, "model": 1}, ("params.model: expected one of hold, compute, "
                                              "found 1")),
        ({"workers": 2, "mu": 1, "speed": 2},
         ("params.speed: expected no value: it is set by the executor from the scenario, "
         "found 2")),
        ([1, 2], "params: expected a mapping, found <list of 2 items>"),
    ]
    for params, message in cases:
        assert refusal(tier, params, reserved) == message


def test_bounds_of_every_shape_and_other_kinds() -> None:
    cfg = armada_configs
    assert refusal(cfg.CaptainParams, {**PROGRAMS["armada.captain"].params, "lat": 91}) == \
        "params.lat: expected a finite number in [-90, 90], found 91"
    assert refusal(cfg.AppManagerParams, {"spinner": "u", "cooldown_s": -1}) == \
        "params.cooldown_s: expected a finite number >= 0, found -1"
    assert refusal(cfg.AppManagerParams, {"spinner": "u", "max_replicas": 2}) == \
        "params.max_replicas: expected an integer >= 3, found 2"
    assert refusal(cfg.AppManagerParams, {"spinner": 8002}) == \
        "params.spinner: expected a string, found 8002"
    cpu_load = PROGRAMS["cpu_load"].config_cls
    assert refusal(cpu_load, {"duty": 1.5}) == \
        "params.duty: expected a finite number in (0, 1], found 1.5"
    assert refusal(cfg.FaceTaskParams, {"memory_store": "yes"}) == \
        "params.memory_store: expected true or false, found 'yes'"
    assert refusal(cfg.CaptainParams, {"beacon": "b", "lat": 0, "lon": 0, "cpu": 1,
                                       "memory_mb": 1, "task_module": ["t", 2]}) \
        == "params.task_module: expected a string, or a list of them, found <list of 2 items>"
    assert refusal(cfg.BeaconParams, {"app_manager": "a", "spinner": "s", "token": "t"}) \
        .startswith("params.token: expected one of the keys")  # tokens never in a scenario
    assert refusal(cfg.SpinnerParams, {"precision": None}) == \
        "params.precision: expected an integer in [1, 12], found None"


def test_cross_field_checks_refuse_at_load_time() -> None:
    cfg = armada_configs
    assert refusal(cfg.AppManagerParams, {"spinner": "s", "scale_down_util": 0.8}) == \
        "params.scale_down_util: expected a value below scale_up_util (0.75), found 0.8"
    assert refusal(cfg.FaceTaskParams, {}) == \
        "params.storage_manager: expected exactly one store: memory_store or " \
        "storage_manager, found neither"
    assert refusal(cfg.FaceTaskParams, {"memory_store": True, "storage_manager": "u"}).endswith(
        "found both")


def test_placeholders_pass_string_checks_and_reserved_values_are_refused() -> None:
    cfg = armada_configs
    params = {"beacon": "http://{ip:ctl}:8000", "lat": 0, "lon": 0, "cpu": 1,
              "memory_mb": 64, "advertise_host": "{ip:ea}", "node_type": "{ip:ea}"}
    assert validate_params(cfg.CaptainParams, params)["advertise_host"] == "{ip:ea}"
    assert refusal(cfg.CaptainParams, {**params, "node_type": "ip:ea"}) == \
        "params.node_type: expected one of dedicated, volunteer, found 'ip:ea'"
    tier = PROGRAMS["tier_server"]
    for key, value in EXECUTOR_VALUES.items():
        assert refusal(tier.config_cls, {**tier.params, key: value}, tier.reserved) == \
            f"params.{key}: expected no value: it is set by the executor from the scenario, " \
            f"found {value!r}"
    # without the executor's reservation the same keys are ordinary required fields
    assert refusal(tier.config_cls, tier.params) == \
        "params.speed: expected a value (the field is required), found <missing>"


def test_validated_params_are_a_normalised_copy_without_defaults() -> None:
    given = {"beacon": "b", "lat": 0, "lon": 0, "cpu": 1, "memory_mb": 1,
             "task_module": "one", "recheck_s": 3}
    clean = validate_params(armada_configs.CaptainParams, given)
    assert clean == {"beacon": "b", "lat": 0.0, "lon": 0.0, "cpu": 1.0, "memory_mb": 1,
                     "task_module": ["one"], "recheck_s": 3.0}
    assert isinstance(clean["recheck_s"], float) and given["task_module"] == "one"
    clean["task_module"].append("two")
    assert validate_params(armada_configs.CaptainParams, given)["task_module"] == ["one"]
    # a builder's NumPy numbers are numbers (and come back as Python ones)
    import numpy as np

    spinner = validate_params(armada_configs.SpinnerParams,
                              {"max_missed": np.int64(4), "health_timeout_s": np.float32(2)})
    assert spinner == {"max_missed": 4, "health_timeout_s": 2.0}
    assert type(spinner["max_missed"]) is int and type(spinner["health_timeout_s"]) is float


# ------------------------------------------------------------------ command lines


def _expected_values(program: Program, clean: dict[str, Any]) -> dict[str, Any]:
    """Every field's value after a round trip: the params given, the defaults otherwise."""
    values = {f.name: f.default for f in fields_of(program.config_cls)}
    values.update({k: tuple(v) if isinstance(v, list) else v for k, v in clean.items()})
    return values


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_to_argv_then_parse_argv_gives_the_validated_values(name: str) -> None:
    program = PROGRAMS[name]
    given = {**program.params, **(EXECUTOR_VALUES if program.reserved else {})}
    clean = validate_params(program.config_cls, given)
    argv = to_argv(program.config_cls, clean)
    config = parse_argv(program.config_cls, argv, f"python -m {program.module}", name)
    assert dataclasses.asdict(config) == _expected_values(program, clean), argv
    for field in fields_of(program.config_cls):
        if field.name in clean:
            assert type(getattr(config, field.name)) is type(_expected_values(
                program, clean)[field.name]), field.name


def test_to_argv_words() -> None:
    cfg = armada_configs
    assert to_argv(cfg.CaptainParams, {"task_module": ["a", "-b"], "beacon": "x",
                                       "node_id": None}) == \
        ["--beacon", "x", "--task-module", "a", "--task-module=-b"]
    assert to_argv(cfg.CaptainParams, {"lon": -88.2, "lat": 40}) == \
        ["--lat", "40.0", "--lon=-88.2"]
    assert to_argv(cfg.FaceTaskParams, {"memory_store": True}) == ["--memory-store"]
    assert to_argv(cfg.FaceTaskParams, {"memory_store": False}) == []
    with pytest.raises(ParamError, match="params.oops: expected one of the keys"):
        to_argv(cfg.FaceTaskParams, {"oops": 1})
    with pytest.raises(ParamError, match=r"params.workers: expected an integer >= 1"):
        to_argv(cfg.FaceTaskParams, {"workers": 0})


def test_the_command_line_keeps_the_services_flags_and_defaults() -> None:
    cfg = armada_configs
    beacon = parse_argv(cfg.BeaconParams, ["--app-manager", "a", "--spinner", "s",
                                           "--tokens", "f"], "p", "d")
    assert beacon.tokens == "f" and beacon.timeout_s == 10.0
    captain = parse_argv(cfg.CaptainParams, ["--beacon", "b", "--lat", "1", "--lon", "-2",
                                             "--cpu", "1", "--memory-mb", "64", "--task-module",
                                             "x", "--task-module", "y"], "p", "d")
    assert captain.task_module == ("x", "y")
    assert (captain.node_id, captain.node_type, captain.workdir, captain.start_timeout_s) == \
        (None, "volunteer", "/tmp/armada-captain", 120.0)
    manager = parse_argv(cfg.CargoManagerParams, [], "p", "d")
    assert (manager.quota_mb, manager.max_missed, manager.state_dir) == (64.0, 3, None)
    face = parse_argv(cfg.FaceTaskParams, ["--memory-store"], "p", "d")
    assert (face.op, face.initial, face.threshold, face.max_body_bytes) == \
        ("read-write", None, None, 2 * 1024 * 1024)


def test_bad_command_lines_exit_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = armada_configs
    cases = [
        (cfg.SpinnerParams, ["--precision", "13"],
         "argument --precision: expected an integer in [1, 12], found '13'"),
        (cfg.SpinnerParams, ["--max-missed", "x"],
         "argument --max-missed: expected an integer >= 1, found 'x'"),
        (cfg.CaptainParams, ["--node-type", "cloud"], ("argument --node-type: expected one of "
                                                      "dedicated, volunteer, found 'cloud'")),
        (cfg.AppManagerParams, ["--spinner", "s", "--scale-down-util", "0.9"],
         "argument --scale-down-util: expected a value below scale_up_util (0.75), found 0.9"),
        (cfg.EchoTaskParams, ["--work-ms", "-1"],
         "argument --work-ms: expected a finite number >= 0, found '-1'"),
    ]
    for config_cls, argv, message in cases:
        with pytest.raises(SystemExit) as info:
            parse_argv(config_cls, argv, "prog", "description")
        assert info.value.code == 2
        assert message in capsys.readouterr().err, message


def test_declarations_are_checked() -> None:
    @dataclass(frozen=True)
    class Union:
        value: int | str = option(1, help="two types")

    @dataclass(frozen=True)
    class TrueFlag:
        on: bool = option(True, help="a flag that is on")

    @dataclass(frozen=True)
    class Undeclared:
        plain: int = 1

    for bad in (Union, TrueFlag, Undeclared):
        with pytest.raises(TypeError):
            fields_of(bad)
    with pytest.raises(TypeError, match="required option has no default"):
        option(3, required=True, help="both")


def test_the_runner_refuses_a_config_field_it_owns() -> None:
    from nodes.common import run_service

    @dataclass(frozen=True)
    class Clash:
        port: int = option(1, help="the runner's")

    with pytest.raises(TypeError, match="port is the runner's option"):
        run_service(Clash, lambda p, a: None, [], prog="p", description="d", port=1,
                    logger=None)  # type: ignore[arg-type]


# ------------------------------------------------------------ config modules


def test_config_modules_load_without_aiohttp() -> None:
    """The scenario loader imports the Configs: they must not pull in a web framework
    (nor OpenCV or numpy) — checked in a fresh interpreter."""
    modules = sorted({p.config.partition(":")[0] for p in PROGRAMS.values()} | {"nodes.config"})
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(k for k in ('aiohttp', 'cv2', 'numpy') "
            "if k in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], f"heavy modules loaded by {modules}"


def test_choices_agree_with_their_owners() -> None:
    from nodes.armada.detect_task import DETECTORS
    from nodes.person_search import configs as person_search_configs
    from nodes.person_search.edge_server import AnalysisServer
    from workloads.armada_faces import MODES

    assert set(armada_configs.DETECTOR_NAMES) == set(DETECTORS)
    assert set(armada_configs.FACE_OPS) == set(MODES)
    owner = sys.modules[AnalysisServer.__module__]
    assert set(person_search_configs.SHARING_MODES) == set(owner.SHARING_MODES)
    assert person_search_configs.ACCOUNTINGS == owner.ACCOUNTINGS


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - {"cpu_load"}))
def test_every_main_builds_its_app_from_the_generated_command_line(
        name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the executor does: validated params, placeholders expanded, ``to_argv``,
    ``python -m <module> --host H --port P <words>``; the service's main must build its
    app from that (serving is replaced by a stand-in)."""
    from aiohttp import web

    import nodes.common

    served: dict[str, Any] = {}

    async def serve_async(app: web.Application, host: str, port: int, **_: Any) -> None:
        served.update(app=app, host=host, port=port)

    monkeypatch.setattr(nodes.common, "serve_async", serve_async)
    argv = ["--host", "127.0.0.1", "--port", "0", *command_line(name, tmp_path)]
    assert importlib.import_module(PROGRAMS[name].module).main(argv) == 0
    assert isinstance(served["app"], web.Application) and served["host"] == "127.0.0.1"
    if name in ("armada.captain", "armada.cargo"):  # they advertise their URL: a real port
        assert served["port"] > 0


def test_the_built_in_scenarios_service_params_are_valid() -> None:
    checked = 0
    for path in sorted((ROOT / "testbed" / "scenarios").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for service in doc.get("services", []):
            program = PROGRAMS[service["program"]]
            validate_params(program.config_cls, service.get("params", {}), program.reserved)
            checked += 1
    assert checked >= 10


def test_cannot_start_is_what_the_services_raise_for_their_environment() -> None:
    from nodes.armada.cargo_manager.state import StateFileError
    from nodes.armada.face_task import StoreNotWiredError

    assert issubclass(StateFileError, CannotStart)
    assert issubclass(StoreNotWiredError, CannotStart)
