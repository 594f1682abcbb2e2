"""The scaling model's arithmetic: the all-reduce fits recover known latencies and bandwidths,
the exposed communication follows the buckets, and the step adds up."""

from __future__ import annotations

import json
import math

import pytest

from hpcbench.scaling.model import (
    Compute,
    LinkFit,
    allreduce_s,
    bucket_sizes,
    exposed_comm_s,
    fit_allreduce,
    fit_compute,
    predict,
)

ALPHA, BETA = 5e-6, 1 / 8e9  # 5 us, 8 GB/s


def ring(n, p):
    return 2 * (p - 1) * ALPHA + 2 * (p - 1) / p * n * BETA


def tree(n, p):
    return math.ceil(math.log2(p)) * (ALPHA + n * BETA)


def calibration_record(cores: int, allreduce: dict) -> dict:
    """A calibration as ``python -m hpcbench.scaling`` writes it: 4 ranks on one CPU node."""
    return {
        "format": 1,
        "model": "resnet18",
        "input_shape": [1, 32, 32],
        "classes": 9,
        "parameter_bytes": [4 << 20, 30 << 20, 2 << 20],
        "machine": {
            "nodes": 1,
            "ranks": 4,
            "ranks_per_node": 4,
            "cores_per_node": cores,
            "threads_per_rank": 1,
            "device": "cpu",
        },
        "compute": {"batches": [8, 32], "step_s": [0.05, 0.17], "backward_share": 0.6},
        "allreduce": allreduce,
    }


def test_the_fits_recover_the_latency_and_bandwidth_of_a_library_that_switches_algorithms():
    sizes = [4, 1024, 65536, 1 << 20, 16 << 20, 64 << 20]
    samples = [(p, n, min(ring(n, p), tree(n, p))) for p in (2, 3, 4, 8) for n in sizes]
    fits = fit_allreduce(samples)
    for p, n, t in samples:
        assert allreduce_s(fits, n, p) == pytest.approx(t, rel=0.05)
    assert fits.beta == pytest.approx(BETA, rel=0.05) and fits.alpha == pytest.approx(
        ALPHA, rel=0.05
    )
    assert 0 < fits.ring_points < len(samples) and fits.rms_relative_error < 0.01
    assert allreduce_s(fits, 1 << 30, 1) == 0.0


def test_fewer_than_two_timings_cannot_be_fitted():
    with pytest.raises(ValueError, match="fewer than two"):
        fit_allreduce([(2, 4, 1e-5)])


def test_buckets_are_filled_in_reverse_parameter_order_first_small_then_capped():
    mib = 1 << 20
    params = [4 * mib, 30 * mib, 2 * mib, mib // 2, mib // 2]
    # reversed: 0.5, 0.5 -> 1 MiB (first cap), 2 -> 2 (>= 25? no), +30 -> 32, then 4
    assert bucket_sizes(params, mib, 25 * mib) == [mib, 32 * mib, 4 * mib]


FLAT = LinkFit(0.0, 1e-9, 10, 0.0, 10)  # 1 GB/s, no latency


def test_without_overlap_every_all_reduce_is_exposed_and_with_it_only_what_outlasts_backward():
    buckets = [1e6, 1e6, 1e6]  # 1 ms each over 2 ranks (ring: 2·(1/2)·n·β)
    assert exposed_comm_s(FLAT, buckets, 2, backward_s=1.0, overlap=False) == pytest.approx(3e-3)
    # a long backward hides all but the last bucket, which is ready only when backward ends
    assert exposed_comm_s(FLAT, buckets, 2, backward_s=1.0) == pytest.approx(1e-3)
    # a backward shorter than the communication leaves the rest exposed
    assert exposed_comm_s(FLAT, buckets, 2, backward_s=1e-3) == pytest.approx(3e-3 - 2e-3 / 3)
    assert exposed_comm_s(FLAT, buckets, 1, backward_s=1.0) == 0.0


def test_a_step_is_compute_shared_among_cores_plus_exposed_communication():
    compute = Compute(base=0.0, per_sample=0.01, backward_share=0.5, cores=2, threads=1)
    free = LinkFit(0.0, 0.0, 10, 0.0, 10)
    two = predict(compute, free, [1e6], 2, 2, batch_per_rank=32)
    assert two.step_s == pytest.approx(0.32) and two.efficiency == pytest.approx(1.0)
    four = predict(compute, free, [1e6], 4, 4, batch_per_rank=32)  # 4 ranks on 2 cores
    assert four.compute_s == pytest.approx(0.64) and four.efficiency == pytest.approx(0.5)
    spread = predict(compute, free, [1e6], 4, 2, batch_per_rank=32)  # 2 nodes of 2
    assert spread.nodes == 2 and spread.efficiency == pytest.approx(1.0)
    strong = predict(compute, FLAT, [1e8], 2, 2, global_batch=64)
    assert strong.batch_per_rank == 32 and strong.efficiency < 1.0
    with pytest.raises(ValueError):
        predict(compute, FLAT, [1e8], 2, 2)


def test_compute_is_a_line_through_the_calibrated_batches():
    c = fit_compute([8, 32], [0.05, 0.17], 0.6, 2, 1)
    assert c.base == pytest.approx(0.01) and c.per_sample == pytest.approx(0.005)
    one = fit_compute([32], [0.16], 0.6, 2, 1)
    assert one.base == 0 and one.per_sample == pytest.approx(0.005)


def test_predict_scaling_reads_a_calibration_and_refuses_a_bad_one(tmp_path, capsys):
    from hpcbench.cli import main

    record = calibration_record(
        cores=2,
        allreduce={
            "mpi": [
                [p, n, min(ring(n, p), tree(n, p))]
                for p in (2, 3, 4)
                for n in (4, 1 << 20, 64 << 20)
            ]
        },
    )
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    assert main(["predict-scaling", str(path), "--ranks", "2,4,64", "--ranks-per-node", "2"]) == 0
    out = capsys.readouterr().out
    assert "(mpi, 2 rank(s)/node)" in out and "ddp" not in out.split("compute per rank")[1]
    assert "links between nodes were not measured" in out
    rows = [
        line.split() for line in out.splitlines() if line.strip().startswith(("2 ", "4 ", "64 "))
    ]
    assert [r[0] for r in rows] == ["2", "4", "64"] and rows[2][1] == "32"  # 64 ranks on 32 nodes
    path.write_text("{}")
    assert main(["predict-scaling", str(path)]) == 2
    assert "not a calibration" in capsys.readouterr().err
    assert main(["predict-scaling", str(tmp_path / "none.json")]) == 2
    assert "no such calibration file" in capsys.readouterr().err
    assert main(["predict-scaling", str(path), "--ranks", "0"]) == 2


def test_the_calibration_spreads_each_rank_count_across_nodes_first():
    from hpcbench.scaling.calibrate import ranks_per_count, sizes_up_to, spread_order

    # ranks 0-3 on node 0, 4-7 on node 1: two ranks are one per node
    assert spread_order([0, 0, 0, 0, 1, 1, 1, 1])[:2] == [0, 4]
    assert sorted(spread_order([0, 1, 0, 1])) == [0, 1, 2, 3]
    assert ranks_per_count(4) == [2, 3, 4]
    assert ranks_per_count(64) == [2, 4, 8, 16, 32, 64]
    assert ranks_per_count(12) == [2, 4, 8, 12]
    assert sizes_up_to(5000) == [4, 64, 1024, 5000]


@pytest.mark.parametrize(
    "args,named",
    [
        (["--classes", "0"], "--classes"),
        (["--threads", "x"], "--threads"),
        (["--shape", "3x0x4"], "--shape"),
        (["--batches", "0,8"], "--batches"),
        (["--steps", "-1"], "--steps"),
    ],
)
def test_bad_calibration_options_are_refused_naming_the_option(args, named, capsys):
    from hpcbench.scaling.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    assert f"argument {named}:" in capsys.readouterr().err


def test_on_cpus_mpi_never_hides_its_all_reduce_and_gloo_only_on_a_spare_core(tmp_path):
    """An MPI library progresses a non-blocking collective inside the rank's own calls, so on a
    CPU the rank's core does the reduction whatever the overlap; gloo's threads need a core the
    ranks leave free; on a GPU both run beside the compute."""
    from hpcbench.scaling.predictions import communication_hides, load, predictions

    samples = [[p, n, min(ring(n, p), tree(n, p))] for p in (2, 4) for n in (4, 1 << 20, 64 << 20)]
    record = calibration_record(cores=4, allreduce={"mpi": samples, "gloo": samples})
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    cal = load(path)
    assert not communication_hides(cal, "mpi", 2)
    assert communication_hides(cal, "gloo", 2) and not communication_hides(cal, "gloo", 4)
    hidden, exposed = (
        predictions(cal, "ddp", [2], per_node, batch_per_rank=32)[0] for per_node in (2, 4)
    )
    mpi = predictions(cal, "mpi", [2], 2, batch_per_rank=32)[0]
    everything = sum(allreduce_s(cal.fits["mpi"], n, 2) for n in cal.buckets())
    fixed = 2 * allreduce_s(cal.fits["mpi"], 16, 2)
    assert mpi.comm_exposed_s == pytest.approx(everything + fixed)
    assert exposed.comm_exposed_s == pytest.approx(everything + fixed)
    assert hidden.comm_exposed_s < 0.5 * exposed.comm_exposed_s
    record["machine"]["device"] = "cuda"
    path.write_text(json.dumps(record))
    assert communication_hides(load(path), "mpi", 4)


def _broken_calibrations():
    """(name, text of a calibration file) for every way a hand-edited or foreign file breaks."""
    good = calibration_record(cores=2, allreduce={"mpi": [[2, 4, 1e-5], [4, 1 << 20, 1e-3]]})

    def variant(path, value):
        record = json.loads(json.dumps(good))
        *where, last = path
        node = record
        for key in where:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
        return json.dumps(record)

    nested = "[" * 100_000 + "]" * 100_000
    yield "empty", ""
    yield "not json", "{machine"
    yield "a list", "[]"
    yield "nested", nested
    yield "a string", '"calibration"'
    yield "nan", json.dumps(good).replace('"backward_share": 0.6', '"backward_share": NaN')
    yield "infinity", json.dumps(good).replace("0.17", "Infinity")
    yield "huge float", json.dumps(good).replace("0.17", "1e400")
    yield "huge int", json.dumps(good).replace('"nodes": 1', '"nodes": ' + "9" * 400)
    yield "no machine", variant(["machine"], KeyError)
    yield "machine a list", variant(["machine"], [1, 2])
    yield "no cores", variant(["machine", "cores_per_node"], KeyError)
    yield "zero cores", variant(["machine", "cores_per_node"], 0)
    yield "threads a string", variant(["machine", "threads_per_rank"], "1")
    yield "threads true", variant(["machine", "threads_per_rank"], True)
    yield "device a number", variant(["machine", "device"], 3)
    yield "no compute", variant(["compute"], KeyError)
    yield "batches empty", variant(["compute", "batches"], [])
    yield "zero batch", variant(["compute", "batches"], [0, 32])
    yield "steps short", variant(["compute", "step_s"], [0.05])
    yield "negative step", variant(["compute", "step_s"], [0.05, -1])
    yield "share above 1", variant(["compute", "backward_share"], 2)
    yield "parameter_bytes a number", variant(["parameter_bytes"], 12)
    yield "parameter_bytes zero", variant(["parameter_bytes"], [0])
    yield "allreduce a list", variant(["allreduce"], [])
    yield "allreduce row short", variant(["allreduce", "mpi"], [[2, 4]])
    yield "allreduce zero time", variant(["allreduce", "mpi"], [[2, 4, 0], [4, 8, 0]])
    yield "allreduce one row", variant(["allreduce", "mpi"], [[2, 4, 1e-5]])
    yield "allreduce none", variant(["allreduce"], {})
    yield "allreduce rows a dict", variant(["allreduce", "mpi"], {"a": 1})
    yield "model missing", variant(["model"], KeyError)


@pytest.mark.parametrize(("name", "text"), list(_broken_calibrations()), ids=lambda v: v[:20])
def test_a_broken_calibration_is_one_line_naming_the_file(tmp_path, capsys, name, text):
    """No traceback and no 'nan' prediction: exit 2 and one line naming the file (and the key)."""
    from hpcbench.cli import main

    path = tmp_path / "cal.json"
    path.write_text(text)
    assert main(["predict-scaling", str(path), "--ranks", "2,8"]) == 2, name
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"hpcbench: error: {path}: "), err
    assert "nan" not in captured.out and "inf" not in captured.out


def test_rank_counts_and_bucket_sizes_beyond_any_machine_are_refused(tmp_path, capsys):
    from hpcbench.cli import main

    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration_record(cores=2, allreduce={"mpi": [[2, 4, 1e-5],
                                                                            [4, 1 << 20, 1e-3]]})))  # fmt: skip
    assert main(["predict-scaling", str(path), "--ranks", "2," + "9" * 40]) == 2
    assert "--ranks" in capsys.readouterr().err
    for bad in ("nan", "inf", "-1", "0"):
        with pytest.raises(SystemExit) as exit_:
            main(["predict-scaling", str(path), "--bucket-mb", bad])
        assert exit_.value.code == 2
        assert "--bucket-mb" in capsys.readouterr().err
