"""No value can become a scheduler directive, read by each scheduler's own rule.

The rules, as the schedulers apply them to a submitted script (written out here independently of
hpcbench's own check):

* Grid Engine's qsub reads every line that begins with ``#$``, anywhere in the file;
* sbatch reads ``#SBATCH`` lines, qsub (PBS/Torque) ``#PBS`` lines and bsub (LSF) ``#BSUB``
  lines up to the first command.

A scheduler added to hpcbench must add its rule here (a test fails until it does): how a
scheduler reads its directives is what a security review checks, not something to infer.

Every string field gets a newline or carriage return followed by a directive. Each case must
end one of two ways: the spec (or the render) refuses it with one line naming the field, or the
directives the scheduler would read are exactly those of the same job without the hostile value.
"""

from __future__ import annotations

import pytest

from hpcbench.jobs.render import RenderError, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import build_spec

PAYLOADS = {
    "sge": "#$ -S /tmp/evil-shell",
    "slurm": "#SBATCH --time=999:00:00",
    "pbs": "#PBS -l walltime=999:00:00",
    "lsf": "#BSUB -W 999:00",
    "local": "#$ -S /tmp/evil-shell",
}
HEADER_PREFIXES = {"slurm": "#SBATCH", "pbs": "#PBS", "lsf": "#BSUB"}
ALL_PREFIXES = ("#$", *HEADER_PREFIXES.values())
BREAKS = ["\n", "\r", "\r\n", "\n\n"]
# Fields whose values are data for the program: a newline there is legitimate and must be inert.
MAY_HOLD_NEWLINES = {
    "environment.variables",
    "environment.setup",
    "program.command",
    "program.args",
}
FIELDS = [
    "resources.job_name",
    "resources.output_dir",
    "resources.partition",
    "resources.account",
    "resources.qos",
    "resources.constraint",
    "environment.modules",
    "environment.venv",
    "environment.conda_env",
    "environment.container.image",
    "environment.container.binds",
    "environment.container.options",
    "environment.variables",
    "environment.setup",
    "launcher.args",
    "launcher.srun_mpi",
    "program.python",
    "program.script",
    "program.command",
    "program.args",
    "scheduler.directives",
    "scheduler.sge_pe",
]
LISTS = {
    "environment.modules",
    "environment.container.binds",
    "environment.container.options",
    "environment.setup",
    "launcher.args",
    "program.command",
    "program.args",
    "scheduler.directives",
}


def read_directives(text: str, scheduler: str) -> list[str]:
    """The directive lines ``scheduler`` would act on, by its own reading rule."""
    lines = text.split("\n")
    if scheduler == "sge":
        return [line for line in lines if line.startswith("#$")]
    prefix = HEADER_PREFIXES.get(scheduler)
    found = []
    for line in lines[1:]:
        if line.strip() and not line.startswith("#"):
            break  # the first command ends the directives
        if prefix and line.startswith(prefix):
            found.append(line)
    if scheduler == "local":  # no scheduler reads it, but Grid Engine's rule must find nothing
        return [line for line in lines if line.startswith(ALL_PREFIXES)]
    return found


def base_spec(scheduler: str, field: str) -> dict:
    data: dict = {
        "resources": {"nodes": 1, "tasks_per_node": 2},
        "launcher": {"kind": "srun" if field == "launcher.srun_mpi" else "mpiexec"},
        "scheduler": {"sge_pe": "mpi"} if scheduler == "sge" else {},
    }
    if field.startswith("environment.container"):
        data["environment"] = {"container": {"image": "img.sif"}}
    if field == "program.args":  # another program: the trainer's own parser refuses them first
        data["program"] = {"command": ["echo"]}
    return data


def set_field(data: dict, field: str, value: str) -> dict:
    node = data
    *parents, last = field.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if field == "environment.variables":
        node[last] = {"NOTE": value}
    elif field in LISTS:
        node[last] = [value]
    else:
        node[last] = value
    return data


def applicable(scheduler: str, field: str) -> bool:
    if field in ("resources.qos", "resources.constraint"):
        return scheduler in ("slurm", "local")
    if field == "launcher.srun_mpi":
        return scheduler in ("slurm", "local")
    if field == "scheduler.sge_pe":
        return scheduler == "sge"
    return True


CASES = [
    (scheduler, field, brk)
    for scheduler in PAYLOADS
    for field in FIELDS
    if applicable(scheduler, field)
    for brk in BREAKS
]


@pytest.mark.parametrize("scheduler, field, brk", CASES)
def test_no_value_becomes_a_directive(scheduler, field, brk):
    payload = PAYLOADS[scheduler]
    baseline = render_script(
        build_spec(set_field(base_spec(scheduler, field), field, "v")), scheduler
    )
    hostile = f"v{brk}{payload}{brk}"
    try:
        text = render_script(
            build_spec(set_field(base_spec(scheduler, field), field, hostile)), scheduler
        )
    except (SpecError, RenderError) as err:
        message = str(err)
        assert "\n" not in message
        if isinstance(err, SpecError):
            assert field in message and "single line" in message, message
            assert field not in MAY_HOLD_NEWLINES, f"{field} may hold a newline but was refused"
        else:  # only a setup line, which is code, is refused after rendering
            assert field == "environment.setup" and "directive" in message, message
        return
    assert field in MAY_HOLD_NEWLINES, f"{field} accepted a newline"
    assert read_directives(text, scheduler) == read_directives(baseline, scheduler)


def test_every_scheduler_has_its_reading_rule_here():
    assert set(SCHEDULER_CLASSES) == set(PAYLOADS)


@pytest.mark.parametrize("field", ["resources.job_name", "program.args", "environment.variables"])
def test_nul_bytes_are_refused(field):
    with pytest.raises(SpecError, match="NUL"):
        build_spec(set_field(base_spec("slurm", field), field, "a\x00b"))


def test_a_setup_line_cannot_be_a_grid_engine_directive():
    data = {"environment": {"setup": ["echo ok", "  #$ -l h_rt=999:00:00"]}}
    with pytest.raises(RenderError, match="line .* would be read by sge as a directive"):
        render_script(build_spec(data), "slurm")
