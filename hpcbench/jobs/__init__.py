"""The submit side: a job spec (:mod:`.spec`, read by :mod:`.spec_load`), the launch lines
(:mod:`.launchers`, one module per launcher), one package per batch system (:mod:`.schedulers`),
the scheduler's accounting of a finished job (:mod:`.accounting`), the rendered script
(:mod:`.render`, checked by :mod:`.script_check`), and the submitted job (:mod:`.job`, remembered by
:mod:`.job_store`, its logs read by :mod:`.logs` and :mod:`.follow`). It runs on login nodes and
laptops: nothing here imports torch.
"""
