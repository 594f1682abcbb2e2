"""What the batch system itself recorded of a finished job: queue wait, elapsed time, CPU time,
memory high-water marks, the nodes and, where the cluster gathers it, energy.

Each batch system's package holds its reader (an
:class:`~hpcbench.jobs.accounting.records.AccountingReader`), which asks the scheduler's
accounting once and gives the same layout (:mod:`.records`): ``job`` (times, states, CPU and
memory of the whole job) and ``steps`` (job steps, where the scheduler keeps them); a figure the
scheduler does not give is None, and where there is no accounting at all ``available`` is false
and ``reason`` says why in one line. Nothing here fails a job or a report.

- :mod:`.records`: the layout, the shared helpers of the readers, keeping a record in its run
  directory as ``accounting.json``;
- :mod:`.fields`: parsing the figures the schedulers print (times, sizes, TRES);
- :mod:`.reading`: the reader of a job's scheduler, found by name, and a finished job's record,
  kept in its run directory and never asked for again once it holds the job's end;
- :mod:`.text`: a record in a few lines for ``status --verbose`` and ``submit --wait``.
"""
