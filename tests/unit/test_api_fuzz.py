"""Schemathesis against every service: no 5xx for a client mistake, no hang, conformance.

Each test starts one service as a real process on 127.0.0.1 (with the peers it calls:
the Armada control plane for the Beacon, the Application Manager, the Captain and the
Cargo; an edge server for the person-search coordinator), loads the document the
service serves at ``GET /openapi.json`` and, for every operation, sends a bounded
number of generated requests with the run secret: schema-valid ones (``positive``) and
schema-invalid ones (``negative``). Every answer must conform to the document
(status code, content type, response schema), a 5xx is accepted only where the
operation's document declares it (502/503/504/507 from a peer or a full store), no
request may take longer than :data:`REQUEST_TIMEOUT_S`, schema-invalid requests must be
refused (and schema-valid ones accepted where the document states every bound:
``Target.states_limits``), and a secured operation that accepted a
request with the secret must refuse it without one and with a wrong one (401/403,
Schemathesis' ``ignored_auth``). Every operation is fuzzed even after another failed;
the test reports all failures at its end.

Budget: :data:`EXAMPLES` examples per operation and mode, about 60 s for all ten on two
cores (docs/services.md "API fuzzing"). Schemathesis' pytest integration
(``schemathesis.pytest.from_fixture``) does not run on pytest 9 (it sets
``Function._nodeid``, gone there), so each operation's Hypothesis test is built here
from ``APIOperation.as_strategy``, Schemathesis' public strategy API.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import load_all_checks
from schemathesis.core.failures import Failure, FailureGroup

from testbed.poll import wait_until
from tests.secured import AUTH
from tests.unit.test_service_config import PROGRAMS, command_line

#: Generated requests per operation and generation mode (positive, negative).
EXAMPLES = 25
#: Longest answer accepted: longer is a hang (the services' own upstream timeouts are
#: below it: the Beacon's ``--timeout-s 3`` here).
REQUEST_TIMEOUT_S = 8.0
#: The 5xx an operation may answer when its document declares them: a peer that did
#: not answer (502, 504), not acknowledged or not ready (503), storage full (507).
DECLARED_5XX = {502, 503, 504, 507}


@dataclass(frozen=True)
class Target:
    """One fuzzed service: its program, the peers it needs and what is left out."""

    program: str
    #: Peers started first, by option name: ``{"spinner": "armada.spinner"}`` gives
    #: ``--spinner URL`` of a started Spinner. A peer's own peers come from
    #: :data:`PEERS`.
    peers: tuple[str, ...] = ()
    #: Operations ("METHOD /path") not fuzzed, each with the reason in a comment.
    skip: frozenset[str] = frozenset()
    #: Operations whose schema-valid requests may be refused (400/422), each with the
    #: reason the document cannot state it; Schemathesis' ST202
    #: (``positive_data_acceptance``: schema-valid requests are accepted) is off for
    #: them alone and on for every other operation of every service.
    unstated: dict[str, str] = field(default_factory=dict)
    #: Options replaced on the program's command line (``command_line``'s values).
    options: dict[str, str | None] = field(default_factory=dict)


#: Which option of a program names which peer program.
PEERS: dict[str, dict[str, str]] = {
    "armada.app_manager": {"spinner": "armada.spinner", "cargo_manager": "armada.cargo_manager"},
    "armada.beacon": {"app_manager": "armada.app_manager", "spinner": "armada.spinner",
                      "cargo_manager": "armada.cargo_manager"},
    "armada.captain": {"beacon": "armada.beacon"},
    "armada.cargo": {"beacon": "armada.beacon"},
    "person_search.coordinator": {"server": "person_search.edge_server"},
}

#: Why a task specification's schema-valid requests may be refused.
ARGS = "the names of args (--flag names) are a pattern OpenAPI 3.0 cannot state"
#: Why a registration's or a data source's schema-valid requests may be refused.
URL = ("a URL's shape (http://host:port) is in words only, so that no generated "
       "request names a host the service would then contact")

TARGETS: dict[str, Target] = {t.program: t for t in (
    Target("tier_server",
           # {"active": 0} stops every worker: each later POST /task would wait forever
           # (the fault event it exists for), so it is not fuzzed here; its bounds are
           # in the document and tests/unit/test_tier_server.py covers it.
           skip=frozenset({"POST /admin/workers"}),
           unstated={"POST /reset": "since must lie within an hour of the server's clock"},
           # Schema-valid tasks hold a worker for at most 0.05 s, not the default hour.
           options={"max_hold_s": "0.05"}),
    Target("armada.spinner", unstated={"POST /nodes": URL, "POST /tasks": ARGS}),
    Target("armada.cargo_manager", unstated={"POST /cargos": URL, "POST /storage": URL}),
    Target("armada.app_manager", peers=("spinner", "cargo_manager"),
           unstated={"POST /apps": ARGS}),
    Target("armada.beacon", peers=("app_manager", "spinner", "cargo_manager"),
           unstated={"POST /apps": ARGS, "POST /nodes": URL, "POST /cargos": URL}),
    Target("armada.captain", peers=("beacon",), unstated={"POST /tasks": ARGS},
           options={"cgroup_parent": None}),
    Target("armada.cargo", peers=("beacon",), unstated={
        "POST /apps": URL + "; quota_bytes must hold one record of dim numbers",
        "PUT /apps/{app}/peers": URL,
        "POST /apps/{app}/replicate": "ts must lie within the bound of the Cargo's clock"}),
    Target("armada.detect_task"),
    Target("armada.echo_task"),
    Target("armada.face_task"),
    Target("person_search.edge_server", unstated={
        "PUT /world": 'the keys of present are "1" to "<slots>", a rule across fields'}),
    Target("person_search.coordinator", peers=("server",), unstated={
        "POST /runs": "servers must be the configured edge servers (their URLs' shape is "
                      "in words), and the layout, slots and starts must agree"}),
)}


class Services:
    """The processes a test started, stopped (and reaped) at its end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[tuple[str, subprocess.Popen[str], Path]] = []

    def start(self, program: str, options: dict[str, str | None] | None = None) -> str:
        """Start ``program`` with ``command_line``'s arguments, ``options`` replaced (a
        peer URL, or None to drop one) and its peers started first; its base URL."""
        replaced = dict(options or {})
        for option, peer in PEERS.get(program, {}).items():
            replaced.setdefault(option, self.start(peer))
        argv = _replace(command_line(program, self.folder / program.replace(".", "_")),
                        replaced)
        cmd = [sys.executable, "-m", PROGRAMS[program].module, "--host", "127.0.0.1",
               "--port", "0", *argv]
        log = self.folder / f"{program}.{len(self.procs)}.log"
        with log.open("w") as sink:  # a file, so a chatty service never blocks on a pipe
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sink, text=True)
        self.procs.append((program, proc, log))  # TESTBED_SECRET_FILE: the conftest's

        def listening() -> str | None:
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)$", log.read_text(), re.MULTILINE)
            if match is None and proc.poll() is not None:
                raise AssertionError(f"{program} did not start: {log.read_text()}")
            return match and f"http://127.0.0.1:{match.group(1)}"

        return wait_until(listening, 30, f"{program} listening")

    def stop(self) -> dict[str, str]:
        """Stop every process (SIGTERM, then SIGKILL after 10 s); each one's stderr."""
        logs = {}
        for program, proc, log in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            logs[program] = log.read_text()
        self.procs.clear()
        return logs


def _replace(argv: list[str], options: dict[str, str | None]) -> list[str]:
    """``argv`` with each ``--name VALUE`` of ``options`` replaced (None: removed) and
    those not in it appended."""
    out: list[str] = []
    flags = {"--" + name.replace("_", "-"): value for name, value in options.items()}
    seen = set()
    words = iter(argv)
    for word in words:
        if word in flags:
            value = next(words)
            seen.add(word)
            if flags[word] is not None:
                out += [word, flags[word]]
            del value
        else:
            out.append(word)
    for flag, value in flags.items():
        if flag not in seen and value is not None:
            out += [flag, value]
    return out


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    started = Services(tmp_path)
    yield started
    started.stop()


def server_errors(operation: schemathesis.APIOperation) -> Callable:
    """The check of 5xx answers: one the operation's document declares (a peer or the
    store failed) passes, any other is the service's fault."""
    declared = {int(code) for code in operation.definition.raw["responses"] if code.isdigit()}

    def not_a_server_error(ctx, response, case) -> bool | None:
        status = response.status_code
        if status >= 500 and not (status in DECLARED_5XX and status in declared):
            raise Failure(operation=operation.label, title="Server error",
                          message=f"{status} {response.text[:300]}")
        return None

    return not_a_server_error


def checks_for(mode: GenerationMode, operation: schemathesis.APIOperation,
               accepts_valid: bool) -> list[Callable]:
    """Schemathesis' checks of one mode."""
    from schemathesis.specs.openapi import checks

    found = [server_errors(operation), checks.status_code_conformance,
             checks.content_type_conformance, checks.response_schema_conformance,
             checks.ignored_auth]
    if mode is GenerationMode.NEGATIVE:
        found.append(checks.negative_data_rejection)
    elif accepts_valid:
        found.append(checks.positive_data_acceptance)
    return found


def generated_test(operation: schemathesis.APIOperation, mode: GenerationMode,
                   checks: list[Callable]) -> Callable[[], None]:
    """The Hypothesis test of one operation and mode: :data:`EXAMPLES` cases, each sent
    with the run secret and validated by ``checks`` (no shrinking: the first failing
    case is reported as found)."""

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(headers=AUTH, checks=checks)

    return run


def fuzz(schema: schemathesis.BaseSchema, target: Target) -> list[str]:
    """Every operation of ``schema`` but the skipped ones, in both modes; the failures."""
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path}"
        if label in target.skip:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            checks = checks_for(mode, operation, label not in target.unstated)

            run = generated_test(operation, mode, checks)
            try:
                run()
            except Unsatisfiable:  # nothing to negate: no parameters, no body
                continue
            except requests.Timeout as exc:
                failures.append(f"{label} ({mode.value}): no answer within "
                                f"{REQUEST_TIMEOUT_S:g} s: {exc}")
            except requests.RequestException as exc:  # the service closed or died
                failures.append(f"{label} ({mode.value}): {exc!r}")
            except (AssertionError, BaseExceptionGroup) as exc:  # Schemathesis' failures
                failures.append(f"{label} ({mode.value}): {_report(exc)}")
    return failures


def _report(exc: BaseException) -> str:
    """The text of a failure, a group's members included."""
    if isinstance(exc, BaseExceptionGroup) and not isinstance(exc, FailureGroup):
        return "\n".join(_report(inner) for inner in exc.exceptions)
    return str(exc)


@pytest.mark.parametrize("program", sorted(TARGETS))
def test_the_service_survives_schemathesis(program: str, services: Services) -> None:
    load_all_checks()
    target = TARGETS[program]
    url = services.start(program, target.options)
    config = schemathesis.Config.from_dict({
        "seed": 13,
        "request-timeout": REQUEST_TIMEOUT_S,
        # Services refuse NUL in any text (docs/services.md "Errors"); the documents do
        # not repeat it on every string.
        "generation": {"allow-x00": False},
        # A body over a service's size limit is refused with 413 (documented).
        "checks": {"negative_data_rejection": {"expected-statuses": [
            400, 401, 403, 404, 405, 406, 409, 413, 415, 422]}},
    })
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=config)
    failures = fuzz(schema, target)
    logs = services.stop()
    tracebacks = {name: log for name, log in logs.items() if "Traceback" in log}
    assert not failures, "\n\n".join(failures)
    assert not tracebacks, tracebacks
