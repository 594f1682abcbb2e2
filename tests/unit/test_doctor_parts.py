"""The doctor's parts that need no ranks: NCCL's transports from recorded logs, the drills, the
findings' rules and the command line's one-line errors.

The NCCL logs under ``recorded/nccl/`` are ``NCCL_DEBUG=INFO`` output pasted whole in public
issue threads (each file's header names its thread): over InfiniBand, over RoCE, a fall back to
sockets on nodes with InfiniBand cards, and one node's P2P and SHM channels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.doctor import communication, compute
from hpcbench.doctor.drills import DrillError, read_drills
from hpcbench.doctor.entry import main
from hpcbench.doctor.nccl_log import parse_nccl_log, transport_findings

RECORDED = Path(__file__).parent / "recorded" / "nccl"


def _log(name: str) -> str:
    return (RECORDED / name).read_text().split("\n\n", 1)[1]


def test_nccl_transports_from_recorded_logs() -> None:
    ib = parse_nccl_log(_log("nccl-ib.log"))
    assert ib["network"] == "IB" and ib["inter_node"] == {"NET/IB": 1}
    assert "mlx5_0:1/IB" in ib["ib_devices"] and ib["intra_node"]["P2P/IPC"] > 0
    roce = parse_nccl_log(_log("nccl-roce.log"))
    assert roce["ib_devices"] == ["mlx5_6:1/RoCE"] and roce["inter_node"]["NET/IB"] > 0
    sockets = parse_nccl_log(_log("nccl-socket-fallback.log"))
    assert sockets["network"] == "Socket" and sockets["inter_node"]["NET/Socket"] > 0
    assert sockets["ib_missing"] and sockets["socket_devices"][0].startswith("ibs85f0:")
    one_node = parse_nccl_log(_log("nccl-p2p-shm.log"))
    assert one_node["inter_node"] == {} and set(one_node["intra_node"]) == {"P2P/direct", "SHM"}
    # sockets between nodes that have a fabric: named, with what to check
    (line,) = transport_findings(sockets, ["mlx5_0", "mlx5_1"], nodes=2)
    assert "NCCL runs over sockets" in line and "NCCL_IB_DISABLE" in line and "mlx5_0" in line
    assert transport_findings(ib, ["mlx5_0"], nodes=2) == []
    assert transport_findings(sockets, [], nodes=2) == []  # no fabric: sockets are all there is
    assert transport_findings(one_node, ["mlx5_0"], nodes=1) == []


def test_drills_are_read_or_refused_in_one_line() -> None:
    drills = read_drills("slow-compute:1, slow-link:2,absent:3@compute")
    assert drills.slow_compute == {1} and drills.slow_link == {2}
    assert drills.absent == {"compute": {3}}
    assert read_drills("absent:1").absent == {"communication": {1}}
    with pytest.raises(DrillError, match="'slow:1' is not a drill"):
        read_drills("slow:1")


def test_a_slow_node_is_named_against_its_peers() -> None:
    results = [
        {"rank": r, "node": f"n{r // 2}", "device": "cpu", "dtype": "float32", "gflops": g}
        for r, g in enumerate([100, 96, 104, 99, 30, 31])
    ]
    lines, detail = compute.findings(results)
    assert lines == ["compute: node n2 is slow: 30.5 GFLOP/s, 0.31 of the nodes' median 98.0"]
    assert compute.findings(results[:4])[0] == []


def _sweep(group: str, peak: float) -> communication.Sweep:
    return {"group": group, "ranks": [0, 1], "sizes": [1024], "busbw_gbps": [peak],
            "peak_gbps": peak}  # fmt: skip


def test_a_slow_link_is_named_by_the_pairs_and_by_the_baseline() -> None:
    pairs = [_sweep("pair a b", 10), _sweep("pair a c", 10), _sweep("pair b c", 3),
             _sweep("pair a d", 10), _sweep("pair b d", 3), _sweep("pair c d", 10)]  # fmt: skip
    lines, _ = communication.findings(pairs, {}, 0.6)
    assert len(lines) == 1 and "node b's links are slow" in lines[0]
    two = [_sweep("world", 0.3), _sweep("pair a b", 0.3)]
    lines, figures = communication.findings(two, {"world": 1.0, "pair": 1.0}, 0.6)
    assert lines and "the link between a and b" in lines[0] and figures["world"] == 0.3
    assert communication.findings(two, {}, 0.6)[0] == []  # no baseline, one link: no verdict


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--path", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("missing: no such file or directory")
    with pytest.raises(SystemExit) as exit_:
        main(["--steps", "launch,network"])
    assert exit_.value.code == 2
    assert "unknown step 'network' (the steps: launch, placement," in capsys.readouterr().err


def test_the_preflight_takes_the_doctors_own_options_checked_by_its_parser() -> None:
    from hpcbench.jobs.render import render_script
    from hpcbench.jobs.spec import SpecError
    from hpcbench.jobs.submission import load_spec

    spec = load_spec(None, doctor=True, doctor_args=["--steps", "launch,communication"])
    script = " ".join(render_script(spec, "slurm").replace("\\\n", " ").split())
    assert "-m hpcbench.doctor --preflight --steps launch,communication" in script
    for bad, said in [(["--steps", "gpu"], "unknown step 'gpu'"), (["--stepz"], "--steps")]:
        with pytest.raises(SpecError, match="launcher.doctor_args: .*" + said):
            render_script(load_spec(None, doctor=True, doctor_args=bad), "slurm")


RECORDED_DOCTOR = Path(__file__).parent / "recorded" / "doctor" / "two-nodes.json"


def test_a_doctor_run_is_recorded_in_the_history_and_checked_against_references(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import shutil

    from hpcbench.cli.main import main as cli
    from hpcbench.doctor.figures import doctor_figures
    from hpcbench.history import History

    document = json.loads(RECORDED_DOCTOR.read_text())
    figures = doctor_figures(document)
    assert set(figures) == {"vm/node0", "vm/node1", "world", "pair vm/node0 vm/node1"}
    assert figures["vm/node1"]["compute_gflops"]["median"] == pytest.approx(47.5, abs=0.01)
    assert set(figures["world"]) == {"busbw_gbps"}
    run = tmp_path / "runs" / "hpcbench-local-1"
    run.mkdir(parents=True)
    shutil.copy(RECORDED_DOCTOR, run / "doctor.json")
    history = tmp_path / "history.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HPCBENCH_HISTORY", str(history))
        assert cli(["history", "--add", str(run)]) == 0
        assert cli(["history", "--add", str(run)]) == 0  # the same run: one record
        (entry,) = History(history).entries()
        assert entry.kind == "doctor" and entry.profile == "local-nodes"
        refs = tmp_path / "refs.toml"
        # "*" holds each figure to the nodes, links or pairs that measure it
        refs.write_text('[reference]\n"*" = { compute_gflops = [50, -0.3, inf] }\n'
                        '"world" = { busbw_gbps = [0.5, -0.5, inf] }\n')  # fmt: skip
        capsys.readouterr()
        assert cli(["check", str(run), "--references", str(refs)]) == 0
        assert "3 of 3 figure(s) within tolerance" in capsys.readouterr().out
        refs.write_text(
            '[reference]\n"local-nodes:vm/node1" = { compute_gflops = [80, -0.2, inf] }\n'
        )
        assert cli(["check", str(run), "--references", str(refs)]) == 1
        out = capsys.readouterr().out
        assert "vm/node1 compute_gflops: 47.5 GFLOP/s out of tolerance" in out
        assert cli(["check", str(run)]) == 2
        assert "give --references FILE" in capsys.readouterr().err


def test_the_mpi_backend_refuses_ranks_that_are_not_one_mpi_world() -> None:
    from hpcbench.doctor.mpi_collectives import MpiCollectives, MpiUnavailable

    with pytest.raises(MpiUnavailable, match="MPI sees rank 0 of 1, the launch rank 1 of 2"):
        MpiCollectives(1, 2)
