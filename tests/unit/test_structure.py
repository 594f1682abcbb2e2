"""The package's structure, read from its source with ``ast``: no import circle (function-local and
``TYPE_CHECKING`` imports counted), a batch system's knowledge in its own scheduler module, and
modules and functions short enough to read."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

from tests.unit.test_launch_layout import module_name

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hpcbench",)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300
FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", -1)  # Python 3.12: f-strings are tokens


def product_sources() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (REPO / d).rglob("*.py"))


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The product modules ``path`` (module ``name``) names in its imports, each at the most
    specific module it names: ``from hpcbench.jobs import job_store`` imports
    ``hpcbench.jobs.job_store``; ``from hpcbench.jobs.accounting import ask`` imports the package
    ``hpcbench.jobs.accounting`` itself (its ``__init__.py``). Literal ``import_module`` names
    count; a name built at run time does not."""

    def known(dotted: str) -> str:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {known(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else known(base))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.add(known(str(node.args[0].value)))
    return found - {"", name}


def import_graph() -> dict[str, set[str]]:
    """module -> the product modules importing it runs: the ones it names (:func:`imports_of`)
    and the packages above them, whose ``__init__.py`` runs first, except the packages above the
    module itself (they ran before it)."""
    files = product_sources()
    modules = {module_name(p) for p in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        name = module_name(path)
        above_self = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}
        targets = set()
        for imported in imports_of(path, name, modules):
            targets.add(imported)
            parent = imported.rpartition(".")[0]
            while parent:
                if parent in modules and parent not in above_self:
                    targets.add(parent)
                parent = parent.rpartition(".")[0]
        graph[name] = targets - {name}
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
    assert len(graph) > 100 and graph["hpcbench.cli.main"]  # the walk found the modules and imports
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


def test_slurm_words_are_only_in_slurm_files():
    found = subprocess.run(
        ["git", "grep", "-lE", "format_time_slurm|check_slurm|srun_words", "--", "hpcbench"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert found and all(
        f.startswith("hpcbench/jobs/schedulers/slurm/") or f == "hpcbench/jobs/launchers/srun.py"
        for f in found
    ), found


def test_no_function_local_import_of_hpcbench_in_the_scheduler_modules():
    local = []
    for path in sorted((REPO / "hpcbench/jobs/schedulers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith(
                        "hpcbench"
                    ):
                        local.append(f"{path.name}:{inner.lineno}")
    assert local == []


def long_parts() -> list[str]:
    """Every product module over :data:`MAX_MODULE_LINES` lines, and ``module:name`` of every
    function over :data:`MAX_FUNCTION_LINES` and class over :data:`MAX_CLASS_LINES`."""
    found = []
    for path in product_sources():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO).as_posix()
        if text.count("\n") > MAX_MODULE_LINES:
            found.append(where)
        for node in ast.walk(ast.parse(text)):
            limit = (
                MAX_FUNCTION_LINES
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else MAX_CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else None
            )
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                found.append(f"{where}:{node.name}")
    return found


def test_modules_functions_and_classes_are_short_enough_to_read():
    found = long_parts()
    assert sorted(found) == [], "over the limits"


def test_an_import_of_a_package_s_name_is_an_edge_to_its_init(tmp_path):
    """``from pkg import helper`` runs ``pkg/__init__.py``: a module of ``pkg`` doing so while the
    package imports it back is a circle, as is one reaching another package's ``__init__.py``."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg import reader\nHELP = 1\n")
    (package / "reader.py").write_text("from pkg import HELP\n")
    (package / "leaf.py").write_text("from pkg import reader\n")
    modules = {"pkg", "pkg.reader", "pkg.leaf"}
    assert imports_of(package / "reader.py", "pkg.reader", modules) == {"pkg"}
    assert imports_of(package / "leaf.py", "pkg.leaf", modules) == {"pkg.reader"}
    assert imports_of(package / "__init__.py", "pkg", modules) == {"pkg.reader"}


# The words that name each batch system, its commands and its environment (whole words, in code:
# identifiers and strings, not comments or docstrings).
SCHEDULER_WORDS = {
    "slurm": ("slurm", "sbatch", "squeue", "scancel", "scontrol", "sacct", "sinfo", "salloc"),
    "pbs": ("pbs", "torque", "openpbs", "qsub", "qstat", "qdel"),
    "sge": ("sge", "gridengine", "qacct", "qsub", "qstat", "qdel"),
    "lsf": ("lsf", "lsb", "bsub", "bjobs", "bkill", "bacct", "blaunch"),
}
SCHEDULERS_DIR = ["hpcbench", "jobs", "schedulers"]
# the run side's half of each batch system: what its processes read of their environment
ENVIRONMENTS_DIR = ["hpcbench", "environments"]


def code_words(path: Path) -> set[str]:
    """The lower-case words of ``path``'s identifiers and strings, docstrings and comments left
    out (``format_time_slurm`` holds ``slurm``)."""
    source = path.read_text(encoding="utf-8")
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(first.lineno)
    words: set[str] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and token.start[0] in docstrings
        ):
            continue
        if token.type in (tokenize.NAME, tokenize.STRING, FSTRING_MIDDLE):
            words |= set(re.findall(r"[a-z]+", token.string.lower()))
    return words


def owner_of(where: str) -> str:
    """The batch system whose files ``where`` is one of ('' for none): its package's, its run
    side's module (``hpcbench/environments/NAME.py``), or its own launcher's or container
    plug-in's (SLURM's srun and pyxis)."""
    parts = where.split("/")
    if parts[:3] == SCHEDULERS_DIR:
        return parts[3]
    if parts[:2] == ENVIRONMENTS_DIR:
        return parts[2].removesuffix(".py")
    own = {"hpcbench/jobs/launchers/srun.py": "slurm", "hpcbench/jobs/containers/pyxis.py": "slurm"}
    return own.get(where, "")


def test_no_batch_system_is_named_outside_its_own_files():
    """A batch system's package (``hpcbench/jobs/schedulers/NAME/``) and its run side's module
    (``hpcbench/environments/NAME.py``) hold everything about it; its launcher and its container
    plug-in (``srun.py`` and ``pyxis.py`` for SLURM) name it too. Nothing else does: the spec's options, the profiles' keys, the CLI's
    flags and help texts, the report's words all come from the classes."""
    every = {w for words in SCHEDULER_WORDS.values() for w in words}
    found = []
    for path in product_sources():
        where = path.relative_to(REPO).as_posix()
        mine = set(SCHEDULER_WORDS.get(owner_of(where), ()))
        named = code_words(path) & (every - mine)
        found += [f"{where}: {word}" for word in sorted(named)]
    assert found == []


def test_a_batch_system_s_files_are_its_package_its_run_side_and_its_own_launcher():
    assert owner_of("hpcbench/jobs/schedulers/sge/accounting.py") == "sge"
    assert owner_of("hpcbench/environments/slurm.py") == "slurm"
    assert owner_of("hpcbench/jobs/launchers/srun.py") == "slurm"
    assert owner_of("hpcbench/jobs/containers/pyxis.py") == "slurm"
    assert owner_of("hpcbench/this_rank.py") == ""
    assert owner_of("hpcbench/environments/base.py") not in SCHEDULER_WORDS


def test_the_words_of_code_leave_out_comments_and_docstrings(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        '"""Submits with sbatch."""\n# qsub in a comment\nTOOL = "bsub -J x"\nformat_time_slurm = 1\n'
    )
    assert code_words(module) & {"sbatch", "qsub", "bsub", "slurm"} == {"bsub", "slurm"}
