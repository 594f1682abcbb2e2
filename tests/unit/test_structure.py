"""The package's structure, read from its source with ``ast``: no import circle (function-local and
``TYPE_CHECKING`` imports counted), a batch system's knowledge in its own scheduler module, and
modules and functions short enough to read."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from tests.unit.test_launch_layout import imported_modules, module_name

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hpcbench", "data_prep")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def product_sources() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (REPO / d).rglob("*.py"))


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the product it imports, each import at the most specific module
    it names (``from hpcbench.jobs import registry`` is an import of ``hpcbench.jobs.registry``)."""
    files = product_sources()
    modules = {module_name(p) for p in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        name = module_name(path)
        found = imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")
        targets = set()
        for imported in found:
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        # importing hpcbench.a.b names hpcbench.a too; a package's face is not an edge of its own
        graph[name] = {t for t in targets if not any(o.startswith(t + ".") for o in targets)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_among_the_product_modules():
    graph = import_graph()
    assert len(graph) > 100 and graph["hpcbench.cli"]  # the walk found the modules and imports
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_job_spec_and_the_launchers_stand_below_the_schedulers():
    graph = import_graph()
    assert graph["hpcbench.jobs.spec"] == set()
    assert not any(
        m.startswith("hpcbench.jobs.schedulers") for m in graph["hpcbench.jobs.launchers"]
    )


def test_slurm_is_known_only_to_its_scheduler_module():
    found = subprocess.run(
        ["git", "grep", "-lE", "format_time_slurm|check_slurm|srun_words", "--", "hpcbench"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert found == ["hpcbench/jobs/schedulers/slurm.py"]


def test_no_function_local_import_of_hpcbench_in_the_scheduler_modules():
    local = []
    for path in sorted((REPO / "hpcbench/jobs/schedulers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith(
                        "hpcbench"
                    ):
                        local.append(f"{path.name}:{inner.lineno}")
    assert local == []


def test_modules_and_functions_are_short_enough_to_read():
    long_modules, long_functions = [], []
    for path in product_sources():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO).as_posix()
        if text.count("\n") > MAX_MODULE_LINES:
            long_modules.append(f"{where} ({text.count(chr(10))} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{where}:{node.name} ({lines} lines)")
    assert long_modules == [], f"over {MAX_MODULE_LINES} lines"
    assert long_functions == [], f"over {MAX_FUNCTION_LINES} lines"
