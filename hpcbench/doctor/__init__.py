"""``hpcbench doctor``: is this allocation healthy? Every rank placed where it should be, each
node's compute, the network and the filesystem measured, a bad node, link or rank named.

A job like any other (``python -m hpcbench.doctor`` on every rank; ``hpcbench doctor`` submits
it and waits; ``submit --preflight`` runs it before the program in the same allocation). Its
steps run in order, each bounded by its own timeout (:mod:`.meeting`: the ranks meet through
files in the run directory, so a rank that never arrives is named, never waited for):
``launch`` and ``placement`` (:mod:`.steps`), ``compute`` (:mod:`.compute`), ``communication``
(:mod:`.communication`; NCCL's transport read from its own log, :mod:`.nccl_log`) and
``filesystem`` (:mod:`.filesystem`). Its findings go to ``doctor.json`` and a short summary
(:mod:`.results`), compared with this cluster's own baseline (:mod:`.baseline`). The drills of
:mod:`.drills` slow a node, a link or a rank so that each finding is proved on CPUs.
"""
