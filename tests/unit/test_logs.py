"""Finding the first failing rank's traceback in each launcher's labelled output."""

from __future__ import annotations

import pytest

from hpcbench.jobs.logs import first_rank_error

TB = [
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "    boom()",
    "ValueError: bad batch",
]


@pytest.mark.parametrize(
    "label, rank", [("[default1]:", None), ("[3] ", "3"), ("[1,3]<stderr>:", "3"), ("3: ", "3")]
)
def test_each_launcher_label(label, rank):
    other = "[0] " if label != "[0] " else "[1] "
    text = "\n".join(
        ["starting", f"{other}progress 10%"]
        + [label + line for line in TB]
        + ["srun: error: node2: task 3: Exited with exit code 1"]
    )
    err = first_rank_error(text)
    assert err is not None
    assert err.traceback.splitlines()[-1] == label + "ValueError: bad batch"
    if rank is not None:
        assert err.rank == rank


def test_torchrun_root_cause_names_the_global_rank_and_launcher_tracebacks_are_skipped():
    launcher_tb = [
        "Traceback (most recent call last):",
        '  File "/x/torch/distributed/run.py", line 1, in main',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    text = "\n".join(
        launcher_tb
        + ["[default0]:" + line for line in TB]
        + ["Root Cause (first observed failure):", "[0]:", "  rank      : 2 (local_rank: 0)"]
    )
    err = first_rank_error(text)
    assert err.rank == "2" and err.traceback.endswith("ValueError: bad batch")


def test_no_traceback():
    assert first_rank_error("all good\n") is None


def test_a_rank_that_stopped_with_a_one_line_error_is_named_by_it():
    line = "[default0]:hpcbench train: error: --model 'nope': not a built-in"
    text = "\n".join(
        [
            "srun: error: node2: task 0: Exited with exit code 2",
            "[default1]:epoch 1/2: loss 2.1",
            line,
            "Root Cause (first observed failure):",
            "[0]:",
            "  rank      : 4 (local_rank: 0)",
        ]
    )
    err = first_rank_error(text)
    assert err.rank == "4" and err.traceback == line
    # a launcher's own error line is not the reason
    assert first_rank_error("srun: error: node2: task 0: Exited with exit code 2\n") is None
    assert (
        first_rank_error("0: slurmstepd-node1: error: mpi/pmi2: invalid client request\n") is None
    )
    assert (
        first_rank_error("[3] usage: train.py\n[3] train.py: error: unrecognized x\n").rank == "3"
    )


def test_a_traceback_in_either_log_wins_over_an_error_line_in_the_other(tmp_path):
    from hpcbench.jobs.job import Job
    from hpcbench.jobs.schedulers.base import JobRecord, JobStatus

    out, err = tmp_path / "job.out", tmp_path / "job.err"
    out.write_text("\n".join("1: " + line for line in TB) + "\n")
    err.write_text("0: mpi4py: error: the other rank went away\nsrun: error: task 1 exited\n")
    job = Job(JobRecord("12", "slurm", tmp_path / "s.sh", out, err, tmp_path / "run"))
    report = job.failure_report(JobStatus("FAILED", exit_code=1))
    assert "first failing rank 1:" in report and report.count("ValueError: bad batch") == 1
    assert "the other rank went away" not in report
    assert first_rank_error(err.read_text(), one_line_errors=False) is None


def test_a_rank_srun_saw_killed_by_a_signal_is_named_before_the_errors_that_followed():
    text = "\n".join(
        [
            "0: epoch 1/2: loss 2.2",
            "srun: error: node2: task 1: Killed",
            "srun: launch/slurm: _step_signal: Terminating StepId=10.0",
            "0: Traceback (most recent call last):",
            '0:   File "x.py", line 1, in <module>',
            "0: RuntimeError: Connection closed by peer",
        ]
    )
    found = first_rank_error(text)
    assert found is not None and found.rank == "1"
    assert found.traceback == "srun: error: node2: task 1: Killed"


def test_a_traceback_before_srun_kills_the_others_stays_the_first_failure():
    text = "\n".join(
        [
            "1: Traceback (most recent call last):",
            '1:   File "x.py", line 1, in <module>',
            "1: RuntimeError: failure drill",
            "srun: error: node2: task 1: Exited with exit code 1",
            "srun: error: node1: task 0: Killed",
        ]
    )
    found = first_rank_error(text)
    assert found is not None and found.rank == "1" and "RuntimeError" in found.traceback


def test_ranks_aborted_after_another_ranks_error_do_not_hide_it():
    """MPI_Abort ends the other ranks with SIGABRT; srun may report that before the traceback."""
    text = "\n".join(
        [
            "srun: error: node1: task 0: Aborted",
            "1: Traceback (most recent call last):",
            '1:   File "x.py", line 1, in <module>',
            "1: RuntimeError: failure drill",
        ]
    )
    found = first_rank_error(text)
    assert found is not None and found.rank == "1" and "RuntimeError" in found.traceback


def test_a_programs_usage_error_under_torchrun_is_the_reason_not_torchruns_summary(tmp_path):
    """A mistyped trainer option under torchrun: line 31 says what is wrong
    (``python -m hpcbench.train: error: unrecognized arguments``), then torchrun prints its own
    ChildFailedError traceback and summary; the failure report leads with the line."""
    from pathlib import Path

    from hpcbench.jobs.job import Job
    from hpcbench.jobs.schedulers.base import JobRecord, JobStatus

    recorded = Path(__file__).parent / "recorded" / "logs" / "torchrun-usage-error.err"
    err, out = tmp_path / "job.err", tmp_path / "job.out"
    err.write_text(recorded.read_text())
    out.write_text("hpcbench: job local-1 runs python -m hpcbench.train --epcohs 3\n")
    job = Job(JobRecord("local-1", "local", tmp_path / "s.sh", out, err, tmp_path / "run"))
    report = job.failure_report(JobStatus("FAILED", exit_code=1))
    assert "[default0]:python -m hpcbench.train: error: unrecognized arguments: --epcohs 3" in (
        report
    ), report
    assert "ChildFailedError" not in report, report


DDP_WARNING = (
    "[default0]:/work/hpcbench/train/strategies/ddp.py:75: FutureWarning: `broadcast_buffers` is "
    "deprecated. Use `forward_sync_buffers` instead.\n"
    "[default0]:  self.model = nn.parallel.DistributedDataParallel(\n"
)


def test_python_warnings_never_push_a_jobs_errors_out_of_its_log_tail():
    """A deprecation warning every rank prints filled the stderr tail of a job: the tail shows
    the other lines, and says how many warning lines it left out."""
    from hpcbench.jobs.logs import error_tail, without_warnings

    text = "hpcbench: scheduler slurm\n" + DDP_WARNING * 4 + "[1]: RuntimeError: disk full\n"
    shown = error_tail(text, 30)
    assert shown.splitlines() == [
        "hpcbench: scheduler slurm",
        "[1]: RuntimeError: disk full",
        "(8 line(s) of Python warnings left out)",
    ]
    only = DDP_WARNING * 2
    assert without_warnings(only) == (only, 0)  # nothing else: the warnings are the tail
    assert error_tail("a\nb\nc\n", 2) == "b\nc"


def test_a_peers_mpi_error_before_the_launchers_report_of_a_killed_rank_names_the_killed_one():
    """A rank killed outright prints nothing; the pipeline's sink fails its next send to it with
    an MPI error, and that traceback can reach the log before srun says the rank was killed: the
    killed rank is the first failing one all the same (an ordinary error still wins when it came
    first, as the tests above hold)."""
    text = "\n".join(
        [
            "3: hpcbench predict: drill: rank 3 is killed (SIGKILL) at unit 3",
            "0: Traceback (most recent call last):",
            '0:   File "links.py", line 177, in take',
            "0:     self.comm.Isend([_CREDIT, self.mpi.INT64_T], source, TAG_CREDIT)",
            "0: mpi4py.MPI.Exception: Other MPI error, error stack:",
            "srun: error: node2: task 3: Killed",
        ]
    )
    err = first_rank_error(text)
    assert err.rank == "3" and "task 3: Killed" in err.traceback
    ordinary = text.replace("mpi4py.MPI.Exception: Other MPI error", "ValueError: bad input")
    assert first_rank_error(ordinary).rank == "0"


def test_tasks_srun_reports_killed_together_are_named_together_not_as_the_lowest():
    """srun reports the tasks of a node that ended alike on one line ("tasks 2-3: Killed") when
    their ends reach it together: task 3 killed, then task 2 killed by --kill-on-bad-exit. Which
    died first is not in the log, so the report names them all rather than the lowest; one task
    alone is still named."""
    from hpcbench.jobs.job import who_failed

    text = "\n".join(
        [
            "3: hpcbench predict: drill: rank 3 is killed (SIGKILL) at unit 3",
            "srun: error: node2: tasks 2-3: Killed",
            "srun: error: node1: tasks 0-1: Terminated",
        ]
    )
    err = first_rank_error(text)
    assert err.rank == "2-3" and "tasks 2-3: Killed" in err.traceback
    assert who_failed(err.rank) == "rank (one of 2-3)"
    listed = first_rank_error("srun: error: node3: tasks 4,6-7: Segmentation fault")
    assert listed.rank == "4,6-7" and who_failed(listed.rank) == "rank (one of 4,6-7)"
    assert first_rank_error("srun: error: node2: task 3: Killed").rank == "3"
    assert who_failed("3") == "rank 3" and who_failed(None) == "a rank"


def test_a_log_that_is_a_fifo_or_a_link_to_a_device_is_no_log(tmp_path):
    """A log pulled from a hostile run directory (or planted in a shared one) may be a FIFO
    (an open would wait for ever) or a link to /dev/zero (a read would never end): neither is
    read, and a large log is read from its end only."""
    import os

    from hpcbench.jobs.follow import LogFollower
    from hpcbench.jobs.job import LOG_READ_LIMIT, _read
    from hpcbench.jobs.schedulers.commands import tail

    fifo = tmp_path / "job.out"
    os.mkfifo(fifo)
    zero = tmp_path / "job.err"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        assert tail(path) == "" and _read(path) == ""
        assert LogFollower(path).new_lines() == []
    big = tmp_path / "big.out"
    with big.open("wb") as fh:
        fh.write(b"x" * (LOG_READ_LIMIT + 10) + b"\nlast line\n")
    assert len(_read(big)) == LOG_READ_LIMIT and _read(big).endswith("last line\n")
    assert tail(big, 1) == "last line"


def test_a_program_that_cannot_start_is_named_by_its_own_line_not_torchruns_traceback():
    """torchrun's own traceback (ChildFailedError) and its Root Cause table follow a script
    that is not there; the failure is Python's one line before them, as recorded here."""
    from pathlib import Path

    from hpcbench.jobs.logs import first_rank_error

    text = (
        Path(__file__).parent / "recorded" / "logs" / "torchrun-cannot-open-script.err"
    ).read_text()
    found = first_rank_error(text)
    assert found is not None and found.rank == "0", found
    assert "can't open file '/tmp/nope.py'" in found.traceback, found
    assert "ChildFailedError" not in found.traceback


@pytest.mark.parametrize(
    "line",
    [
        "[default1]:terminate called without an active exception",
        "[1] /usr/bin/python3: No module named mytrainer",
        "1: bash: line 1: mytrain: command not found",
        "slurmstepd: error: execve(): mytrain: No such file or directory",
        "[default0]:Fatal Python error: Segmentation fault",
    ],
)
def test_an_abort_or_a_program_that_never_ran_is_the_reason_shown(line):
    """Such a line is the reason even 25 lines of a launcher's traceback later: the report
    shows it instead of a tail it was pushed out of."""
    from hpcbench.jobs.logs import first_rank_error

    launcher = ["Traceback (most recent call last):"] + [
        f'  File "/x/torch/distributed/elastic/agent/server/api.py", line {n}, in run'
        for n in range(25)
    ] + ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "]  # fmt: skip
    found = first_rank_error("\n".join(["starting", line, *launcher]))
    assert found is not None and found.traceback == line, found
