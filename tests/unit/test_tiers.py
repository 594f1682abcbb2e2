"""The tier table (tests/tiers.toml) names every test module, and only those; each fast
representative of a full module is a test that exists; the ``fast`` mark follows the table."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, TESTS, tier_table

pytestmark = pytest.mark.xdist_group("tiers")  # one process collects once for all three tests


def test_every_test_module_has_a_tier_and_every_entry_a_module():
    modules, _ = tier_table()
    on_disk = {p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}
    missing = sorted(on_disk - set(modules))
    assert not missing, f"tests/tiers.toml names no tier for {missing}: add each as fast or full"
    stale = sorted(set(modules) - on_disk)
    assert not stale, f"tests/tiers.toml names modules that do not exist: {stale}"
    bad = {m: t for m, t in modules.items() if t not in ("fast", "full")}
    assert not bad, f"a tier is fast or full: {bad}"


@pytest.fixture(scope="module")
def collected_fast() -> tuple[set[str], set[str]]:
    """(every test id, the ids marked fast) of the full modules with representatives, this module
    and one cluster module: one ``pytest --collect-only`` of each kind."""
    _, representatives = tier_table()
    paths = [f"tests/{m}" for m in representatives]
    paths += ["tests/unit/test_tiers.py", "tests/cluster/test_sge.py"]

    def collect(*marks: str) -> set[str]:
        listed = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             *marks, *paths],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return {line for line in listed.stdout.splitlines() if line.startswith("tests/")}

    return collect(), collect("-m", "fast")


def test_representatives_are_tests_of_full_modules_that_exist(collected_fast):
    modules, representatives = tier_table()
    everything, _ = collected_fast
    for module, ids in representatives.items():
        assert modules.get(module) == "full", f"{module}: representatives are for full modules"
        collected = {t.rsplit("::", 1)[1] for t in everything if t.startswith(f"tests/{module}::")}
        if not collected:
            continue  # the module's own requirements are missing here (torch, MPI): it skips
        unknown = sorted(set(ids) - collected)
        assert not unknown, f"tests/tiers.toml: {module} has no tests {unknown}"


def test_the_fast_mark_selects_the_fast_modules_and_the_representatives(collected_fast):
    everything, chosen = collected_fast
    assert any(t.startswith("tests/unit/test_tiers.py::") for t in chosen), chosen
    assert any(t.startswith("tests/cluster/test_sge.py::") for t in everything), everything
    assert not any(t.startswith("tests/cluster/") for t in chosen), chosen
    _, representatives = tier_table()
    for module, ids in representatives.items():
        if not any(t.startswith(f"tests/{module}::") for t in everything):
            continue  # skipped here (torch, MPI missing)
        got = {t.rsplit("::", 1)[1] for t in chosen if t.startswith(f"tests/{module}::")}
        assert got == set(ids), (module, got ^ set(ids))
