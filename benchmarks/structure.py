"""Figures of the code's shape that a restructuring is judged by, read from the source alone
(nothing of hpcbench runs but the import of one dataclass):

- ``dict[str, Any]``: annotations of an untyped document (``dict``/``Dict``/``Mapping`` of
  ``str`` to ``Any``), counted in hpcbench/;
- the fields of the trainer's shared run state (``hpcbench.train.training.Training``, or the
  class named by ``--state``: ``hpcbench.train.start:Training`` before the run state was
  split), and of each dataclass one of its fields holds;
- the functions reachable from the trainer's entry (``hpcbench/train/entry.py:run_training``) by a static
  call graph: a name resolved in its module or through its imports, a method call resolved to
  the methods of that name in the modules the caller's module imports (an approximation, the
  same before and after);
- the Scheduler base's public and private members (what it defines itself), and those of each
  part it includes (the mixins of ``hpcbench.jobs.schedulers``).

    python benchmarks/structure.py
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
UNTYPED = re.compile(r"\b(dict|Dict|Mapping|MutableMapping)\[str,\s*(typing\.)?Any\]")


def untyped_documents() -> tuple[int, int]:
    count = files = 0
    for path in (ROOT / "hpcbench").rglob("*.py"):
        found = len(UNTYPED.findall(path.read_text()))
        count += found
        files += bool(found)
    return count, files


class Module:
    def __init__(self, name: str, path: Path):
        self.name = name
        self.tree = ast.parse(path.read_text())
        self.functions: dict[str, ast.AST] = {}
        self.methods: dict[str, list[str]] = {}
        self.imported: dict[str, str] = {}  # local name -> "module" or "module:name"
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        key = f"{node.name}.{item.name}"
                        self.functions[key] = item
                        self.methods.setdefault(item.name, []).append(key)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imported[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = f"{node.module}:{alias.name}"


def modules() -> dict[str, Module]:
    found = {}
    for path in (ROOT / "hpcbench").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        found[".".join(parts)] = Module(".".join(parts), path)
    return found


def reachable(start: str, function: str) -> tuple[int, int]:
    mods = modules()
    todo = [(start, function)]
    seen: set[tuple[str, str]] = set()

    def target(mod: Module, local: str) -> list[tuple[str, str]]:
        if local in mod.functions:
            return [(mod.name, local)]
        where = mod.imported.get(local, "")
        if ":" in where:
            module, name = where.split(":")
            if f"{module}.{name}" in mods:
                return []
            if module in mods:
                return [(module, name)] + [
                    (module, k)
                    for k in mods[module].functions
                    if k.startswith(f"{name}.") and k.endswith(("__init__", "__post_init__"))
                ]
        return []

    while todo:
        key = todo.pop()
        if key in seen or key[0] not in mods or key[1] not in mods[key[0]].functions:
            continue
        seen.add(key)
        mod = mods[key[0]]
        near = [mod] + [
            mods[w.split(":")[0]] for w in mod.imported.values() if w.split(":")[0] in mods
        ]
        for node in ast.walk(mod.functions[key[1]]):
            if not isinstance(node, ast.Call):
                continue
            call = node.func
            if isinstance(call, ast.Name):
                todo += target(mod, call.id)
            elif isinstance(call, ast.Attribute):
                base = call.value
                module = mod.imported.get(base.id, "") if isinstance(base, ast.Name) else ""
                module = module.replace(":", ".")
                if module in mods:
                    todo.append((module, call.attr))
                else:
                    for other in near:
                        todo += [(other.name, m) for m in other.methods.get(call.attr, [])]
    return len(seen), len({m for m, _ in seen})


def own_members(cls: type) -> list[str]:
    return [k for k in vars(cls) if not (k.startswith("__") and k.endswith("__"))]


def members(cls: type) -> tuple[int, int]:
    """The members ``cls`` itself defines (``vars``, dunders left out), and how many are
    methods."""
    own = own_members(cls)
    methods = [
        k
        for k in own
        if callable(getattr(cls, k))
        or isinstance(vars(cls)[k], (staticmethod, classmethod, property))
    ]
    return len(own), len(methods)


def every_member(cls: type) -> set[str]:
    """The members of ``cls`` and of every class it inherits from, but ``object``."""
    return {k for c in cls.__mro__ if c is not object for k in own_members(c)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", default="hpcbench.train.training:Training")
    args = parser.parse_args()
    count, files = untyped_documents()
    print(f"dict[str, Any] annotations: {count} in {files} files")
    module, name = args.state.split(":")
    import dataclasses

    state = getattr(importlib.import_module(module), name)
    print(f"{args.state} fields: {len(dataclasses.fields(state))}")
    names = vars(sys.modules[state.__module__])
    for f in dataclasses.fields(state):
        part = names.get(f.type) if isinstance(f.type, str) else f.type
        if isinstance(part, type) and dataclasses.is_dataclass(part):
            print(f"  {f.name} ({part.__name__}) fields: {len(dataclasses.fields(part))}")
    functions, mods = reachable("hpcbench.train.entry", "run_training")
    print(
        f"functions reachable from hpcbench/train/entry.py:run_training: {functions} in {mods} modules"
    )
    from hpcbench.jobs.schedulers.base import Scheduler

    own, methods = members(Scheduler)
    print(
        f"Scheduler base: {own} members ({methods} methods, {own - methods} attributes); "
        f"with its parts: {len(every_member(Scheduler))}"
    )
    for part in Scheduler.__mro__[1:]:
        if part.__module__.startswith("hpcbench.jobs.schedulers."):
            own, methods = members(part)
            print(f"  part {part.__name__} ({part.__module__}): {own} members ({methods} methods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
