"""The ``hpcbench`` command line: parse, call the library, print. Each module of this package
adds its commands (``add_parsers``) and names the function that runs each (``run``, one
``argparse.Namespace`` in, an exit status out); nothing else lives here but what every command
shares: output into a pipe whose reader has gone (``hpcbench history | head -1``) ends the
command quietly with status 141, as a Unix tool killed by SIGPIPE does."""

from __future__ import annotations

import argparse
import os
import sys

from hpcbench import __version__
from hpcbench.argparsing import Parser
from hpcbench.cli import bench, doctor, history, jobs, prep, profile, sweep, watch


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="hpcbench",
        description="Job scripts, parallel training and measured comparisons for PyTorch on HPC.",
        epilog="Program arguments go after '--', e.g.: hpcbench submit jobs/demo.toml -- --epochs 3",
    )
    parser.add_argument("--version", action="version", version=f"hpcbench {__version__}")
    sub = parser.add_subparsers(dest="action", required=True, metavar="COMMAND")
    jobs.add_parsers(sub)
    prep.add_parsers(sub)
    bench.add_parsers(sub)
    history.add_parsers(sub)
    sweep.add_parsers(sub)
    watch.add_parsers(sub)
    doctor.add_parsers(sub)
    profile.add_parsers(sub)
    return parser


def _split_program_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


#: the exit status of a command whose reader went away: a shell's for a process SIGPIPE ended
READER_GONE = 141


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Whatever it prints, its help and its usage errors
    included, reaches stdout before it returns (or exits): a reader that has gone leaves no
    BrokenPipeError traceback and no "Exception ignored" line at the interpreter's exit."""
    try:
        try:
            return _main(argv)
        finally:  # argparse's --help exits (SystemExit) with its text still buffered
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        return READER_GONE


def _stdout_to_devnull() -> None:
    """/dev/null over stdout: the interpreter's last flush at exit writes what is left there,
    not into the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _main(argv: list[str] | None) -> int:
    from hpcbench.this_rank import line_buffered_output

    line_buffered_output()  # progress reaches a pipe, a tee or a job's log as it happens
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["train"], ["predict"]):  # programs of their own, not subcommands
        print(
            f"hpcbench: error: {argv[0]} is not a command of hpcbench: run it as python -m "
            f"hpcbench.{argv[0]} ARGS (on this machine), or as a job with hpcbench submit "
            f"--module hpcbench.{argv[0]} -- ARGS (python -m hpcbench.{argv[0]} --help lists "
            "its options)",
            file=sys.stderr,
        )
        return 2
    own, program_args = _split_program_args(argv)
    args = build_parser().parse_args(own)
    args.program_args = program_args
    return int(args.run(args))
