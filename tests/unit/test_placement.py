"""Placement: a node's topology read from sysfs, each rank's share of its cores near its GPU, the
warnings about a job's ranks, and the binding each launcher renders.

The GPU nodes are recorded: ``recorded/placement/topo-8gpu.txt`` (an 8 x H100 two-socket server)
and ``topo-4gpu.txt`` (a 4 x L40S server with two NUMA nodes), ``nvidia-smi topo -m`` as pasted
in public issue threads (each file names its thread). From each, a sysfs tree is built as Linux
lays it out: the NUMA nodes' CPU lists from the CPU Affinity column, one PCI device per GPU whose
``numa_node`` is -1 (firmware that publishes none, so the NUMA Affinity column is what is read),
and hardware threads paired as Linux numbers them (CPU i and i + cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.jobs.render import RenderError
from hpcbench.jobs.submission import load_spec
from hpcbench.placement.checks import placement_warnings
from hpcbench.placement.choice import parse_explicit, plan_node
from hpcbench.placement.rank_start import PlacementError, choose_cpus
from hpcbench.placement.topology import (
    Topology,
    TopologyError,
    format_cpulist,
    parse_cpulist,
    parse_topo_matrix,
    read_topology,
)

RECORDED = Path(__file__).parent / "recorded" / "placement"


def _matrix(name: str) -> str:
    text = (RECORDED / name).read_text()
    return text.split("\n\n", 1)[1]  # after the header that says where it comes from


def _sysfs(root: Path, matrix: str, threads_offset: int) -> Path:
    """A sysfs tree of the recorded node: NUMA nodes, online CPUs, siblings, GPUs."""
    gpus = parse_topo_matrix(matrix)
    numa: dict[int, set[int]] = {}
    for cpus, node in gpus.values():
        numa.setdefault(node, set()).update(cpus)
    system = root / "sys/devices/system"
    every = set().union(*numa.values())
    (system / "cpu").mkdir(parents=True)
    (system / "cpu/online").write_text(format_cpulist(every) + "\n")
    for node, cpus in numa.items():
        (system / f"node/node{node}").mkdir(parents=True)
        (system / f"node/node{node}/cpulist").write_text(format_cpulist(cpus) + "\n")
    for cpu in every:
        twin = cpu + threads_offset if cpu < threads_offset else cpu - threads_offset
        (system / f"cpu/cpu{cpu}/topology").mkdir(parents=True)
        (system / f"cpu/cpu{cpu}/topology/thread_siblings_list").write_text(
            format_cpulist({cpu, twin}) + "\n"
        )
    for index in sorted(gpus):
        device = root / f"sys/bus/pci/devices/0000:{0x18 + 0x10 * index:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text("0x030200\n")
        (device / "numa_node").write_text("-1\n")
    return root


@pytest.mark.parametrize(
    ("name", "gpus", "threads_offset", "numa_of_gpu"),
    [
        ("topo-8gpu.txt", 8, 112, [0, 0, 0, 0, 1, 1, 1, 1]),
        ("topo-4gpu.txt", 4, 192, [0, 0, 1, 1]),
    ],
)
def test_each_rank_gets_its_own_cores_on_its_gpus_numa_node(
    tmp_path: Path, name: str, gpus: int, threads_offset: int, numa_of_gpu: list[int]
) -> None:
    matrix = _matrix(name)
    topology = read_topology(_sysfs(tmp_path, matrix, threads_offset), topo_matrix=matrix)
    assert [g.numa_node for g in topology.gpus] == numa_of_gpu
    shares = plan_node(topology, topology.cpus, list(topology.gpus))
    assert len(shares) == gpus
    for gpu, share in zip(topology.gpus, shares, strict=True):
        assert share and topology.numa_of(share) == [gpu.numa_node]
        # whole cores: a core's two hardware threads stay together
        assert len(share) == 2 * topology.cores(share)
    for i, a in enumerate(shares):
        for b in shares[i + 1 :]:
            assert not a & b
    # the NUMA node's cores are split evenly between its GPUs' ranks
    assert len(shares[0]) == len(topology.numa_nodes[0]) // numa_of_gpu.count(0)
    # asked for 4 cores a rank: 4 cores (8 hardware threads) each, still near the GPU
    small = plan_node(topology, topology.cpus, list(topology.gpus), per_rank=4)
    assert all(topology.cores(s) == 4 for s in small)
    assert [topology.numa_of(s) for s in small] == [[n] for n in numa_of_gpu]


def test_a_gpu_whose_numa_node_has_no_allowed_core_takes_what_is_left(tmp_path: Path) -> None:
    matrix = _matrix("topo-4gpu.txt")
    topology = read_topology(_sysfs(tmp_path, matrix, 192), topo_matrix=matrix)
    allowed = frozenset(range(0, 8))  # a cgroup that gave the job 8 CPUs of NUMA node 0 only
    shares = plan_node(topology, allowed, list(topology.gpus))
    assert all(s <= allowed and s for s in shares)
    assert len(set().union(*shares)) == 8  # all four disjoint


def test_cpu_only_nodes_and_more_ranks_than_cores() -> None:
    topology = Topology(frozenset(range(4)), {0: frozenset({0, 1}), 1: frozenset({2, 3})})
    assert plan_node(topology, topology.cpus, [None, None]) == [{0, 1}, {2, 3}]
    assert plan_node(topology, topology.cpus, [None, None], per_rank=1) == [{0}, {1}]
    assert plan_node(topology, topology.cpus, [None] * 6) == [{0}, {1}, {2}, {3}, {0}, {1}]
    assert plan_node(topology, topology.cpus, [None], offset=3) == [{3, 0, 1, 2}]


def test_cpu_lists() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert parse_explicit("0-1; 2-3") == [{0, 1}, {2, 3}]
    for bad in ("0-x", "3-1", "0;;1", ""):
        with pytest.raises(TopologyError):
            parse_explicit(bad)


def _record(rank: int, cpus: str, **extra: object) -> dict:
    host = extra.pop("host", "n1")
    return {
        "rank": rank,
        "local_rank": rank,
        "host": host,
        "node": host,
        "cpus": cpus,
        "cores": len(parse_cpulist(cpus)),
        "numa_nodes": extra.pop("numa", [0]),
        "gpu": extra.pop("gpu", None),
        "threads": extra.pop("threads", 1),
        "os_threads": 3,
        "bound_by": extra.pop("bound_by", "hpcbench"),
    }


def test_warnings_name_the_ranks() -> None:
    healthy = [_record(0, "0-1"), _record(1, "2-3"), _record(2, "0-1", host="n2")]
    assert placement_warnings(healthy) == []  # same cores on another host: no overlap
    shared = placement_warnings([_record(0, "0-1"), _record(1, "1-2"), _record(2, "3")])
    assert len(shared) == 1 and "ranks 0,1 share cores (1 on n1)" in shared[0]
    far = placement_warnings(
        [_record(0, "0", gpu={"index": 0, "bus_id": "0000:18:00.0", "numa_node": 1})]
    )
    assert len(far) == 1 and "rank 0 " in far[0] and "its GPU 0 on NUMA 1" in far[0]
    threads = placement_warnings([_record(0, "0"), _record(3, "1", threads=4)])
    assert len(threads) == 1 and "rank 3 run" in threads[0] and "4 on 1" in threads[0]


def _topology(n: int) -> Topology:
    return Topology(frozenset(range(n)), {0: frozenset(range(n))})


def test_the_rank_start_takes_its_share_of_the_job_cpus() -> None:
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    allowed = frozenset(range(8))
    env = {**torchrun, "HPCBENCH_PLACEMENT": "auto", "HPCBENCH_CPUS_PER_RANK": "2"}
    assert choose_cpus(env, allowed, _topology(8)) == {2, 3}
    assert choose_cpus({**env, "HPCBENCH_PLACEMENT": "none"}, allowed, _topology(8)) is None
    assert choose_cpus({**env, "HPCBENCH_PLACEMENT": "0-3;6"}, allowed, _topology(8)) == {6}
    with pytest.raises(PlacementError, match="CPU 9 of local rank 1 is not among"):
        choose_cpus({**env, "HPCBENCH_PLACEMENT": "0;9"}, allowed, _topology(8))
    with pytest.raises(PlacementError, match="names 1 CPU list"):
        choose_cpus({**env, "HPCBENCH_PLACEMENT": "0"}, allowed, _topology(8))
    # the local scheduler's emulated nodes share one machine: ranks counted across them
    emulated = {
        "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "HPCBENCH_SCHEDULER": "local", "HPCBENCH_CPUS_PER_RANK": "1",
    }  # fmt: skip
    assert choose_cpus(emulated, frozenset({0, 1}), _topology(2)) == {1}
    # CPU-only nodes sharing one machine (several slurmd on a host): each node's ranks start a
    # node's worth of cores further; a node its ranks fill gets the same shares whatever its index
    second = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
              "GROUP_RANK": "1", "HPCBENCH_CPUS_PER_RANK": "1"}  # fmt: skip
    assert choose_cpus(second, frozenset({0, 1}), _topology(2)) == {1}
    full = {**env, "GROUP_RANK": "3", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "4"}
    shares = [choose_cpus({**full, "LOCAL_RANK": str(i)}, allowed, _topology(8)) for i in range(4)]
    assert shares == [{0, 1}, {2, 3}, {4, 5}, {6, 7}]
    # more ranks than cores: left unbound (pinned, they could only take turns)
    many = {**torchrun, "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "4"}
    assert choose_cpus(many, frozenset({0, 1}), _topology(2)) is None


def _script(**fields: object) -> str:
    from hpcbench.jobs.render import render_script

    spec = load_spec(None, **fields)
    return render_script(spec, str(fields.get("scheduler", "slurm")))


def test_each_launcher_binds_its_own_way() -> None:
    srun = _script(launcher="srun", tasks_per_node=4, gpus_per_node=4)
    assert (
        "--cpu-bind=cores" in srun
        and "--gpu-bind=closest" in srun
        and "HPCBENCH_BOUND_BY=srun" in srun
    )
    masks = _script(launcher="srun", tasks_per_node=2, placement="0-1;2-3")
    assert "--cpu-bind=mask_cpu:0x3,0xc" in masks
    mpi = _script(launcher="mpiexec", tasks_per_node=2, cpus_per_task=3)
    assert '-bind-to "core:3"' in mpi and '--map-by "slot:PE=3"' in mpi
    assert '"${mpi_bind[@]}"' in mpi
    gpu_torchrun = _script(launcher="torchrun", tasks_per_node=4, gpus_per_node=4)
    assert "numa_binding=(--numa-binding=exclusive)" in gpu_torchrun
    cpu_torchrun = _script(launcher="torchrun", tasks_per_node=2)
    assert "rank_start=(python -m hpcbench.placement.rank_start --)" in cpu_torchrun
    assert "numa_binding=(" not in cpu_torchrun
    local = _script(launcher="mpiexec", tasks_per_node=2, scheduler="local")
    assert "rank_start=(python -m hpcbench.placement.rank_start --)" in local
    assert "mpi_bind=(" not in local  # emulated nodes share the machine: the rank start binds
    none = _script(launcher="srun", placement="none")
    assert "--cpu-bind" not in none and "HPCBENCH_BOUND_BY=none" in none
    # a user's program: its python is asked for hpcbench first, else the ranks run unbound
    own = _script(launcher="torchrun", script="train.py")
    assert "import hpcbench.placement.rank_start" in own


def test_bad_placements_are_one_line_naming_the_field() -> None:
    from hpcbench.jobs.spec import SpecError

    with pytest.raises(SpecError, match=r"launcher\.placement.*not a CPU list"):
        load_spec(None, placement="0-x")
    with pytest.raises(RenderError, match=r"launcher\.placement: 1 CPU list\(s\) for 2 rank"):
        _script(launcher="srun", tasks_per_node=2, placement="0-3")


def test_torchrun_binds_by_numa_only_where_a_gpu_device_is_there() -> None:
    """torch's ``--numa-binding`` raises "No accelerator available" on a node whose GPUs the
    batch system lists but that has no GPU device (a test cluster's declared GPUs, a driver
    missing): there the rank start binds instead. Run with this machine's python and devices."""
    import glob
    import os
    import subprocess
    import sys

    from hpcbench.jobs.launchers.placement import numa_binding_lines

    spec = load_spec(None, launcher="torchrun", tasks_per_node=2, gpus_per_node=2)
    spec.program.python = sys.executable
    script = "\n".join(numa_binding_lines(spec)) + '\necho "${numa_binding[*]}|${rank_start[*]}"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    numa, start = out.stdout.strip().split("|")
    has_torch_binding = os.path.exists(
        os.path.join(os.path.dirname(__import__("torch").__file__), "numa", "binding.py")
    )
    has_gpu = bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))
    if has_torch_binding and has_gpu:
        assert numa == "--numa-binding=exclusive" and start == ""
    else:
        assert numa == "" and start.endswith("-m hpcbench.placement.rank_start --")


def test_a_job_on_a_shared_machine_starts_at_the_cores_the_fewest_pinned_processes_hold(
    tmp_path: Path,
) -> None:
    """Two single-rank local jobs both bound to the first core took turns on it (1.4 times as
    long as unbound) while the other idled: the script asks where to start, once."""
    from hpcbench.placement.least_pinned import least_pinned_turn, pinned_counts

    def process(pid: int, allowed: str, user: bool = True) -> None:
        (tmp_path / str(pid)).mkdir()
        memory = "VmSize:\t  1024 kB\n" if user else ""  # a kernel thread has none
        (tmp_path / str(pid) / "status").write_text(
            f"Name:\tx\n{memory}Cpus_allowed_list:\t{allowed}\n"
        )

    process(10, "0")  # another job's rank on CPU 0
    process(11, "0-3")  # unbound: counts nowhere
    process(12, "1", user=False)  # CPU 1's own kernel thread
    process(13, "2-3")  # a rank on CPUs 2 and 3
    (tmp_path / "14").mkdir()  # a process that ended between the glob and the read
    counts = pinned_counts(tmp_path, frozenset(range(4)))
    assert counts == {0: 1, 1: 0, 2: 1, 3: 1}
    cores = [(0,), (1,), (2,), (3,)]
    assert least_pinned_turn(cores, counts, tie=0) == 1
    assert least_pinned_turn(cores, counts, tie=2) == 1  # the least pinned, whatever the tie
    assert least_pinned_turn(cores, dict.fromkeys(range(4), 0), tie=3) == 3  # all equal: the tie
