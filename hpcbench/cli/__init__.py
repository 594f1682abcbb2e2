"""The ``hpcbench`` command line (:mod:`.main`), one module per family of commands: :mod:`.jobs`
(render, submit, status, logs, cancel, with the job flags of :mod:`.options`), :mod:`.prep`,
:mod:`.bench` (bench, report, compare, predict-scaling), :mod:`.history` (history, check),
:mod:`.sweep` and :mod:`.profile`."""

from hpcbench.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
