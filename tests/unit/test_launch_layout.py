"""The run side's layering: the data reader, the converters, the schedulers and the launch module
itself stand below the trainer and never import it (read from their source with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BELOW_THE_TRAINER = (
    "hpcbench/data",
    "hpcbench/data_prep",
    "hpcbench/jobs/schedulers",
    "hpcbench/environments",
    "hpcbench/this_rank.py",
)
TRAINER = "hpcbench.train"


def module_name(path: Path) -> str:
    """The dotted name a source file is imported as."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every module ``source`` (the text of ``module``) imports, relative imports resolved, plus
    the literal names it hands to ``importlib.import_module`` or ``__import__``."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if name in ("import_module", "__import__") and isinstance(arg, ast.Constant):
                found.append(str(arg.value))
    return found


def imports_trainer(source: str, module: str, is_package: bool = False) -> list[str]:
    return [
        m
        for m in imported_modules(source, module, is_package)
        if m == TRAINER or m.startswith(TRAINER + ".")
    ]


def sources() -> list[Path]:
    files: list[Path] = []
    for place in BELOW_THE_TRAINER:
        path = REPO / place
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def test_the_layers_below_the_trainer_never_import_it():
    files = sources()
    assert len(files) > 10  # the walk found the packages
    offenders = {
        str(path.relative_to(REPO)): hits
        for path in files
        if (
            hits := imports_trainer(
                path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
            )
        )
    }
    assert offenders == {}, f"these import the trainer ({TRAINER}): {offenders}"


@pytest.mark.parametrize(
    "source,module",
    [
        ("import hpcbench.train.config", "hpcbench.data_prep.convert"),
        ("from hpcbench.train import loop", "hpcbench.data.reader"),
        ("from hpcbench import train", "hpcbench.data.reader"),
        (
            "def f():\n    from hpcbench.train.runtime import job_port\n",
            "hpcbench.jobs.schedulers.local.scheduler",
        ),
        ("from ..train.config import ConfigError", "hpcbench.data.reader"),
        (
            "import importlib\nimportlib.import_module('hpcbench.train.entry')",
            "hpcbench.data_prep.arrays",
        ),
    ],
)
def test_the_check_sees_every_form_of_import(source, module):
    assert imports_trainer(source, module)


def test_the_check_lets_other_imports_pass():
    source = "import hpcbench.this_rank\nfrom hpcbench import this_rank\nfrom . import manifest\n"
    assert imports_trainer(source, "hpcbench.data.reader") == []
    assert imports_trainer("from . import train", "hpcbench.data", is_package=True) == []
