"""Where each rank runs: the node's topology, the cores each rank is bound to, and the record of
where it ran.

``topology.py`` reads a node's CPUs, NUMA nodes and GPUs from sysfs (``nvidia-smi topo -m``'s
NUMA Affinity where sysfs says nothing); ``choice.py`` gives each rank of a node its own share of
the cores, on its GPU's NUMA node; ``rank_start.py`` is the rank start that binds a rank before its
program starts a thread (``python -m hpcbench.placement.rank_start -- PROGRAM…``), for launchers
that bind nothing themselves; ``record.py`` is where a rank ran (host, cores, NUMA node, GPU,
threads) and ``checks.py`` the warnings about the records of a job's ranks. Pure Python: no
torch, no numpy.
"""
