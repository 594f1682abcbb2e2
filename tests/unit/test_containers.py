"""Container runtimes (Apptainer, Singularity, enroot through pyxis, enroot, podman-hpc,
Charliecloud): every runtime under every launcher, scheduler and node count renders a script
that bash and shellcheck accept, or is refused in one line naming the field; the rendered
scripts run under recording stubs (the launchers and srun record what they are given, as in
test_injection) put the runtime's words before each rank's program with the job's directory and
``~/`` expanded on the node, keep the batch shell's requeue on the host, and pass hostile images
and binds through intact and inert; the image reaches the ranks' provenance. The real run of a
container is tests/integration/test_containers_run.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hpcbench.jobs import containers as containers_package
from hpcbench.jobs.containers import runtime_classes, runtime_names
from hpcbench.jobs.launchers import launcher_classes
from hpcbench.jobs.render import RenderError, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec_load import build_spec
from tests.conftest import require
from tests.unit.test_injection import CANARY, HOSTILE, as_path, run_script, sandbox  # noqa: F401
from tests.unit.test_render import runs_under, spec_for

SCHEDULERS = list(SCHEDULER_CLASSES)
#: every runtime and every launcher the registries find, a new one included
CONTAINER_RUNTIMES = runtime_names()
LAUNCHERS = tuple(launcher_classes())
#: the launchers that start ranks (direct starts the program itself, once)
RANK_LAUNCHERS = tuple(n for n, c in launcher_classes().items() if not c.one_process)
#: the command each runtime puts before a rank's program (pyxis: srun's options instead)
COMMANDS = {
    "apptainer": ["apptainer", "exec"],
    "singularity": ["singularity", "exec"],
    "enroot": ["enroot", "start"],
    "podman-hpc": ["podman-hpc", "run", "--rm"],
    "charliecloud": ["ch-run"],
}


def container(runtime: str, image: str = "/img/torch", binds=("/scratch", "~/data:/data")):
    return {"container": {"runtime": runtime, "image": image, "binds": list(binds)}}


def test_every_module_of_the_package_is_a_runtime_the_spec_takes():
    modules = {p.stem for p in Path(containers_package.__file__).parent.glob("*.py")} - {
        "__init__",
        "base",
    }
    assert {cls.__module__.rpartition(".")[2] for cls in runtime_classes().values()} == modules
    for runtime in CONTAINER_RUNTIMES:
        spec = build_spec({"environment": container(runtime)})
        assert spec.environment.container.runtime == runtime


def refusal(runtime: str, scheduler: str, launcher: str, world_size: int) -> str | None:
    """The one line a combination is refused with, None where it renders: what the launcher
    and the runtime say of themselves (the batch system they run under, the launchers a runtime
    works with, one process only)."""
    if not runs_under(launcher, scheduler):
        return f"{launcher} runs only under"
    kind = launcher_classes()[launcher]
    if kind.only_under and kind.only_under != scheduler:
        kind = launcher_classes()[kind.stand_in]  # what the scheduler starts in its place
    box = runtime_classes()[runtime]
    if box.only_under and box.only_under != scheduler:
        return f"environment.container.runtime: {runtime} runs only under {box.only_under}, not {scheduler}"
    if box.launchers and kind.name not in box.launchers:
        return (
            f"{runtime} starts ranks only through {' or '.join(box.launchers)}, "
            f"not {kind.name} (launcher.kind)"
        )
    if kind.one_process and world_size > 1:
        return f"launcher.kind: {launcher} starts one process"
    return None


def test_every_runtime_launcher_scheduler_and_node_count_lints_or_is_refused(tmp_path):
    scripts, linted, rendered = [], [], set()
    for runtime in CONTAINER_RUNTIMES:
        for scheduler in SCHEDULERS:
            for launcher in LAUNCHERS:
                for nodes in (1, 2):
                    one = launcher_classes()[launcher].one_process  # its job: one process
                    shape = {"resources": {"tasks_per_node": 1}} if one else {}
                    spec = spec_for(launcher, nodes, environment=container(runtime), **shape)
                    why = refusal(runtime, scheduler, launcher, spec.resources.world_size)
                    if why is not None:
                        with pytest.raises(RenderError, match=re.escape(why)) as err:
                            render_script(spec, scheduler)
                        assert "\n" not in str(err.value)
                        continue
                    text = render_script(spec, scheduler)
                    assert f"HPCBENCH_CONTAINER_RUNTIME={runtime} " in text
                    script = tmp_path / f"{runtime}-{scheduler}-{launcher}-{nodes}.sh"
                    script.write_text(text)
                    scripts.append(script)
                    rendered.add((runtime, scheduler, launcher))
                    # shellcheck costs 0.3 s a script: the runtime's words are the same under
                    # every batch system (test_render lints each template), so SLURM's (srun's
                    # own options) and the local scheduler's (its own agents) are linted
                    if scheduler in ("slurm", "local"):
                        linted.append(script)
    # each runtime under each batch system it runs under, with each launcher it works with
    # there (srun only under SLURM and the local scheduler; pyxis SLURM's, not under mpiexec)
    expected = {
        (runtime, scheduler, launcher)
        for runtime in CONTAINER_RUNTIMES
        for scheduler in SCHEDULERS
        for launcher in LAUNCHERS
        if refusal(runtime, scheduler, launcher, 1) is None
    }
    assert rendered == expected and len(expected) > len(CONTAINER_RUNTIMES) * len(SCHEDULERS)
    for script in scripts:
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, script.name + syntax.stderr
    require(shutil.which("shellcheck") is not None, "shellcheck (Debian package)")
    lint = subprocess.run(  # one shellcheck for all: no exclusions
        ["shellcheck", "--shell=bash", "--severity=style", *map(str, linted)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout


def launch_calls(calls: list[dict]) -> list[list[str]]:
    """The arguments of each call of the launchers' stubs (srun, mpiexec)."""
    return [c["argv"] for c in calls if c["name"] in ("srun", "mpiexec")]


@pytest.mark.parametrize("runtime", [r for r in CONTAINER_RUNTIMES if r != "pyxis"])
@pytest.mark.parametrize("launcher", [n for n in RANK_LAUNCHERS if runs_under(n, "slurm")])
def test_the_runtime_runs_each_rank_and_the_launcher_stays_outside(sandbox, runtime, launcher):  # noqa: F811
    tmp, env = sandbox
    spec = build_spec(
        {
            "resources": {"nodes": 2, "tasks_per_node": 2, "gpus_per_node": 1},
            "environment": container(runtime),
            "launcher": {"kind": launcher},
            "program": {"command": ["prog", "arg"]},
        }
    )
    calls = run_script(tmp, env, render_script(spec, "slurm"))
    (argv,) = [a for a in launch_calls(calls) if COMMANDS[runtime][0] in a]
    start = argv.index(COMMANDS[runtime][0])
    words = argv[start:]
    assert words[: len(COMMANDS[runtime])] == COMMANDS[runtime]
    assert "/img/torch" in words
    after = words[words.index("/img/torch") + 1 :]
    after = after[1:] if after[0] == "--" else after  # ch-run's end of options
    if launcher_classes()[launcher].agent_per_node:  # the agent runs inside, starts the ranks
        assert after[:3] == ["python", "-m", "torch.distributed.run"], after
    else:
        assert after == ["prog", "arg"], after
    work, home = str(tmp / "work"), str(tmp)
    joined = " ".join(words)
    if runtime in ("apptainer", "singularity"):  # they bind the working directory themselves
        assert "--nv" in words and f"{home}/data:/data" in words
    else:  # the job's directory at the same path, ~/ expanded on the node
        assert work in joined and f"{home}/data:/data" in joined, words
        assert "/scratch:/scratch" in words or "/scratch" in words
    assert "~" not in joined and "$" not in joined


def test_pyxis_gives_srun_the_image_mounts_and_working_directory(sandbox):  # noqa: F811
    tmp, env = sandbox
    for launcher, nodes in (("srun", 2), ("torchrun", 2), ("torchrun", 1)):
        spec = build_spec(
            {
                "resources": {"nodes": nodes, "tasks_per_node": 2},
                "environment": container("pyxis", "nvcr.io#nvidia/pytorch:24.08-py3"),
                "launcher": {"kind": launcher},
            }
        )
        calls = run_script(tmp, env, render_script(spec, "slurm"))
        (argv,) = [a for a in launch_calls(calls) if "--container-image" in a]
        at = argv.index("--container-image")
        assert argv[at : at + 6] == [
            "--container-image",
            "nvcr.io#nvidia/pytorch:24.08-py3",
            "--container-mounts",
            f"{tmp / 'work'},/scratch:/scratch,{tmp}/data:/data",
            "--container-workdir",
            str(tmp / "work"),
        ]
        program = argv[at + 6 :]
        if launcher == "torchrun":  # srun's task is the node's agent, inside the image
            assert program[:3] == ["python", "-m", "torch.distributed.run"]
        else:
            assert program == ["python", "-m", "hpcbench.train"]


def test_pyxis_refuses_a_mount_with_a_comma_and_another_users_home_in_one_line():
    for binds, said in (
        (["/data,x"], "pyxis separates its mounts with commas"),
        (["~alice/data:/data"], "write another user's directory out in full"),
    ):
        spec = spec_for("srun", 2, environment=container("pyxis", binds=binds))
        with pytest.raises(RenderError, match=re.escape(said)) as err:
            render_script(spec, "slurm")
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_apptainer_refuses_a_bind_with_a_comma_and_expands_a_home_destination(sandbox, runtime):  # noqa: F811
    """``--bind`` takes a comma-separated list: ``/data,x`` would be two binds, refused in one
    line; ``~/`` on either side of a bind is the node's home (not a directory named ``~``)."""
    spec = spec_for("srun", 2, environment=container(runtime, binds=["/data,/etc:/x"]))
    with pytest.raises(RenderError, match="separates its binds with commas") as err:
        render_script(spec, "slurm")
    assert "\n" not in str(err.value)
    tmp, env = sandbox
    spec = build_spec({"resources": {"nodes": 1}, "launcher": {"kind": "srun"},
                       "environment": container(runtime, binds=["~/in:~/out"]),
                       "program": {"command": ["prog"]}})  # fmt: skip
    calls = run_script(tmp, env, render_script(spec, "slurm"))
    (argv,) = [a for a in launch_calls(calls) if runtime in a]
    assert argv[argv.index("--bind") + 1] == f"{tmp}/in:{tmp}/out", argv


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
def test_hostile_images_binds_and_options_arrive_intact_and_inert(sandbox, runtime):  # noqa: F811
    tmp, env = sandbox
    launcher = "srun"
    for value in HOSTILE:
        if runtime in ("pyxis", "apptainer", "singularity") and "," in value:
            continue  # refused in one line (above)
        spec = build_spec(
            {
                "resources": {"nodes": 2, "tasks_per_node": 2},
                "environment": {
                    "container": {
                        "runtime": runtime,
                        "image": as_path(value),
                        "binds": [f"/b/{value}"],
                        "options": [value],
                    }
                },
                "launcher": {"kind": launcher},
            }
        )
        calls = run_script(tmp, env, render_script(spec, "slurm"))
        assert not list(tmp.rglob(CANARY)), f"{runtime}: {value!r} executed something"
        (argv,) = [a for a in launch_calls(calls) if "hpcbench.train" in a]
        assert as_path(value) in argv and value in argv, (value, argv)
        assert any(f"/b/{value}" in word for word in argv), (value, argv)


def test_the_container_flags_and_profile_keys_choose_the_runtime(tmp_path):
    from tests.conftest import hpcbench

    r = hpcbench(
        "render", "--scheduler", "slurm", "--launcher", "srun", "--container", "img.sqsh",
        "--container-runtime", "charliecloud", "--bind", "/scratch", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert 'ch-run --bind /scratch:/scratch --bind "$PWD" --cd "$PWD" img.sqsh --' in (
        " ".join(r.stdout.replace("\\\n", " ").split())
    )
    r = hpcbench(
        "render", "--scheduler", "slurm", "--container", "img", "--container-runtime", "docker",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "environment.container.runtime" in r.stderr and "charliecloud" in r.stderr
