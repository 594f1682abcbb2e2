"""The job specs and matrices shipped in jobs/: one directory per study, each spec in its full
and its ``--smoke`` form rendering for its scheduler and passing bash -n and shellcheck, each
matrix (and its smoke form) planning its runs, and every directory saying what it reproduces.
The smoke forms run on the test clusters in tests/cluster/test_study_jobs.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hpcbench.jobs.render import render_script
from hpcbench.jobs.spec_load import load_spec, read_spec_file
from tests.unit.test_render import lint_script

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "jobs"
STUDIES = ("marenostrum5", "vub-mpi", "herbarium", "lab-ai-rnn", "reference-study")


def kind(path: Path) -> str:
    """``spec``, ``matrix``, ``sweep`` or ``options`` (a trainer options file)."""
    table = tomllib.loads(path.read_text())
    if "config" in table and isinstance(table["config"], list):
        return "matrix"
    if "axes" in table:
        return "sweep"
    if {"resources", "program", "launcher"} & set(table):
        return "spec"
    return "options"


SPECS = sorted(p for p in JOBS.rglob("*.toml") if kind(p) == "spec")
MATRICES = sorted(p for p in JOBS.rglob("*.toml") if kind(p) == "matrix")


def test_every_study_has_its_directory_and_readme():
    for study in STUDIES:
        readme = JOBS / study / "README.md"
        assert readme.is_file(), study
        text = readme.read_text()
        for part in ("**The study**", "What differs, and why", "--smoke"):
            assert part in text, (study, part)
    assert {p.parent.name for p in SPECS} >= set(STUDIES)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(JOBS)))
def test_each_spec_renders_for_its_scheduler_in_both_forms_and_passes_shellcheck(
    path, tmp_path, monkeypatch
):
    monkeypatch.chdir(REPO)  # specs name their options files from the repository's root
    table = read_spec_file(path)
    scheduler = table.get("scheduler", {}).get("name", "slurm")
    forms = [False, True] if "smoke" in table else [False]
    for smoke in forms:
        spec = load_spec(path.relative_to(REPO), smoke=smoke)
        script = tmp_path / f"job-{smoke}.sh"
        script.write_text(render_script(spec, scheduler))
        lint_script(script)
        text = script.read_text()
        if smoke:  # minutes on CPUs: no GPU, no site modules, a short limit
            assert spec.resources.gpus_per_node == 0 and not spec.environment.modules, path
            assert spec.resources.time_s <= 30 * 60, path
        else:
            assert spec.source == str(path.relative_to(REPO))
        assert text.startswith("#!/bin/bash\n")
    if path.parent.name in STUDIES:
        assert "smoke" in table, f"{path}: give it a [smoke] form"


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: str(p.relative_to(JOBS)))
def test_each_matrix_and_its_smoke_form_plan_their_runs(path, monkeypatch):
    from hpcbench.bench.running.matrix import build_matrix, read_matrix_table, smoke_form
    from hpcbench.bench.running.runner import Bench, plan

    monkeypatch.chdir(REPO)
    table = read_matrix_table(path.relative_to(REPO))
    forms = [(table, False)] + ([(smoke_form(table, str(path)), True)] if "smoke" in table else [])
    for form, smoke in forms:
        matrix = build_matrix(dict(form), str(path), default_name=path.stem, smoke=smoke)
        runs = plan(matrix)
        assert len(runs) == len(matrix.configs) * (matrix.repetitions + matrix.energy_repetitions)
        bench = Bench(matrix, "unused")
        for run in runs[: len(matrix.configs)]:
            spec = bench.spec_for(run)
            if smoke:
                assert spec.resources.gpus_per_node == 0, (path, run.config)
            # the trainer, or the program the matrix names (its own script)
            named = matrix.program or {"module": "hpcbench.train"}
            assert all(getattr(spec.program, k) == v for k, v in named.items()), (path, named)
        if matrix.energy_repetitions and matrix.idle_seconds:
            # the idle-power job runs the energy meter alone: none of the trainer's arguments
            argv = bench.idle_spec().program.argv()
            assert argv[1:4] == ["-m", "hpcbench.energy", "idle"], (path, smoke, argv)


def test_the_smoke_form_replaces_only_what_it_names_and_unset_restores_defaults(tmp_path):
    spec = tmp_path / "job.toml"
    spec.write_text(
        "[resources]\nnodes = 4\naccount = 'proj'\ntime = '10:00:00'\n"
        "[program]\nmodule = 'hpcbench.train'\nargs = ['--model', 'resnet50']\n"
        "[smoke]\nunset = ['resources.account']\n"
        "resources = { nodes = 2, time = '00:10:00' }\nprogram = { args = ['--max-steps', '4'] }\n"
    )
    full, smoke = load_spec(spec), load_spec(spec, smoke=True)
    assert (full.resources.nodes, full.resources.account) == (4, "proj")
    assert full.program.args == ["--model", "resnet50"]
    assert (smoke.resources.nodes, smoke.resources.account) == (2, None)
    assert smoke.resources.time_s == 600 and smoke.program.args == ["--max-steps", "4"]
    assert smoke.program.module == "hpcbench.train"
    from hpcbench.jobs.spec import SpecError

    bad = tmp_path / "bad.toml"
    bad.write_text("[resources]\nnodes = 1\n[smoke]\nresources = { nodes = 0 }\n")
    with pytest.raises(SpecError, match=r"smoke: resources.nodes"):
        load_spec(bad)  # a broken smoke form is found without --smoke too
    with pytest.raises(SpecError, match=r"--smoke: this spec has no \[smoke\] table"):
        load_spec(JOBS / "demo.toml", smoke=True)
    for typo in ("resources.acount", "bogus.account", "resources.time-s"):
        misspelt = tmp_path / "typo.toml"
        misspelt.write_text(f"[resources]\naccount = 'p'\n[smoke]\nunset = ['{typo}']\n")
        with pytest.raises(SpecError, match=rf"smoke.unset: '{typo}' is not a field of the spec"):
            load_spec(misspelt)  # else the account would silently stay set in the smoke form


@pytest.mark.parametrize("field", ["resources.gpus-per-node", "resources.gpus_per_node"])
@pytest.mark.parametrize("key", ["gpus-per-node", "gpus_per_node"])
def test_smoke_unset_removes_the_field_in_either_spelling(tmp_path, field, key):
    """A spec may spell keys with dashes or underscores; unset takes either and removes the
    field whichever way the file spelt it (else the smoke form still asked for 4 GPUs)."""
    spec = tmp_path / "job.toml"
    spec.write_text(f"[resources]\n{key} = 4\n[smoke]\nunset = ['{field}']\n")
    assert load_spec(spec).resources.gpus_per_node == 4
    assert load_spec(spec, smoke=True).resources.gpus_per_node == 0


SWEEPS = sorted(p for p in JOBS.rglob("*.toml") if kind(p) == "sweep")


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: str(p.relative_to(JOBS)))
def test_each_sweep_and_its_smoke_form_plan_their_tasks(path, monkeypatch):
    from hpcbench.sweep.plan import read_sweep

    monkeypatch.chdir(REPO)
    for smoke in (False, True):
        sweep = read_sweep(path.relative_to(REPO), smoke=smoke)
        tasks = sweep.tasks()
        assert tasks and len({t.run for t in tasks}) == len(tasks), path
        if sweep.program is not None:  # any program: each task's own arguments, filled in
            assert all("{" not in a for t in tasks for a in sweep.task_arguments(t.setting))
