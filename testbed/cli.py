"""The ``testbed`` command: list, run, compare, calibrate, experiment, clean."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from testbed.errors import Incomplete, TestbedError

#: The repository root: ``testbed list --json`` gives study files relative to it.
ROOT = Path(__file__).resolve().parents[1]


def listing() -> dict[str, list[dict[str, str]]]:
    """What ``testbed list`` shows: scenarios, experiments, system calibrations,
    policies and generators, each with its system and a one-line description."""
    from testbed.experiments import files as exp_files
    from testbed.registry import calibrations, experiments, generators, systems
    from testbed.scenario.loader import builtin_scenarios, load_scenario

    def first_line(text: str) -> str:
        return text.strip().splitlines()[0] if text and text.strip() else ""

    scenarios = []
    for name in sorted(builtin_scenarios()):
        scenario = load_scenario(name)
        scenarios.append({"name": name, "system": scenario.system,
                          "description": first_line(scenario.description)})
    made = generators()
    return {
        "scenarios": scenarios,
        "experiments": [{"name": name, "system": system.name,
                         "description": first_line(exp.description),
                         "sizes": list(exp_files.sizes(exp)),
                         "executors": list(exp_files.executors(exp)),
                         "studies": exp_files.listed_studies(exp, ROOT)}
                        for name, (system, exp) in sorted(experiments().items())],
        "calibrations": [{"name": name, "system": system.name,
                          "description": first_line(cal.description),
                          "sizes": list(cal.sizes)}
                         for name, (system, cal) in sorted(calibrations().items())],
        "policies": [{"name": name, "system": system.name, "description": first_line(text)}
                     for system in systems().values()
                     for name, text in sorted(system.policies.items())],
        "generators": [{"name": name, "system": system.name,
                        "description": first_line(
                            sys.modules[type(made[name]).__module__].__doc__ or "")}
                       for system in systems().values() for name in sorted(system.generators)],
    }


def _cmd_list(args: argparse.Namespace) -> int:
    found = listing()
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for section, items in found.items():
        print(f"{section}:")
        for item in items:
            print(f"  {item['name']:<20} {item['system']:<14} {item['description']}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from testbed.parent_death import die_with_parent
    from testbed.registry import get_system
    from testbed.runner import check_executor, run_scenario
    from testbed.scenario.loader import load_scenario

    die_with_parent()  # a study's cell: end (and tear down) with the worker that started it
    scenario = load_scenario(args.scenario)
    system = get_system(scenario.system)
    policies = args.policies.split(",") if args.policies else None
    for name in policies or ():  # a registered name, or a label of the scenario's entries
        if name not in system.policies and name not in scenario.policies:
            raise TestbedError(f"--policies: expected names of {system.name} policies "
                               f"({', '.join(sorted(system.policies))}) or labels of the "
                               f"scenario's ({', '.join(scenario.policies)}), found {name!r}")
    executor = args.executor or scenario.executor.default
    check_executor(system, executor, "--executor" if args.executor else
                   f"{scenario.source}: executor.default")
    scenario = scenario.with_overrides(policies=policies, seed=args.seed,
                                       duration=args.duration, repetitions=args.repetitions,
                                       time_scale=args.time_scale,
                                       task_timeout=args.task_timeout)
    run_scenario(scenario, out=Path(args.out) if args.out else None, executor=executor,
                 progress=lambda line: print(line, flush=True))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    if args.other is not None:
        from testbed.analysis.compare_folders import compare_folders, format_folders

        if args.baseline is not None:
            raise TestbedError("--baseline pairs policies inside one run; with two folders "
                               "each policy is compared with itself (B - A)")
        found = compare_folders(args.run_dir, args.other)
        print(json.dumps(found, indent=2, default=float) if args.json
              else format_folders(found))
        return 0
    from testbed.analysis.compare import compare, format_compare
    from testbed.analysis.compare_folders import degraded_line
    from testbed.analysis.traces import read_traces

    df = read_traces(args.run_dir)
    result = compare(df, baseline=args.baseline)
    result["degraded"] = degraded_line(Path(args.run_dir))
    if args.json:
        print(json.dumps(result, indent=2, default=float))
    else:
        print(format_compare(result, result["degraded"]))
    return 0


def _cmd_study(args: argparse.Namespace) -> int:
    from testbed.study.run import run_study
    from testbed.study.spec import load_study

    if args.workers is not None and args.workers < 1:
        raise TestbedError(f"--workers: expected an integer >= 1, found {args.workers}")
    if args.serial and (args.workers is not None or args.scheduler is not None):
        raise TestbedError("--serial runs the cells in this process, without a cluster: "
                           "leave out --workers and --scheduler")
    if args.workers is not None and args.scheduler is not None:
        raise TestbedError("--workers sizes the local cluster; with --scheduler the "
                           "cluster's own workers run the cells")
    study = load_study(args.file)
    run_study(study, Path(args.out) if args.out else None, scheduler=args.scheduler,
              workers=args.workers, include_degraded=args.include_degraded,
              serial=args.serial, rerun_degraded=args.rerun_degraded, progress=_print_flush)
    return 0


RERUN_HELP = ("set aside the emulation cells the fidelity guard marked degraded (kept "
              "under degraded/ in the study folder) and run them again")


def _need_root(command: str, why: str) -> None:
    """Refuse, in one line, a command that cannot work without root."""
    from testbed.machine import is_root

    if not is_root():
        raise TestbedError(f"{command} needs root ({why}): run it as root")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.name is not None:
        return _system_calibration(args)
    if args.size is not None or args.out is not None or args.report is not None:
        raise TestbedError("--size, --out and --report belong to a system's calibration "
                           "(testbed calibrate NAME); the link calibration takes --backend, "
                           "--probes and --json")
    _need_root("calibrate", "it builds network namespaces and shapes links")
    from mininet.log import setLogLevel

    from testbed.calibrate import as_json_cases, calibrate, format_table

    setLogLevel("error")
    results = calibrate(backend=args.backend, probes=args.probes)
    print(json.dumps(as_json_cases(results), indent=2) if args.json else format_table(results))
    return 0


def _system_calibration(args: argparse.Namespace) -> int:
    """``testbed calibrate NAME``: a system's calibration at ``--size`` and its report."""
    import shlex

    from testbed.registry import calibrations, resolve
    from testbed.runner import RESULTS_ROOT

    known = calibrations()
    if args.name not in known:
        raise TestbedError(f"calibrate: expected the link calibration (no name) or one of "
                           f"{', '.join(sorted(known)) or 'no system calibration'}, "
                           f"found {args.name!r}")
    _, cal = known[args.name]
    size = args.size or cal.sizes[0]
    if size not in cal.sizes:
        raise TestbedError(f"--size: {cal.name} has {', '.join(cal.sizes)}, found {size!r}")
    _need_root(f"calibrate {cal.name}", "it measures processes in CPU-quota cgroups")
    out = Path(args.out) if args.out else RESULTS_ROOT / f"{cal.name}-{size}"
    report_dir = Path(args.report or cal.report_dir)
    folder = resolve(cal.run)(size, out, _print_flush)
    command = f"testbed calibrate {cal.name} " + shlex.join(
        ["--size", size, "--report", str(report_dir)])
    report = resolve(cal.report)(folder, report_dir / cal.report_file, command)
    print(f"results: {folder}\nreport: {report}")
    return 0


def _cmd_experiment(args: argparse.Namespace) -> int:
    """Run a registered experiment at ``--size`` on ``--executors`` and write its report."""
    from testbed.experiments import files as exp_files
    from testbed.registry import experiments

    _, exp = experiments()[args.name]
    sizes = exp_files.sizes(exp)
    if args.size not in sizes:
        raise TestbedError(f"--size: {exp.name} has {', '.join(sizes)}, found {args.size!r}")
    runs_on = exp_files.executors(exp)
    options = ["--size", args.size]
    if args.executors is None:
        executors = runs_on
    else:
        executors = tuple(e for e in args.executors.split(",") if e)
        wrong = [e for e in executors if e not in runs_on]
        if wrong or not executors:
            raise TestbedError(f"--executors: {exp.name} runs on "
                               f"{' and '.join(runs_on)}, found {args.executors!r}")
    if len(runs_on) > 1:
        options += ["--executors", ",".join(executors)]
    return _data_experiment(args, exp, executors, options)


def _chosen_options(args: argparse.Namespace, exp: Any, options: list[str]) -> dict[str, str]:
    """The experiment-specific options given, checked against ``exp``'s choices, by
    flag; a value other than the default joins ``options`` (the command the report
    quotes)."""
    from testbed.registry import experiments

    chosen: dict[str, str] = {}
    for flag in _experiment_options():
        value = getattr(args, flag.replace("-", "_"))
        if value is None:
            continue
        if flag not in exp.options:
            users = [n for n, (_, e) in experiments().items() if flag in e.options]
            raise TestbedError(f"--{flag}: {exp.name} takes no such option (it applies to "
                               f"{', '.join(users)})")
        if value not in exp.options[flag]:
            raise TestbedError(f"--{flag}: expected one of {', '.join(exp.options[flag])}, "
                               f"found {value!r}")
        chosen[flag] = value
        if value != exp.options[flag][0]:
            options += [f"--{flag}", value]
    return chosen


def _data_experiment(args: argparse.Namespace, exp: Any, executors: tuple[str, ...],
                     options: list[str]) -> int:
    """An experiment of study files: run what is missing, then metrics, claims, report.
    An option other than its default sets its path in every study and names the
    results folder and the report after its value."""
    import shlex

    from testbed.experiments.engine import (
        ExperimentIncomplete,
        run_experiment,
        write_experiment_report,
    )
    from testbed.runner import RESULTS_ROOT

    chosen = _chosen_options(args, exp, options)
    overrides = {exp.option_paths[f]: v for f, v in chosen.items()
                 if v != exp.options[f][0]}
    suffix = "".join(f"-{v}" for f, v in chosen.items() if v != exp.options[f][0])
    out = Path(args.out) if args.out else RESULTS_ROOT / f"{exp.name}-{args.size}{suffix}"
    report_dir = Path(args.report or exp.report_dir)
    stem = Path(exp.report_file or f"{exp.name}.md")
    report = report_dir / f"{stem.stem}{suffix}{stem.suffix}"
    command = f"testbed experiment {exp.name} " + shlex.join(
        [*options, "--report", str(report_dir)])
    run = run_experiment(exp, args.size, executors, out, scheduler=args.scheduler,
                         serial=args.serial, rerun_degraded=args.rerun_degraded,
                         overrides=overrides, progress=_print_flush)
    reports = write_experiment_report(exp, run, args.size, executors, command, report)
    for claim in run.claims:
        print(f"claim {claim.key}: {claim.verdict}")
    print(f"results: {out}\nreports: {', '.join(map(str, reports))}")
    if run.incomplete:
        raise ExperimentIncomplete(f"{len(run.incomplete)} study(ies) with unfinished cells "
                                   f"({'; '.join(run.incomplete)}); the report covers the "
                                   "rest, and the same command runs what is missing")
    return 0


def _print_flush(line: str) -> None:
    """Progress lines go straight to the terminal."""
    print(line, flush=True)


def _experiment_options() -> dict[str, set[str]]:
    """Every experiment-specific option flag with the choices any experiment gives it."""
    from testbed.registry import experiments

    flags: dict[str, set[str]] = {}
    for _, exp in experiments().values():
        for flag, choices in exp.options.items():
            flags.setdefault(flag, set()).update(choices)
    return flags


def _cmd_clean(_args: argparse.Namespace) -> int:
    _need_root("clean", "it removes what crashed runs left as root: namespaces, links, "
                        "processes")
    from testbed.emulation.ledger import clean_stale
    from testbed.emulation.names import release_stale_prefixes

    report = clean_stale()
    freed = release_stale_prefixes()  # only those whose ledger is gone now
    if not report:
        print("nothing to clean: no ledger of a stopped run remains")
    for run, errors in report.items():
        print(f"{run}: {'cleaned' if not errors else 'errors: ' + '; '.join(errors)}")
    if freed:
        print(f"run prefixes freed: {' '.join(freed)}")
    return 1 if any(report.values()) else 0


def _cmd_claims_index(args: argparse.Namespace) -> int:
    from testbed.reports.claims_index import write_index

    print(f"wrote {write_index(Path(args.root))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    lst = sub.add_parser("list", help="built-in scenarios, experiments, policies and "
                                      "generators, with their systems")
    lst.add_argument("--json", action="store_true", help="print the same as JSON")
    lst.set_defaults(fn=_cmd_list)

    run = sub.add_parser("run", help="run a scenario (built-in name or YAML path)")
    run.add_argument("scenario")
    run.add_argument("--executor", choices=("emulation", "sim"), default=None)
    run.add_argument("--out", help="results folder (default: a new folder under results/)")
    run.add_argument("--policies", help="comma-separated policy names (default: the scenario's)")
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--duration", type=float, default=None,
                     help="model-time seconds, overrides the scenario's duration")
    run.add_argument("--repetitions", type=int, default=None)
    run.add_argument("--time-scale", type=float, default=None,
                     help="model seconds per wall second, overrides the scenario's time_scale")
    run.add_argument("--task-timeout", type=float, default=None,
                     help="model seconds a task may take before it counts as timed out")
    run.set_defaults(fn=_cmd_run)

    cmp_ = sub.add_parser("compare", help="per-policy statistics and paired differences "
                          "with honest intervals, in one run or between two run or study "
                          "folders (docs/statistics.md)")
    cmp_.add_argument("run_dir", help="a run folder (policies against --baseline), or A")
    cmp_.add_argument("other", nargs="?", help="B: a second run or study folder; then per "
                      "policy B - A with its interval")
    cmp_.add_argument("--baseline", help="policy the others are paired against (default: "
                      "the first by name, stated in the output)")
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(fn=_cmd_compare)

    stu = sub.add_parser("study", help="run a study file: a replicated sweep over a "
                         "scenario's grid, resumable, on a Dask cluster (docs/studies.md)")
    stu.add_argument("file")
    stu.add_argument("--out", help="study folder (default results/<study name>/; a re-run "
                     "into the same folder runs only unfinished cells)")
    stu.add_argument("--scheduler", help="address of a running Dask scheduler, e.g. "
                     "tcp://HOST:8786 (default: a local cluster)")
    stu.add_argument("--workers", type=int, help="local cluster workers (default: one per "
                     "core)")
    stu.add_argument("--serial", action="store_true", help="run the cells one after "
                     "another in this process, without a cluster")
    stu.add_argument("--include-degraded", action="store_true",
                     help="keep degraded emulation cells in the statistics")
    stu.add_argument("--rerun-degraded", action="store_true", help=RERUN_HELP)
    stu.set_defaults(fn=_cmd_study)

    cal = sub.add_parser("calibrate", help="configured vs achieved delay and bandwidth, "
                         "or a system's calibration by name")
    cal.add_argument("name", nargs="?", default=None,
                     help="a system's calibration (testbed list); none: the link shaping")
    cal.add_argument("--size", default=None, help="a system calibration's size")
    cal.add_argument("--out", default=None, help="a system calibration's results folder")
    cal.add_argument("--report", default=None, help="folder for a system calibration's "
                     "report (default: its system's)")
    cal.add_argument("--backend", default="auto",
                     choices=("auto", "netem", "userspace", "shaper-c", "delayer-py"),
                     help="auto: every shaping engine present; userspace: its data paths")
    cal.add_argument("--probes", type=int, default=200)
    cal.add_argument("--json", action="store_true")
    cal.set_defaults(fn=_cmd_calibrate)

    from testbed.experiments import files as exp_files
    from testbed.registry import experiments

    registered = experiments()
    exp = sub.add_parser("experiment", help="run a registered experiment and write its report")
    exp.add_argument("name", choices=sorted(registered))
    exp.add_argument("--size", default="small",
                     help="; ".join(f"{n}: {', '.join(exp_files.sizes(e))}"
                                    for n, (_, e) in sorted(registered.items())))
    exp.add_argument("--executors", default=None,
                     help="comma-separated executors (default: every one the experiment "
                          "runs on)")
    for flag, choices in sorted(_experiment_options().items()):
        users = [n for n, (_, e) in sorted(registered.items()) if flag in e.options]
        exp.add_argument(f"--{flag}", default=None, help=f"{', '.join(users)}: one of "
                                                         f"{', '.join(sorted(choices))}")
    exp.add_argument("--out", help="runs and metrics (default: results/NAME-SIZE/ for an "
                     "experiment of study files, where a re-run runs only what is missing)")
    exp.add_argument("--scheduler", help="address of a running Dask scheduler for the "
                     "studies' cells, e.g. tcp://HOST:8786 (default: a local cluster)")
    exp.add_argument("--serial", action="store_true", help="run the studies' cells one "
                     "after another in this process, without a cluster")
    exp.add_argument("--rerun-degraded", action="store_true", help=RERUN_HELP)
    exp.add_argument("--report", default=None,
                     help="folder of the generated report (default: the experiment's, "
                          "under docs/results/)")
    exp.set_defaults(fn=_cmd_experiment)

    idx = sub.add_parser("claims-index", help="write FOLDER/README.md: every claim the "
                                              "reports under FOLDER judged, with its "
                                              "verdict, command and evidence")
    idx.add_argument("root", nargs="?", default="docs/results", metavar="FOLDER")
    idx.set_defaults(fn=_cmd_claims_index)

    sub.add_parser("clean", help="remove what crashed runs left, from their ledgers") \
        .set_defaults(fn=_cmd_clean)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except Incomplete as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except PermissionError as exc:
        # a folder or file this user may not write, met before a command checked it
        print(f"testbed: {exc.filename or 'a file'}: permission denied; run as root or "
              "choose folders you can write (--out)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (``testbed list | head``): stop writing, quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except BaseException as exc:
        from testbed.emulation.executor import Interrupted

        if isinstance(exc, Interrupted):
            if exc.teardown_errors:
                print(f"testbed: stopped by {exc}; teardown could not remove "
                      f"{len(exc.teardown_errors)} resource(s): "
                      f"{'; '.join(exc.teardown_errors)}; run `testbed clean`",
                      file=sys.stderr)
            else:
                print(f"testbed: stopped by {exc}; everything the run created was removed",
                      file=sys.stderr)
            return exc.exit_code
        raise


if __name__ == "__main__":
    sys.exit(main())
