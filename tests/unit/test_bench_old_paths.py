"""The import paths the API reference documented before ``hpcbench.bench`` was grouped still import:
the same module object as the new path, with a DeprecationWarning naming it."""

from __future__ import annotations

import json
import subprocess
import sys

from hpcbench.bench.old_paths import OLD_PATHS

PROBE = r"""
import importlib, json, sys, warnings
old, new = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = importlib.import_module(old)
parent, _, child = old.rpartition(".")
fresh = {}
exec(f"from {parent} import {child} as again", fresh)
print(json.dumps({
    "same": module is importlib.import_module(new),
    "again": fresh["again"] is module,
    "name": module.__name__,
    "warnings": [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)],
}))
"""


def _probe(old: str, new: str) -> dict:
    # a fresh interpreter each time: the old name must not be in sys.modules already
    done = subprocess.run(
        [sys.executable, "-c", PROBE, old, new], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_every_old_path_is_the_module_under_its_new_name_with_a_warning_naming_it() -> None:
    assert len(OLD_PATHS) == 10
    for old, new in OLD_PATHS.items():
        seen = _probe(old, new)
        assert seen["same"] and seen["again"], old
        assert seen["name"] == new
        assert any(old in text and new in text for text in seen["warnings"]), (
            old,
            seen["warnings"],
        )


def test_a_name_that_never_existed_is_still_not_found() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import hpcbench.bench.nothing_here"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'hpcbench.bench.nothing_here'" in done.stderr


def test_the_new_paths_exist_and_the_old_files_are_gone() -> None:
    import importlib.util
    from pathlib import Path

    import hpcbench.bench

    root = Path(hpcbench.bench.__file__).parent
    for old, new in OLD_PATHS.items():
        assert importlib.util.find_spec(new) is not None, new
        assert not (root / f"{old.rpartition('.')[2]}.py").exists(), old
