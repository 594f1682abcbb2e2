"""The energy sampler's parts: RAPL counters, NVML devices, phase energies, idle power.

Fakes are used here because this machine has neither RAPL powercap files nor an NVIDIA GPU: a
powercap tree built in tmp_path (same layout and files as /sys/class/powercap) and a fake
``pynvml`` module put into ``sys.modules`` (the calls hpcbench makes, with scripted answers).
The sampler is driven by explicit ``sample(now)`` calls, so every expected joule is exact.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from hpcbench.energy import nvml as nvml_mod
from hpcbench.energy import rapl
from hpcbench.energy.devices import Device, Unavailable
from hpcbench.energy.sampler import (
    Sampler,
    energy_document,
    idle_devices,
    interpolate,
    phase_energies,
)
from tests.conftest import need_module


# ---- a fake powercap tree ---------------------------------------------------------------------
def domain(directory: Path, name: str, energy: int, max_range: int) -> Path:
    directory.mkdir(parents=True)
    (directory / "name").write_text(name + "\n")
    (directory / "energy_uj").write_text(f"{energy}\n")
    (directory / "max_energy_range_uj").write_text(f"{max_range}\n")
    return directory


def set_counter(directory: Path, energy: int) -> None:
    (directory / "energy_uj").write_text(f"{energy}\n")


@pytest.fixture
def powercap(tmp_path):
    root = tmp_path / "powercap"
    pkg0 = domain(root / "intel-rapl:0", "package-0", 900, 1000)
    domain(pkg0 / "intel-rapl:0:0", "core", 1, 1000)  # part of the package: not read
    dram0 = domain(pkg0 / "intel-rapl:0:1", "dram", 10, 500)
    pkg1 = domain(root / "intel-rapl:1", "package-1", 0, 1000)
    domain(root / "intel-rapl:2", "psys", 0, 1000)  # the platform: overlaps the packages
    return root, pkg0, dram0, pkg1


def test_rapl_finds_packages_and_their_dram_only(powercap):
    root = powercap[0]
    found = rapl.discover(root)
    assert [(d.name, d.kind, d.method) for d in found] == [
        ("package-0", "cpu", "rapl"),
        ("dram-0", "dram", "rapl"),
        ("package-1", "cpu", "rapl"),
    ]


def test_rapl_counter_wraps_around_max_energy_range(powercap):
    root, pkg0, dram0, _ = powercap
    sampler = Sampler(rapl.discover(root), 0.5, host="n1")
    sampler.sample(now=10.0)  # package 900, dram 10
    set_counter(pkg0, 950)
    set_counter(dram0, 400)
    sampler.sample(now=11.0)
    set_counter(pkg0, 100)  # wrapped: 950 -> 1000 = 0 -> 100 is 150 µJ
    set_counter(dram0, 20)  # wrapped at 500: 120 µJ
    sampler.sample(now=12.0)
    set_counter(pkg0, 300)
    sampler.sample(now=13.0)
    assert sampler.samples["package-0"] == [
        [10.0, 0.0],
        [11.0, 50e-6],
        [12.0, 200e-6],
        [13.0, 400e-6],
    ]
    assert sampler.samples["dram-0"] == [
        [10.0, 0.0],
        [11.0, 390e-6],
        [12.0, 510e-6],
        [13.0, 510e-6],
    ]
    assert sampler.samples["package-1"] == [[10.0, 0.0], [11.0, 0.0], [12.0, 0.0], [13.0, 0.0]]


def test_rapl_unreadable_counter_is_unavailable_with_the_reason(powercap, monkeypatch):
    root, pkg0, dram0, _ = powercap
    # Tests run as root, which reads a file whatever its mode: an energy_uj that is a directory
    # stands for one that cannot be read, and a patched read raises what a non-root user gets.
    (pkg0 / "intel-rapl:0:1" / "energy_uj").unlink()
    (pkg0 / "intel-rapl:0:1" / "energy_uj").mkdir()
    real_read = Path.read_text

    def read_text(self, *args, **kwargs):
        if self == root / "intel-rapl:1" / "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    found = {d.name: d for d in rapl.discover(root)}
    assert isinstance(found["package-0"], Device)
    dram, pkg1 = found["dram-0"], found["package-1"]
    assert isinstance(dram, Unavailable) and dram.method == "unavailable"
    assert dram.reason.startswith(f"cannot read {dram0 / 'energy_uj'}")
    assert isinstance(pkg1, Unavailable) and "permission denied" in pkg1.reason
    assert "CVE-2020-8694" in pkg1.reason
    record = {d["name"]: d for d in Sampler(list(found.values()), host="n").devices()}
    assert record["package-1"]["samples"] == [] and record["package-1"]["total_j"] is None


def test_rapl_without_a_powercap_tree_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(rapl.ROOT_VARIABLE, str(tmp_path / "absent"))
    (only,) = rapl.discover()
    assert only.method == "unavailable"
    assert only.reason == f"no RAPL powercap readable ({tmp_path / 'absent'} absent)"
    (tmp_path / "empty").mkdir()
    (only,) = rapl.discover(tmp_path / "empty")
    assert "no RAPL package domains" in only.reason


# ---- a fake pynvml ------------------------------------------------------------------------------
class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_pynvml(gpus: list[dict]) -> types.ModuleType:
    """A pynvml with the calls hpcbench makes. Each GPU: uuid, mig (bool), energy (list of
    millijoule answers, in order, the last repeated; None: NOT_SUPPORTED), power (list of milliwatt answers), migs
    (MIG UUIDs on it)."""
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    m.NVML_ERROR_NOT_SUPPORTED = 3
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.shutdowns = 0

    def nvmlShutdown():
        m.shutdowns += 1

    def answer(gpu, key):
        if gpu[key] is None:
            raise FakeNVMLError(3)
        return gpu[key].pop(0) if len(gpu[key]) > 1 else gpu[key][0]  # the last one stays

    m.nvmlInit = lambda: None
    m.nvmlShutdown = nvmlShutdown
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    m.nvmlDeviceGetUUID = lambda h: gpus[h[1]]["uuid"]
    m.nvmlDeviceGetMigMode = lambda h: [1 if gpus[h[1]].get("mig") else 0, 0]
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: answer(gpus[h[1]], "energy")
    m.nvmlDeviceGetPowerUsage = lambda h: answer(gpus[h[1]], "power")

    def by_uuid(uuid):
        for i, g in enumerate(gpus):
            if uuid in g.get("migs", ()):
                return ("mig", i)
        raise FakeNVMLError(13)

    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = lambda h: ("gpu", h[1])
    m.nvmlDeviceGetIndex = lambda h: h[1]
    return m


def gpu(uuid: str, energy=None, power=None, mig=False, migs=()) -> dict:
    return {"uuid": uuid, "energy": energy, "power": power, "mig": mig, "migs": list(migs)}


def test_nvml_counter_then_power_integration_where_the_counter_is_not_supported(monkeypatch):
    fake = fake_pynvml(
        [
            # the first answer is the probe in discover()
            gpu("GPU-aaa", energy=[7, 1000, 1500, 4000, 4000]),
            gpu("GPU-bbb", power=[1, 100_000, 200_000, 200_000, 50_000]),
        ]
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sources, started = nvml_mod.discover(None, range(2))
    assert [(s.name, s.method, s.used) for s in sources] == [
        ("gpu0", "nvml_counter", True),
        ("gpu1", "nvml_power", True),
    ]
    sampler = Sampler(sources, 0.5, host="n", nvml_module=started)
    for now in (0.0, 1.0, 3.0, 3.5):
        sampler.sample(now)
    assert sampler.samples["gpu0"] == [[0.0, 0.0], [1.0, 0.5], [3.0, 3.0], [3.5, 3.0]]
    # trapezoids: (100+200)/2 W x 1 s = 150 J; 200 W x 2 s = 400 J; (200+50)/2 W x 0.5 s = 62.5 J
    assert sampler.samples["gpu1"] == [[0.0, 0.0], [1.0, 150.0], [3.0, 550.0], [3.5, 612.5]]


def test_cuda_visible_devices_by_index_and_uuid_marks_the_used_gpus(monkeypatch):
    gpus = [gpu(f"GPU-{c * 3}", energy=[0] * 3) for c in "abcd"]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus))
    # Ranks on cuda:0 and cuda:1 of "GPU-ccc,GPU-a" (a unique prefix) compute on gpu2 and gpu0.
    sources, _ = nvml_mod.discover("GPU-ccc,GPU-a", range(2))
    assert {s.name for s in sources if s.used} == {"gpu2", "gpu0"}
    assert len(sources) == 4  # every GPU of the node is listed, used or not
    sources, _ = nvml_mod.discover("3,1", range(1))
    assert {s.name for s in sources if s.used} == {"gpu3"}
    # As CUDA does, the list ends at the first entry naming no GPU.
    sources, _ = nvml_mod.discover("1,GPU-zzz,2", range(3))
    assert {s.name for s in sources if s.used} == {"gpu1"}
    sources, _ = nvml_mod.discover("", range(1))
    assert not any(s.used for s in sources)


def test_mig_is_unavailable_with_reason_mig(monkeypatch):
    gpus = [
        gpu("GPU-aaa", energy=[0]),
        gpu("GPU-bbb", energy=[0], mig=True, migs=["MIG-1111"]),
        gpu("GPU-ccc", energy=[0]),
    ]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus))
    sources, _ = nvml_mod.discover("MIG-1111", range(1))
    by_name = {s.name: s for s in sources}
    assert by_name["gpu1"].method == "unavailable" and by_name["gpu1"].reason == "MIG"
    assert by_name["gpu1"].used and not by_name["gpu0"].used
    assert by_name["gpu0"].method == "nvml_counter"
    # A MIG UUID NVML cannot resolve: still unavailable for MIG, not a crash.
    sources, _ = nvml_mod.discover("MIG-9999", range(1))
    assert [(s.name, s.reason, s.used) for s in sources if s.reason == "MIG"][-1] == (
        "mig0",
        "MIG",
        True,
    )


def test_without_pynvml_or_a_driver_gpus_are_unavailable_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    ((only,), started) = nvml_mod.discover(None, range(1))
    assert only.method == "unavailable" and only.reason == nvml_mod.INSTALL_HINT
    assert started is None
    broken = fake_pynvml([])

    def no_driver():
        raise FakeNVMLError(9)

    broken.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    ((only,), _) = nvml_mod.discover(None, range(1))
    assert only.reason == "NVML cannot start: NVML error 9"


def test_gpus_the_run_computes_on_are_used_even_when_nvml_cannot_measure_them(monkeypatch):
    # The used GPU's energy is unknown, so the run's is: never the CPU's joules alone.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    ((only,), _) = nvml_mod.discover("0", range(1))
    assert only.used and only.method == "unavailable"
    ((only,), _) = nvml_mod.discover(None, [])  # a CPU run: whether idle GPUs exist is unknown
    assert not only.used


class NVMLError_LibraryNotFound(Exception):  # noqa: N801 - pynvml's own name for it
    pass


def test_a_node_without_the_nvidia_driver_has_no_gpu_to_count(monkeypatch):
    fake = fake_pynvml([])

    def no_library():
        raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    fake.nvmlInit = no_library
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml_mod.discover(None, []) == ([], None)  # CPU run: nothing to count, nothing unknown
    ((only,), _) = nvml_mod.discover("0", range(1))  # a GPU run on it: unknown, and said so
    assert only.used and "Library Not Found" in only.reason
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))  # NVML runs and sees none
    assert nvml_mod.discover(None, [])[0] == []


# ---- from samples to joules ----------------------------------------------------------------------
SAMPLES = [[0.0, 0.0], [1.0, 10.0], [2.0, 30.0], [4.0, 30.0]]


def test_interpolation_at_window_bounds():
    assert interpolate(SAMPLES, 0.5) == 5.0
    assert interpolate(SAMPLES, 1.5) == 20.0
    assert interpolate(SAMPLES, 2.0) == 30.0
    assert interpolate(SAMPLES, 4.0) == 30.0
    assert interpolate(SAMPLES, -0.1) is None and interpolate(SAMPLES, 4.1) is None
    windows = [
        {"phase": "setup", "start": 0.5, "end": 1.5},
        {"phase": "train", "start": 1.5, "end": 2.0},
        {"phase": "train", "start": 2.0, "end": 3.0},
        {"phase": "test", "start": 3.0, "end": 5.0},  # beyond the last reading
    ]
    assert phase_energies(SAMPLES, windows) == {
        "setup": 15.0,
        "train": 10.0,
        "val": None,  # no window: not measured, not 0
        "test": None,
    }


class Scripted(Device):
    """A device answering a list of cumulative joules (an OSError for None)."""

    method = "rapl"

    def __init__(self, name: str, answers: list) -> None:
        super().__init__(name, "cpu", used=True)
        self.answers = answers

    def read(self, now: float) -> float:
        value = self.answers.pop(0)
        if value is None:
            raise OSError(5, "Input/output error")
        return value


def test_records_of_a_node_and_the_energy_document():
    sampler = Sampler(
        [
            Scripted("package-0", [0.0, 10.0, 30.0, 30.0]),
            Scripted("dram-0", [None, None, None, None]),
            Unavailable("gpu", "gpu", "NVML cannot start: no driver"),
        ],
        0.5,
        host="node1",
    )
    for now in (0.0, 1.0, 2.0, 4.0):
        sampler.sample(now)
    windows = [
        {"phase": "setup", "start": 0.5, "end": 1.5},
        {"phase": "train", "start": 1.5, "end": 2.0},
        {"phase": "val", "start": 2.0, "end": 3.0},
        {"phase": "test", "start": 3.0, "end": 3.5},
    ]
    duplicate = {"host": "node1", "devices": []}  # a second sampler on the same host
    doc = energy_document([sampler.node(), duplicate], 0.5, windows)
    assert doc["format"] == "hpcbench-energy/1" and doc["interval_s"] == 0.5
    (node,) = doc["nodes"]
    pkg, dram, gpu0 = node["devices"]
    assert pkg["method"] == "rapl" and pkg["reason"] == "" and pkg["used"] is True
    assert pkg["phases"] == {"setup": 15.0, "train": 10.0, "val": 0.0, "test": 0.0}
    assert pkg["total_j"] == 25.0  # from 0.5 s to 3.5 s
    assert pkg["samples"] == SAMPLES and pkg["interval_s"] == 0.5
    for device in (dram, gpu0):
        assert device["method"] == "unavailable" and device["reason"]
        assert device["samples"] == [] and device["total_j"] is None
        assert set(device["phases"].values()) == {None}
    assert "Input/output error" in dram["reason"]


def test_idle_watts_from_the_readings():
    sampler = Sampler(
        [Scripted("package-0", [0.0, 40.0, 100.0]), Unavailable("gpu", "gpu", "no NVML")],
        host="n",
    )
    for now in (10.0, 11.0, 14.0):
        sampler.sample(now)
    assert idle_devices(sampler) == [
        {
            "host": "n",
            "name": "package-0",
            "kind": "cpu",
            "method": "rapl",
            "reason": "",
            "watts": 25.0,
        },
        {
            "host": "n",
            "name": "gpu",
            "kind": "gpu",
            "method": "unavailable",
            "reason": "no NVML",
            "watts": None,
        },
    ]


def test_the_thread_reads_at_start_and_stop_and_releases_nvml(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_pynvml([gpu("GPU-a", energy=[0] + list(range(0, 10**6, 5)))])
    )
    sources, started = nvml_mod.discover(None, range(1))
    sampler = Sampler(sources, 0.01, host="n", nvml_module=started)
    sampler.start()
    sampler.stop()
    sampler.stop()  # twice is harmless
    assert len(sampler.samples["gpu0"]) >= 2
    times = [t for t, _ in sampler.samples["gpu0"]]
    assert times == sorted(times)
    assert started.shutdowns == 1


# ---- the trainer's side -----------------------------------------------------------------------
def test_energy_options_are_checked():
    from hpcbench.train.command_line import configure
    from hpcbench.train.config import ConfigError

    assert configure({}).output.energy == "off" and configure({}).output.energy_interval == 0.5
    assert configure({"energy": "on", "energy_interval": 0.01}).output.energy_interval == 0.01
    with pytest.raises(
        ConfigError, match=r"--energy-interval must be a finite number in \[0.01, 60\], got 0.001"
    ):
        configure({"energy_interval": 0.001})
    with pytest.raises(ConfigError, match="--energy must be one of off, on"):
        configure({"energy": "yes"})


def test_only_local_rank_0_of_a_node_samples(monkeypatch, tmp_path):
    """Four ranks on one node: one sampler, on local rank 0; the others only wait."""
    torch = need_module("torch")  # the trainer's side needs it
    from hpcbench.this_rank import LaunchInfo
    from hpcbench.train.command_line import configure
    from hpcbench.train.energy import RunEnergy
    from hpcbench.train.runtime import Runtime

    monkeypatch.setenv(rapl.ROOT_VARIABLE, str(tmp_path / "absent"))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    config = configure({"energy": "on", "energy_interval": 0.01})
    barriers = []
    strategy = types.SimpleNamespace(name="mpi", barrier=lambda: barriers.append(1))
    started = []
    for rank in range(4):
        launch = LaunchInfo(rank, 4, rank, 4, 0, "mpich", "node1")
        runtime = Runtime(launch, torch.device("cpu"), 1, "gloo")
        energy = RunEnergy.start(config, runtime, strategy)
        started.append(energy.sampler is not None)
        energy.abandon()
    assert started == [True, False, False, False] and len(barriers) == 4
    off = configure({})
    launch = LaunchInfo(0, 1, 0, 1, 0, "single", "node1")
    assert RunEnergy.start(off, Runtime(launch, torch.device("cpu"), 1, "gloo"), strategy) is None
