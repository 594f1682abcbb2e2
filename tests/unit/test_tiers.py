"""The tier table (tests/tiers.toml) names every test module, and only those; each fast
representative of a full module is a test that exists; the ``fast`` mark follows the table."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import IN_CI, REPO, TESTS, tier_table

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
def collected_fast() -> set[str]:
    """The ids ``pytest -m fast`` selects among the full modules with representatives, this
    module and a cluster module (one ``pytest --collect-only``)."""
    _, representatives = tier_table()
    paths = [f"tests/{m}" for m in representatives]
    paths += ["tests/unit/test_tiers.py", "tests/cluster/test_sge.py"]
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "fast", *paths],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert listed.returncode in (0, 5), listed.stdout + listed.stderr  # 5: nothing selected
    return {line for line in listed.stdout.splitlines() if line.startswith("tests/")}


def test_each_representative_exists_and_is_in_the_fast_tier(collected_fast):
    modules, representatives = tier_table()
    for module, ids in representatives.items():
        assert modules.get(module) == "full", f"{module}: representatives are for full modules"
        got = {t.rsplit("::", 1)[1] for t in collected_fast if t.startswith(f"tests/{module}::")}
        if not got and not IN_CI:
            continue  # the module skips here (torch or MPI missing); in CI it may not
        assert got == set(ids), (
            f"tests/tiers.toml, {module}: not fast or no such test: {sorted(set(ids) ^ got)}"
        )


def test_the_fast_tier_holds_fast_modules_and_no_cluster_test(collected_fast):
    assert any(t.startswith("tests/unit/test_tiers.py::") for t in collected_fast), collected_fast
    assert not any(t.startswith("tests/cluster/") for t in collected_fast), collected_fast
