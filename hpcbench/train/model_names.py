"""The model names the trainer knows, read without importing torch: its built-ins, and the
classifiers the installed torchvision builds (the lowercase names in the ``__all__`` of each of
``torchvision/models/*.py``, read as source), so that a submission on a login node refuses
``--model resnet19`` with "did you mean resnet18?" before anything is queued."""

from __future__ import annotations

import ast
import difflib
import importlib.util
from functools import lru_cache
from pathlib import Path

BUILTINS = ("small_cnn", "mlp", "rnn")
#: torchvision's modules under models/ that hold no classifier
_NOT_CLASSIFIERS = frozenset({"feature_extraction"})


@lru_cache(maxsize=1)
def torchvision_models() -> frozenset[str] | None:
    """The installed torchvision's classifier names; None where it is not installed (or its
    source cannot be read): then no name can be called unknown."""
    try:
        found = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    names: set[str] = set()
    for path in sorted(Path(next(iter(found.submodule_search_locations)), "models").glob("*.py")):
        if path.name.startswith("_") or path.stem in _NOT_CLASSIFIERS:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            return None
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                elements = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else []
                names.update(
                    e.value for e in elements
                    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.islower()
                )  # fmt: skip
    return frozenset(names) or None


def unknown_model(name: str) -> str | None:
    """Why ``name`` (no ``:``) is no model the trainer can build, with the closest known one;
    None when it is one, or when torchvision's names cannot be read here."""
    if name in BUILTINS:
        return None
    vision = torchvision_models()
    if vision is None or name in vision:
        return None
    close = difflib.get_close_matches(name, [*BUILTINS, *sorted(vision)], n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"{name}: no such model{hint}; give small_cnn, mlp, rnn, a torchvision classifier "
        "(resnet18, vit_b_16, ...) or your own as package.module:factory or path/to/file.py:factory"
    )
