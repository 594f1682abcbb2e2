"""The dispatcher of a local array job: one process per array that starts each task's supervisor
as one of the array's ``max_parallel`` slots frees up, as a cluster scheduler does.

``hpcbench submit`` records the array and its tasks (each task pending, no process yet) before
it starts this process, so a submission is either whole or nothing; the dispatcher then starts
the tasks one by one, recording each as it starts. A task that cannot start (its log exists by
then, the process limit is reached) fails alone with the reason in its record; a task cancelled
before its start never starts (the dispatcher checks its cancel mark before and after starting
it). The dispatcher outlives its tasks: while it runs, a pending task is waiting for a slot.

Run as ``python -m hpcbench.jobs.schedulers.local.array STATE_DIR ARRAY_ID``; no torch here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hpcbench.jobs.schedulers.base import SchedulerError
from hpcbench.jobs.schedulers.local.scheduler import LocalScheduler
from hpcbench.jobs.schedulers.local.starting import write_task_failure

#: the exit status of a task that could not be started (as a shell's "command not found")
NOT_STARTED = 127


def dispatch(state_dir: Path, array_id: str) -> int:
    sched = LocalScheduler(state_dir)
    record = sched._load(array_id)
    if record is None or not isinstance(record.get("plan"), dict):
        print(f"hpcbench: local array {array_id}: no plan in its record", file=sys.stderr)
        return 1
    plan = record["plan"]
    tasks = [str(t) for t in record["array"]]
    parallel = max(1, int(plan["max_parallel"]))
    running: set[int] = set()  # the PIDs of the supervisors started and not yet reaped

    def reap(block: bool) -> None:
        while running:
            try:
                pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                running.clear()
                return
            if pid == 0:
                return
            running.discard(pid)
            block = False

    for index, task in enumerate(tasks, 1):
        while len(running) >= parallel:
            reap(block=True)
        if sched._cancel_mark(task).exists():
            continue
        out, err = (Path(p) for p in plan["logs"][index - 1])
        try:
            proc = sched._launch(
                task, Path(plan["script"]), Path(record["cwd"]), (out, err), [], "task",
                {"HPCBENCH_ARRAY_INDEX": str(index)},
            )  # fmt: skip
        except SchedulerError as error:
            write_task_failure(sched, task, str(error), NOT_STARTED)
            continue
        sched._children.remove(proc)  # reaped here alone (a poll elsewhere would steal its end)
        running.add(proc.pid)
        if sched._cancel_mark(task).exists():  # cancelled while it was being started
            task_record = sched._load(task)
            if task_record is not None and task_record.get("pid") is not None:
                sched._terminate(task, task_record)
        reap(block=False)
    while running:  # the dispatcher outlives its tasks (a job after the array watches it)
        reap(block=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m hpcbench.jobs.schedulers.local.array STATE_DIR ARRAY_ID",
            file=sys.stderr,
        )
        return 2
    return dispatch(Path(args[0]), args[1])


if __name__ == "__main__":
    sys.exit(main())
