"""The local scheduler: this machine plays every node (:mod:`.scheduler`), each job watched by
a bash supervisor (:mod:`.supervisor`), an array's tasks started by its dispatcher
(:mod:`.array`). It keeps no accounting."""

from hpcbench.jobs.schedulers.local import scheduler

__all__ = ["scheduler"]
