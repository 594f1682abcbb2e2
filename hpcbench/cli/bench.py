"""``hpcbench bench``, ``report``, ``compare`` and ``predict-scaling``: parse, call
:mod:`hpcbench.bench` or :mod:`hpcbench.scaling`, print."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from hpcbench.argparsing import count
from hpcbench.files import printable
from hpcbench.jobs.profiles import PROFILE_VAR
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES


def _size_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and 0 < value <= 1 << 20):
        raise argparse.ArgumentTypeError(f"expected MiB > 0 (e.g. 25), got {text[:40]!r}")
    return value


def add_parsers(sub: Any) -> None:
    _add_bench(sub)
    _add_report_and_compare(sub)
    _add_predict_scaling(sub)
    for name in ("bench", "report", "compare", "predict-scaling"):
        sub.choices[name].set_defaults(run=run)


def _add_bench(sub: Any) -> None:
    b = sub.add_parser(
        "bench",
        help="run an experiment matrix with repetitions",
        description="Run every configuration of a matrix (a TOML file, or --configs) with "
        "repetitions, one job per run, and keep every run's results in one directory; run it "
        "again to continue an interrupted matrix. Trainer options common to every run (or, "
        "with --script, --module or --program, your program's arguments) go after '--'.",
        epilog="e.g. hpcbench bench --configs single,ddp:2,mpi:2 --repetitions 3 -- --epochs 2",
    )
    b.add_argument("matrix", nargs="?", help="matrix file (TOML); see docs/benchmarking.md")
    b.add_argument(
        "--configs",
        metavar="LIST",
        help="the configurations without a file: STRATEGY[:RANKS[xNODES]][@DEVICE],... "
        "e.g. single,ddp:2,mpi:2 or single@cuda,ddp:2@cuda",
    )
    b.add_argument(
        "--smoke",
        action="store_true",
        help="the matrix's [smoke] form (and its job's): the same comparison in minutes",
    )
    b.add_argument("--repetitions", type=count(1), help="timing runs per configuration (3)")
    b.add_argument("--energy-repetitions", type=count(0), help="energy runs per configuration (0)")
    b.add_argument("--cooldown", type=float, metavar="S", help="seconds between runs (0)")
    b.add_argument("--job", metavar="SPEC", help="the job spec every run starts from")
    b.add_argument("--name", help="the matrix's name (default: the file's, or 'bench')")
    b.add_argument("--results", metavar="DIR", help="results directory (default runs/bench-<name>)")
    b.add_argument("--scheduler", choices=SCHEDULER_CHOICES, help="default: detected")
    b.add_argument(
        "--host",
        metavar="USER@HOST",
        help="run every job on this login node's scheduler over SSH and bring the results back "
        "(docs/cluster-guide.md)",
    )
    b.add_argument(
        "--remote-dir",
        metavar="DIR",
        help="the working directory on --host (default: hpcbench/<this directory's name>)",
    )
    b.add_argument(
        "--profile", metavar="NAME", help="the cluster profile (default: $HPCBENCH_PROFILE)"
    )
    b.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    b.add_argument(
        "--no-history",
        dest="history",
        action="store_false",
        help="do not record the finished matrix in the results history ($HPCBENCH_HISTORY)",
    )
    b.add_argument("--plan", action="store_true", help="print the runs in order; run nothing")
    own = b.add_argument_group(
        "your own training (measured with hpcbench.measure; docs/measure.md)"
    ).add_mutually_exclusive_group()
    own.add_argument("--script", metavar="FILE", help="every run: python FILE (the args after --)")
    own.add_argument("--module", metavar="MODULE", help="every run: python -m MODULE")
    own.add_argument(
        "--program", metavar="CMD", help="every run: this whole command line (the args after --)"
    )


def _add_report_and_compare(sub: Any) -> None:
    r = sub.add_parser(
        "report",
        help="speedup, efficiency, energy: a report of a matrix's results",
        description="Analyse a results directory of hpcbench bench and write report.md, "
        "report.html (self-contained), figures and CSV tables.",
    )
    r.add_argument("results", metavar="RESULTS")
    r.add_argument("--output", metavar="DIR", help="default RESULTS/report")
    c = sub.add_parser(
        "compare",
        help="what changed between two results directories, or since a recorded result",
        description="Compare two results directories of hpcbench bench, or one with a result "
        "the history recorded (--against): configurations added or removed, figures whose 95 "
        "% intervals do not overlap, provenance.",
        epilog="e.g. hpcbench compare runs/bench-a runs/bench-b; hpcbench compare runs/bench-a "
        "--against last",
    )
    c.add_argument("a", metavar="RESULTS_A")
    c.add_argument("b", metavar="RESULTS_B", nargs="?")
    c.add_argument(
        "--against",
        metavar="WHICH",
        help="compare RESULTS_A with a recorded result: last (this matrix's newest), a date "
        "YYYY-MM-DD[THH:MM] (its newest on or before), a record id from hpcbench history, "
        "or another matrix's name",
    )


def _add_predict_scaling(sub: Any) -> None:
    ps = sub.add_parser(
        "predict-scaling",
        help="step time, throughput and efficiency at N ranks, from a calibration",
        description="Predict data-parallel training at the given rank counts from a calibration "
        "written by 'mpiexec -n P python -m hpcbench.scaling' on your nodes (docs/scaling.md).",
        epilog="e.g. hpcbench predict-scaling calibration.json --ranks 2,8,64,512 "
        "--ranks-per-node 4 --global-batch 1024",
    )
    ps.add_argument("calibration", metavar="CALIBRATION")
    ps.add_argument("--ranks", default="2,4,8,16,64,256,512", help="rank counts (comma-separated)")
    ps.add_argument(
        "--ranks-per-node", type=count(1), help="default: the calibration's ranks per node"
    )
    batch = ps.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=count(1), help="strong scaling: a fixed global batch")
    batch.add_argument(
        "--batch-per-rank",
        type=count(1),
        help="weak scaling: a fixed per-rank batch (default: the calibration's largest)",
    )
    ps.add_argument(
        "--strategy", choices=("mpi", "ddp", "both"), default="both", help="default both"
    )
    ps.add_argument("--no-overlap", action="store_true", help="all-reduce only after backward")
    ps.add_argument("--bucket-mb", type=_size_mb, default=25.0, help="gradient bucket size (25)")


def build_matrix_from(args: argparse.Namespace, trainer_args: list[str]) -> Any:
    """The matrix file with the flags on top, or the matrix of the flags alone."""
    from hpcbench.bench.running.matrix import (
        MatrixError,
        build_matrix,
        configs_from_words,
        read_matrix_table,
        smoke_form,
    )

    if args.matrix and args.configs:
        raise MatrixError("give a matrix file or --configs, not both")
    if not args.matrix and not args.configs:
        raise MatrixError("give a matrix file or --configs (e.g. --configs single,ddp:2,mpi:2)")
    if args.matrix:
        table, where = read_matrix_table(args.matrix), args.matrix
        table.setdefault("name", Path(args.matrix).stem)
    else:
        table, where = {"config": configs_from_words(args.configs)}, "command line"
    if args.smoke:
        table = smoke_form(table, where)
        table.setdefault("name", "bench")
        table["name"] = f"{table['name']}-smoke"  # its results never mix with the full form's
    for key, value in (
        ("repetitions", args.repetitions),
        ("energy_repetitions", args.energy_repetitions),
        ("cooldown", args.cooldown),
        ("job", args.job),
        ("name", args.name),
    ):
        if value is not None:
            table[key] = value
    named = {k: getattr(args, k) for k in ("script", "module") if getattr(args, k)}
    if args.program:
        try:
            named = {"command": shlex.split(args.program)}
        except ValueError as err:
            raise MatrixError(f"--program: {err}") from None
    if named:
        table["program"] = named
    key = "program_args" if table.get("program") else "trainer_args"
    if trainer_args:
        table[key] = [*table.get(key, []), *trainer_args]
    return build_matrix(table, where, smoke=args.smoke)


def run(args: argparse.Namespace) -> int:
    from hpcbench.bench.reading.results_reader import AnalysisError
    from hpcbench.bench.running.matrix import MatrixError
    from hpcbench.bench.running.runner import Bench, BenchError, plan
    from hpcbench.jobs.render import RenderError
    from hpcbench.jobs.schedulers import SchedulerError
    from hpcbench.jobs.schedulers.errors import SchedulerUnreachable
    from hpcbench.jobs.schedulers.polling import check_poll_ceiling
    from hpcbench.jobs.spec import SpecError

    if args.action == "predict-scaling":
        return _predict_scaling(args)
    if args.action == "bench" and args.profile:  # every run's job spec stands on it
        os.environ[PROFILE_VAR] = args.profile
    try:
        if args.action in ("report", "compare"):
            return _analysis(args)
        matrix = build_matrix_from(args, args.program_args)
        results = args.results or f"runs/bench-{matrix.name}"
        bench = Bench(matrix, results, args.scheduler, host=args.host, remote_dir=args.remote_dir)
        if args.plan:
            for i, r in enumerate(plan(matrix), 1):
                print(f"{i}\t{r.config}\t{r.kind}\t{r.rep}")
            return 0
        check_poll_ceiling()  # a bad $HPCBENCH_POLL_CEILING stops before any run is submitted
        resumed = bench.open()
        done = sum(r.status == "completed" for r in bench.runs)
        print(
            f"hpcbench bench: {matrix.name}, {len(matrix.configs)} configuration(s), "
            f"{len(bench.runs)} run(s){f', resumed with {done} done' if resumed else ''}; "
            f"results in {bench.results}",
            flush=True,
        )
        runs = bench.run(retry_failed=args.retry_failed)
    except (MatrixError, BenchError, SpecError, RenderError, SchedulerError, ValueError) as err:
        more = (
            "; the matrix's runs not done stay to do: the same command continues it once a "
            "controller answers, or with --scheduler local here"
        )
        print(
            f"hpcbench: error: {err}{more if isinstance(err, SchedulerUnreachable) else ''}",
            file=sys.stderr,
        )
        return 2 if isinstance(err, (MatrixError, SpecError, RenderError, AnalysisError)) else 1
    except KeyboardInterrupt:
        print("\nstopped; run the same command again to continue the matrix", file=sys.stderr)
        return 130
    failed = [r for r in runs if r.status == "failed"]
    print(
        f"{len(runs) - len(failed)} of {len(runs)} run(s) completed"
        + (f"; {len(failed)} failed (--retry-failed runs them again)" if failed else "")
        + f"; hpcbench report {bench.results}"
    )
    if args.history and all(r.status in ("completed", "failed") for r in runs):
        _record_history(bench.results)
    return 1 if failed else 0


def _analysis(args: argparse.Namespace) -> int:
    """``report`` or ``compare``; a results directory damaged beyond what the checks name is an
    AnalysisError naming it, never a traceback."""
    from hpcbench.bench.reading.results_reader import AnalysisError

    try:
        return _report(args) if args.action == "report" else _compare(args)
    except (TypeError, AttributeError, KeyError, ZeroDivisionError, OverflowError) as err:
        where = args.results if args.action == "report" else f"{args.a} or {args.b}"
        raise AnalysisError(
            f"{where}: results that cannot be analysed ({type(err).__name__}: {err}); "
            "was a file of it edited?"
        ) from None


def _record_history(results: Path) -> None:
    """Record a finished matrix in the results history; a store that cannot be written is a
    warning (the results directory stays the record)."""
    from hpcbench.bench.reading.results_reader import AnalysisError
    from hpcbench.history import HistoryError, record_results

    try:
        rid, new = record_results(results)
    except (HistoryError, AnalysisError) as err:
        print(f"hpcbench: warning: not recorded in the history: {err}", file=sys.stderr)
        return
    from hpcbench.history import history_path

    said = "recorded" if new else "already recorded"
    print(f"{said} in the history as #{rid} ({history_path()}); hpcbench history lists it")


def _report(args: argparse.Namespace) -> int:
    from hpcbench.bench.reporting.report import build_report
    from hpcbench.sweep.report import build_sweep_report

    if (Path(args.results) / "sweep.json").is_file():  # a sweep's results, not a matrix's
        paths = build_sweep_report(args.results, args.output)
    else:
        paths = build_report(args.results, args.output)
    paths = list(paths) if isinstance(paths, (list, tuple)) else [paths]
    for path in paths:
        print(path)
    html = next((p for p in paths if str(p).endswith(".html")), None)
    if html is not None:  # stderr: stdout stays the list of files
        print(f"open {html} in a browser (one self-contained page)", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from hpcbench.bench.analysing.comparison import compare
    from hpcbench.bench.running.matrix import MatrixError

    if (args.b is None) == (args.against is None):
        raise MatrixError("compare: give RESULTS_B or --against WHICH (one of them)")
    if args.against is not None:
        from hpcbench.history import compare_against, configs_of

        entry, findings = compare_against(args.a, args.against)
        measured = ", ".join(sorted(configs_of(entry.matrix))) or "nothing"
        print(printable(f"against {entry.label}, which measured {measured}: {entry.directory}"))
    else:
        findings = compare(args.a, args.b)
    for finding in findings:  # names from results directories: escapes made inert
        print(printable(finding))
    if not findings:
        print("no change beyond the 95 % intervals")
    return 0


def _predict_scaling(args: argparse.Namespace) -> int:
    from hpcbench.scaling.predictions import (
        MAX_COUNT,
        CalibrationError,
        describe,
        load,
        predictions,
        table,
    )

    try:
        ranks = [int(r) for r in args.ranks.split(",") if r.strip()]
        if not ranks or min(ranks) < 1 or max(ranks) > MAX_COUNT:
            raise ValueError
    except ValueError:
        print(
            f"hpcbench: error: --ranks {args.ranks[:80]}: whole numbers from 1 to {MAX_COUNT:,}, "
            "e.g. 2,8,64",
            file=sys.stderr,
        )
        return 2
    try:
        cal = load(Path(args.calibration))
        per_node = args.ranks_per_node or cal.machine["ranks_per_node"]
        batch = (
            {"global_batch": args.global_batch}
            if args.global_batch
            else {"batch_per_rank": args.batch_per_rank or max(cal.record["compute"]["batches"])}
        )
        for line in describe(cal):
            print(line)
        strategies = ("mpi", "ddp") if args.strategy == "both" else (args.strategy,)
        for strategy in strategies:
            if args.strategy == "both" and cal.backend_of(strategy) is None:
                continue
            rows = predictions(
                cal,
                strategy,
                ranks,
                per_node,
                overlap=not args.no_overlap,
                bucket_mb=args.bucket_mb,
                **batch,
            )
            print()
            for line in table(rows, f"{strategy}, {per_node} rank(s)/node"):
                print(line)
    except CalibrationError as err:
        print(f"hpcbench: error: {err}", file=sys.stderr)
        return 2
    return 0
