"""The trainer: ``python -m hpcbench.train``, one process per rank inside the allocation.

Options (:mod:`.config`, read by :mod:`.command_line` and :mod:`.config_file`), where this rank
runs (:mod:`.runtime`, on :mod:`hpcbench.this_rank`), the data it reads (:mod:`.data`), the models
(:mod:`.models`), the strategies that keep the replicas one model (:mod:`.strategies`), the run
itself (:mod:`.start`: set-up and the run's state; :mod:`.loop`: the loop), its checkpoints
(:mod:`.checkpoint_file`: the format; :mod:`.checkpointing`: save and resume), and what it writes
(:mod:`.documents`). The submit side imports it only inside the function a submitit task runs
(:func:`hpcbench.jobs.submitit_jobs.train_task`), so login nodes never import torch; nothing in
:mod:`hpcbench.data`, :mod:`hpcbench.data_prep` or :mod:`hpcbench.jobs.schedulers` imports it.
"""
