"""The ``testbed`` command: list, run, compare, calibrate, experiment, clean."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from testbed.errors import TestbedError


def _cmd_list(_args: argparse.Namespace) -> int:
    from testbed.scenario.loader import builtin_scenarios, load_scenario

    for name in sorted(builtin_scenarios()):
        scenario = load_scenario(name)
        print(f"{name:<20} {scenario.description.strip().splitlines()[0] if scenario.description else ''}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from testbed.runner import run_scenario
    from testbed.scenario.loader import load_scenario

    scenario = load_scenario(args.scenario)
    policies = args.policies.split(",") if args.policies else None
    scenario = scenario.with_overrides(policies=policies, seed=args.seed,
                                       duration=args.duration, repetitions=args.repetitions)
    executor = args.executor or scenario.executor.default
    run_scenario(scenario, out=Path(args.out) if args.out else None, executor=executor,
                 progress=lambda line: print(line, flush=True))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from testbed.report import compare, format_compare
    from testbed.traces import read_traces

    df = read_traces(args.run_dir)
    baseline = args.baseline or min(df["policy"].unique())
    result = compare(df, baseline=baseline, n_boot=args.boot, seed=args.seed)
    if args.json:
        print(json.dumps(result, indent=2, default=float))
    else:
        print(format_compare(result))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from mininet.log import setLogLevel

    from testbed.calibrate import as_json_cases, calibrate, format_table

    setLogLevel("error")
    results = calibrate(backend=args.backend, probes=args.probes)
    print(json.dumps(as_json_cases(results), indent=2) if args.json else format_table(results))
    return 0


def _cmd_experiment(args: argparse.Namespace) -> int:
    import shlex
    import time

    if args.cargo_runtime != "process" and args.name != "armada-storage":
        raise TestbedError("--cargo-runtime applies to armada-storage only")
    if args.name.startswith("armada-"):
        return _armada_experiment(args)
    if args.name == "person-search":
        return _person_search_experiment(args)

    from testbed.experiments.claims import write_report
    from testbed.experiments.offloading import run_experiment
    from testbed.runner import RESULTS_ROOT

    executors = [e for e in args.executors.split(",") if e]
    report_dir = args.report or "docs/results/offloading"
    out = Path(args.out) if args.out else \
        RESULTS_ROOT / f"offloading-{args.size}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    metrics = run_experiment(args.size, executors, out,
                             progress=lambda line: print(line, flush=True))
    command = "testbed experiment offloading " + shlex.join(
        ["--size", args.size, "--executors", ",".join(executors), "--report", report_dir])
    report = write_report(metrics, Path(report_dir), command)
    print(f"runs and metrics.json: {out}\nreport: {report}")
    return 0


def _armada_experiment(args: argparse.Namespace) -> int:
    """Run an Armada experiment (emulation) and write its report next to the others."""
    import shlex
    import time

    from testbed.experiments import armada, armada_failover, armada_fleets, armada_storage
    from testbed.runner import RESULTS_ROOT

    run, write, report_name = {
        "armada-selection": (armada.run_selection, armada.write_selection_report,
                             "selection.md"),
        "armada-failover": (armada_failover.run_failover,
                            armada_failover.write_failover_report, "failover.md"),
        "armada-scalability": (armada_fleets.run_scalability,
                               armada_fleets.write_scalability_report, "scalability.md"),
        "armada-failures": (armada_fleets.run_failures, armada_fleets.write_failures_report,
                            "failures.md"),
        "armada-churn": (armada_fleets.run_churn, armada_fleets.write_churn_report,
                         "churn.md"),
        "armada-load": (armada_fleets.run_load, armada_fleets.write_load_report, "load.md"),
        "armada-storage": (armada_storage.run_storage, armada_storage.write_storage_report,
                           "storage.md"),
    }[args.name]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else RESULTS_ROOT / f"{args.name}-{args.size}-{stamp}"
    report_dir = Path(args.report or "docs/results/armada")
    extra: dict[str, str] = {}
    options = ["--size", args.size]
    if args.name == "armada-storage" and args.cargo_runtime != "process":
        extra["cargo_runtime"] = args.cargo_runtime
        options += ["--cargo-runtime", args.cargo_runtime]
        report_name = f"storage-{args.cargo_runtime}.md"
    run(args.size, out, progress=lambda line: print(line, flush=True), **extra)
    command = f"testbed experiment {args.name} " + shlex.join(
        [*options, "--report", str(report_dir)])
    report = write(out, report_dir / report_name, command)
    print(f"results: {out}\nreport: {report}")
    return 0


def _person_search_experiment(args: argparse.Namespace) -> int:
    """Person search: the simulator's experiments (Fig. 3, Fig. 4, the 2-D grid) and the
    emulated comparison, each with its report in the same folder."""
    import shlex
    import time

    from testbed.experiments import person_search, person_search_report
    from testbed.runner import RESULTS_ROOT

    executors = [e for e in args.executors.split(",") if e]
    unknown = sorted(set(executors) - {"sim", "emulation"})
    if unknown or not executors:
        raise TestbedError(f"--executors: expected sim, emulation or both, found "
                           f"{args.executors!r}")
    if args.size not in ("small", "full"):
        raise TestbedError(f"--size: person-search has small and full, found {args.size!r}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else RESULTS_ROOT / f"person-search-{args.size}-{stamp}"
    report_dir = Path(args.report or "docs/results/person-search")
    progress = lambda line: print(line, flush=True)
    reports = []
    for executor in executors:
        command = "testbed experiment person-search " + shlex.join(
            ["--size", args.size, "--executors", executor, "--report", str(report_dir)])
        if executor == "sim":
            folder = person_search_report.run_simulation(out / "sim", args.size,
                                                         progress=progress)
            reports.append(person_search_report.write_simulation_report(
                folder, report_dir / "simulation.md", command))
        else:
            folder = person_search.run_person_search(args.size, out / "emulation", progress)
            reports.append(person_search.write_emulation_report(
                folder, report_dir / "emulation.md", command))
    print(f"results: {out}\nreports: {', '.join(map(str, reports))}")
    return 0


def _cmd_clean(_args: argparse.Namespace) -> int:
    from testbed.emulation.ledger import clean_stale

    report = clean_stale()
    if not report:
        print("nothing to clean: no ledger of a stopped run remains")
    for run, errors in report.items():
        print(f"{run}: {'cleaned' if not errors else 'errors: ' + '; '.join(errors)}")
    return 1 if any(report.values()) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="name the built-in scenarios").set_defaults(fn=_cmd_list)

    run = sub.add_parser("run", help="run a scenario (built-in name or YAML path)")
    run.add_argument("scenario")
    run.add_argument("--executor", choices=("emulation", "sim"), default=None)
    run.add_argument("--out", help="results folder (default: a new folder under results/)")
    run.add_argument("--policies", help="comma-separated policy names (default: the scenario's)")
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--duration", type=float, default=None,
                     help="model-time seconds, overrides the scenario's duration")
    run.add_argument("--repetitions", type=int, default=None)
    run.set_defaults(fn=_cmd_run)

    cmp_ = sub.add_parser("compare", help="per-policy statistics with bootstrap CIs")
    cmp_.add_argument("run_dir")
    cmp_.add_argument("--baseline", help="policy the others are paired against")
    cmp_.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    cmp_.add_argument("--seed", type=int, default=0)
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(fn=_cmd_compare)

    cal = sub.add_parser("calibrate", help="configured vs achieved delay and bandwidth")
    cal.add_argument("--backend", choices=("auto", "netem", "userspace"), default="auto")
    cal.add_argument("--probes", type=int, default=200)
    cal.add_argument("--json", action="store_true")
    cal.set_defaults(fn=_cmd_calibrate)

    exp = sub.add_parser("experiment", help="run a built-in experiment and write its report")
    exp.add_argument("name", choices=("offloading", "armada-selection", "armada-failover",
                                      "armada-scalability", "armada-failures",
                                      "armada-churn", "armada-load", "armada-storage",
                                      "person-search"))
    exp.add_argument("--size", choices=("small", "medium", "full"), default="small",
                     help="offloading and armada-selection also have medium; the other "
                          "Armada experiments and person-search small and full")
    exp.add_argument("--executors", default="sim,emulation",
                     help="comma-separated: sim, emulation or both (default; offloading "
                          "and person-search)")
    exp.add_argument("--cargo-runtime", choices=("process", "docker"), default="process",
                     help="armada-storage: run the Cargos as processes on the sites' nodes "
                          "(default) or in containers with Docker volumes (report "
                          "storage-docker.md)")
    exp.add_argument("--out", help="runs and metrics.json (default: a new folder under results/)")
    exp.add_argument("--report", default=None,
                     help="folder of the generated report (default: docs/results/offloading, "
                          "docs/results/armada, docs/results/person-search)")
    exp.set_defaults(fn=_cmd_experiment)

    sub.add_parser("clean", help="remove what crashed runs left, from their ledgers") \
        .set_defaults(fn=_cmd_clean)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:
        from testbed.emulation.executor import Interrupted

        if isinstance(exc, Interrupted):
            print(f"testbed: stopped by {exc}; everything the run created was removed",
                  file=sys.stderr)
            return 130
        raise


if __name__ == "__main__":
    sys.exit(main())
