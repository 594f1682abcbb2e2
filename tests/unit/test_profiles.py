"""Cluster profiles: every layer of the precedence (default < site profile < user profile < job
spec < flag), where ``profile show`` says each value came from, one-line errors naming the file
and key, and hostile values checked and quoted exactly as a job spec's own (the same script, or
the same refusal). ``profile init`` is tested against the real SLURM test cluster
(tests/cluster/test_sweep_arrays.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.jobs import profiles
from hpcbench.jobs.render import RenderError, render_script
from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
from hpcbench.jobs.spec import SpecError
from hpcbench.jobs.spec_load import build_spec, explain, load_spec
from tests.conftest import REPO, hpcbench
from tests.unit.test_injection import HOSTILE, MULTILINE


@pytest.fixture
def files(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    user = tmp_path / "config" / "hpcbench" / "profiles.toml"
    user.parent.mkdir(parents=True)
    monkeypatch.setenv("HPCBENCH_SITE_CONFIG", str(site))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HPCBENCH_PROFILE", raising=False)
    return site, user


def write(path: Path, text: str) -> None:
    path.write_text(text)


def test_every_layer_of_the_precedence(files, tmp_path):
    site, user = files
    write(site, '[profiles.c]\npartition = "site-p"\naccount = "site-a"\nqos = "site-q"\n'
                'constraint = "site-c"\ncores_per_node = 64\n')  # fmt: skip
    write(user, '[profiles.c]\naccount = "user-a"\nqos = "user-q"\nconstraint = "user-c"\n')
    spec_file = tmp_path / "job.toml"
    write(spec_file, '[resources]\nqos = "spec-q"\nconstraint = "spec-c"\n')
    flags = {"resources.constraint": ("--constraint", "flag-c")}
    spec = load_spec(spec_file, flags, profile="c")
    r = spec.resources
    assert (r.partition, r.account, r.qos, r.constraint) == ("site-p", "user-a", "spec-q", "flag-c")
    assert r.time_s == 3600  # the default: no layer sets it
    came = {dotted: source for dotted, _, source in explain(spec_file, flags, profile="c")}
    assert came["resources.partition"] == f"site profile c ({site}): partition"
    assert came["resources.account"] == f"user profile c ({user}): account"
    assert came["resources.qos"] == f"job spec {spec_file}"
    assert came["resources.constraint"] == "flag --constraint"
    assert came["resources.time"] == "default"
    # no profile chosen: none of it
    assert load_spec(spec_file).resources.partition is None


def test_the_profile_is_chosen_by_the_variable_and_lists_merge_by_name(files, monkeypatch):
    site, user = files
    write(
        site, '[profiles.c]\nmodules = ["A"]\nvariables = { NCCL_SOCKET_IFNAME = "ib0", X = "1" }\n'
    )
    write(user, '[profiles.c]\nvariables = { X = "2" }\ngpus_per_node = 2\nsacct = false\n')
    monkeypatch.setenv("HPCBENCH_PROFILE", "c")
    spec = load_spec()
    assert spec.environment.modules == ["A"] and spec.resources.gpus_per_node == 2
    assert spec.environment.variables == {"NCCL_SOCKET_IFNAME": "ib0", "X": "2"}
    chosen = profiles.load_profile()
    assert chosen is not None and chosen.info()["sacct"][0] is False


@pytest.mark.parametrize(
    "text, says",
    [
        ("[profiles.c\n", "not valid TOML"),
        ('[profiles.c]\nparttion = "x"\n', "profiles.c.parttion: unknown key (did you mean 'partition'?)"),
        ('[profiles.c]\nsetup = ["rm -rf ~"]\n', "profiles.c.setup: a profile holds data, not code"),
        ('[profiles.c]\ndirectives = ["--wrap=x"]\n', "profiles.c.directives: a profile holds data"),
        ('[profiles.c]\ngpus_per_node = "2"\n', "gpus_per_node (resources.gpus_per_node): expected a whole"),
        ('[profiles.c]\ncores_per_node = 0\n', "profiles.c.cores_per_node: expected a count"),
        ('[profiles.c]\nsacct = "yes"\n', "profiles.c.sacct: expected bool"),
        ('[profiles.c]\nscheduler = "moab"\n', "scheduler (scheduler.name): expected one of auto"),
        ('[profiles.c]\npartition = "a\\nb"\n', "partition (resources.partition): must be a single line"),
        ('profiles = 3\n', "profiles: expected tables"),
        ('[other]\n', "other: unknown key"),
    ],
)  # fmt: skip
def test_a_bad_profile_is_one_line_naming_the_file_and_key(files, text, says):
    site, _ = files
    write(site, text)
    with pytest.raises(SpecError) as err:
        load_spec(profile="c")
    assert says in str(err.value) and str(site) in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_a_bad_profile_value_is_refused_even_where_the_spec_replaces_it(files, tmp_path):
    site, _ = files
    write(site, '[profiles.c]\ntime = "soon"\n')
    spec_file = tmp_path / "job.toml"
    write(spec_file, '[resources]\ntime = "00:10:00"\n')
    with pytest.raises(SpecError, match=r"site profile c .*time \(resources.time\)"):
        load_spec(spec_file, profile="c")


def test_an_unknown_profile_names_the_files_and_the_profiles_there(files):
    site, user = files
    write(user, "[profiles.hydra]\n")
    with pytest.raises(SpecError) as err:
        load_spec(profile="hidra")
    assert str(site) in str(err.value) and str(user) in str(err.value)
    assert "(profiles there: hydra)" in str(err.value)


def _render_or_refusal(spec_of, scheduler):
    """The script, or why it was refused without the words that name the field (a profile's
    error names its file and key before the field, a spec's the field alone)."""
    try:
        return render_script(spec_of(), scheduler)
    except (SpecError, RenderError) as err:
        text = str(err)
        for field in ("resources.", "environment."):
            if field in text:
                text = text.split(field, 1)[1].split(": ", 1)[1]
        return f"refused: {text}"


@pytest.mark.parametrize("scheduler", list(SCHEDULER_CLASSES))
def test_hostile_profile_values_are_checked_and_quoted_as_a_specs_own(files, scheduler):
    site, _ = files
    from hpcbench.train.config_file import toml_value

    fields = {"partition": "resources", "account": "resources", "qos": "resources",
              "constraint": "resources", "venv": "environment", "conda_env": "environment"}  # fmt: skip
    for value in [*HOSTILE, *MULTILINE, "#$ -l h=evil", "#SBATCH --wrap=id"]:
        for key, table in fields.items():
            write(site, f"[profiles.c]\n{key} = {toml_value(value)}\n")

            from_profile = _render_or_refusal(lambda: load_spec(profile="c"), scheduler)
            from_spec = _render_or_refusal(
                lambda t=table, k=key, v=value: build_spec({t: {k: v}}), scheduler
            )
            assert from_profile == from_spec, (key, value)
        write(site, f'[profiles.c]\nmodules = [{toml_value("./" + value)}]\n'
                    f"variables = {{ HOSTILE = {toml_value(value)} }}\n")  # fmt: skip
        from_profile = _render_or_refusal(lambda: load_spec(profile="c"), scheduler)
        from_spec = _render_or_refusal(
            lambda v=value: build_spec(
                {"environment": {"modules": ["./" + v], "variables": {"HOSTILE": v}}}
            ),
            scheduler,
        )
        assert from_profile == from_spec


@pytest.mark.parametrize("which", ["site", "user"])
@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646])
def test_a_profiles_file_others_can_write_is_refused_as_openssh_refuses_its_config(
    files, which, mode
):
    """A profile's venv, modules and variables land in every script rendered with it: a file
    others may write is someone else's code in our jobs. One line naming the file and the fix."""
    site, user = files
    path = site if which == "site" else user
    write(path, '[profiles.c]\nvenv = "/opt/venv"\n')
    path.chmod(mode)
    with pytest.raises(SpecError) as err:
        load_spec(profile="c")
    message = str(err.value)
    assert message == (
        f"{path}: writable by others (mode {mode:o}): refused, as anyone who can write it "
        f"chooses what every job runs; chmod go-w {path}"
    )
    path.chmod(0o644)
    assert load_spec(profile="c").environment.venv == "/opt/venv"


def test_a_profiles_file_owned_by_another_user_is_refused(files):
    import os

    site, _ = files
    write(site, '[profiles.c]\nvenv = "/opt/venv"\n')
    from tests.conftest import require

    require(os.geteuid() == 0, "root (to give the file another owner)")
    os.chown(site, 4242, -1)
    with pytest.raises(SpecError) as err:
        load_spec(profile="c")
    assert str(err.value) == (
        f"{site}: owned by uid 4242, neither root nor you: refused, as its owner chooses what "
        "every job runs"
    )


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory"])
def test_a_profiles_file_that_is_not_a_regular_file_is_one_line_never_a_hang(files, kind):
    import os

    site, _ = files
    if kind == "fifo":
        os.mkfifo(site)
    elif kind == "directory":
        site.mkdir()
    else:
        site.symlink_to("/dev/zero")
    with pytest.raises(SpecError, match=r"not a regular file") as err:
        load_spec(profile="c")
    assert str(site) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "PYTHONSTARTUP",
             "PYTHONPATH", "PATH", "PERL5OPT"]
)  # fmt: skip
def test_variables_that_change_how_programs_load_are_refused_from_the_users_file(files, name):
    site, user = files
    write(user, f'[profiles.c]\nvariables = {{ {name} = "/home/x/evil" }}\n')
    with pytest.raises(SpecError) as err:
        load_spec(profile="c")
    assert str(err.value).startswith(f"{user}: profiles.c.variables.{name}: changes how programs")
    assert "job spec" in str(err.value)  # where the user sets it for one job, in plain sight
    # another profile of the file is not refused for it (profile list, --profile other)
    write(user, f'[profiles.c]\nvariables = {{ {name} = "/x" }}\n[profiles.d]\npartition = "p"\n')
    assert load_spec(profile="d").resources.partition == "p"
    # the site's file (root's, or its admin's, writable by no one else) may set it
    user.unlink()
    write(site, f'[profiles.c]\nvariables = {{ {name} = "/opt/site/lib" }}\n')
    assert load_spec(profile="c").environment.variables[name] == "/opt/site/lib"


def test_a_written_profile_is_added_after_what_the_file_holds(files):
    _, user = files
    write(user, '# mine\n[profiles.old]\naccount = "a"\n')
    text = profiles.profile_text("new", {"scheduler": "slurm", "partition": "p q", "sacct": True},
                                 ["partition p q: 2 node(s)"], "slurm")  # fmt: skip
    profiles.add_profile(user, "new", text)
    kept = user.read_text()
    assert kept.startswith('# mine\n[profiles.old]\naccount = "a"\n')
    assert profiles.read_profiles(user)["new"] == {"scheduler": "slurm", "partition": "p q",
                                                   "sacct": True}  # fmt: skip
    with pytest.raises(SpecError, match="profile 'new' exists already"):
        profiles.add_profile(user, "new", text)
    assert user.read_text() == kept


def test_profile_show_and_list_on_the_command_line(files, tmp_path):
    site, user = files
    write(site, '[profiles.c]\npartition = "gpu"\ncores_per_node = 32\n')
    shown = hpcbench("profile", "show", "c", "--spec", str(REPO / "jobs/demo.toml"), "--nodes",
                     "2", cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("resources.partition") and "'gpu'" in line
               and f"site profile c ({site}): partition" in line for line in lines)  # fmt: skip
    assert any(line.startswith("resources.nodes") and "flag --nodes" in line for line in lines)
    assert any(line.startswith("resources.time") and "00:20:00" in line for line in lines)
    assert any(line.startswith("cores_per_node") and "32" in line for line in lines)
    listed = hpcbench("profile", "list", cwd=tmp_path)
    assert listed.stdout.strip() == f"c\t{site}"
    bad = hpcbench("profile", "show", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "profile 'nope'" in bad.stderr
