"""The tier table (tests/tiers.toml) names every test module, and only those; each fast
representative of a full module is a test that exists; the ``fast`` mark follows the table."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, TESTS, tier_table


def test_every_test_module_has_a_tier_and_every_entry_a_module():
    modules, _ = tier_table()
    on_disk = {p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}
    missing = sorted(on_disk - set(modules))
    assert not missing, f"tests/tiers.toml names no tier for {missing}: add each as fast or full"
    stale = sorted(set(modules) - on_disk)
    assert not stale, f"tests/tiers.toml names modules that do not exist: {stale}"
    bad = {m: t for m, t in modules.items() if t not in ("fast", "full")}
    assert not bad, f"a tier is fast or full: {bad}"


def test_representatives_are_tests_of_full_modules_that_exist():
    modules, representatives = tier_table()
    for module, ids in representatives.items():
        assert modules.get(module) == "full", f"{module}: representatives are for full modules"
        listed = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "-p", "no:randomly", f"tests/{module}"],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        collected = {line.split("::", 1)[1] for line in listed.stdout.splitlines() if "::" in line}
        unknown = sorted(set(ids) - collected)
        if "skipped" in listed.stdout and not collected:
            continue  # the module's own requirements are missing here (torch, MPI): it skips
        assert not unknown, f"tests/tiers.toml: {module} has no tests {unknown}"


def test_the_fast_mark_selects_the_fast_modules_and_the_representatives():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "fast",
         "-p", "no:cacheprovider", "tests/unit/test_tiers.py", "tests/integration/test_trainer.py",
         "tests/cluster/test_sge.py"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    chosen = {line for line in listed.stdout.splitlines() if "::" in line}
    assert any(line.startswith("tests/unit/test_tiers.py::") for line in chosen), listed.stdout
    assert not any(line.startswith("tests/cluster/") for line in chosen), listed.stdout
    _, representatives = tier_table()
    trainer = {line.split("::", 1)[1] for line in chosen if "test_trainer.py" in line}
    assert trainer <= set(representatives["integration/test_trainer.py"]), trainer
