"""Reading a job spec: a TOML file, its ``[smoke]`` form and CLI-style overrides, checked field by
field into a :class:`~.spec.JobSpec`.

Validation is strict: an unknown key (with a did-you-mean), a wrong type, a non-positive count or a
malformed time limit raises :class:`~.spec.SpecError` with a one-line message naming the field and
value. ``scheduler.name`` is checked against the schedulers the registry knows.

No torch, no third-party imports: this module runs on login nodes.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from pathlib import Path
from typing import Any

from hpcbench.jobs.profiles import Profile, load_profile
from hpcbench.jobs.spec import (
    DEFAULT_PROGRAM_MODULE,
    JobSpec,
    OwnOption,
    Program,
    SpecError,
)
from hpcbench.jobs.spec_options import own_options
from hpcbench.jobs.spec_values import check_value, is_utf8
from hpcbench.tomlfile import TomlFileError, read_toml_file

MAX_SPEC_BYTES = 4 << 20  # a job spec is a few KiB; more is not one
_PROGRAM_KINDS = frozenset({"module", "script", "command"})


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _build(
    cls: type,
    table: Any,
    path: str,
    origin: dict[str, str],
    where: str,
    typed: frozenset[str] = frozenset(),
) -> Any:
    """Build dataclass ``cls`` from a TOML table, checking every key and value. ``origin``
    names where a field's value came from (a flag, a profile), for its errors; the values of
    the fields in ``typed`` came from a file although named (a profile's), and are not read
    from text as a flag's are."""
    label = path or "spec"
    if not isinstance(table, dict):
        raise SpecError(f"{where}{label}: expected a table, got {table!r}")
    fields = _table_fields(cls, path)
    kwargs: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        dotted = f"{path}.{key}" if path else key
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(fields)})"
            raise SpecError(f"{where}{dotted}: unknown key{hint}")
        f = fields[key]
        if isinstance(f, dataclasses.Field) and f.metadata["kind"] == "table":
            kwargs[f.name] = _build(f.metadata["cls"], value, dotted, origin, where, typed)
            continue
        meta = f.metadata
        try:
            from_cli = dotted in origin and dotted not in typed
            checked = check_value(meta["kind"], meta, value, from_cli=from_cli)
        except ValueError as err:
            name = f"{origin[dotted]} ({dotted})" if dotted in origin else f"{where}{dotted}"
            raise SpecError(f"{name}: {err}, got {value!r}") from None
        if isinstance(f, OwnOption):
            own[key] = checked
        else:
            kwargs[f.name] = checked
    for key, f in fields.items():
        if f.metadata.get("required") and key not in kwargs:
            raise SpecError(f"{where}{path}.{key}: required")
    if own:
        kwargs["own"] = own
    return cls(**kwargs)


def _table_fields(cls: type, path: str) -> dict[str, dataclasses.Field | OwnOption]:
    """The keys a table of ``cls`` takes, in order: its fields, with the options the batch
    systems and launchers declare for it (:mod:`.spec_options`) where its ``own`` field stands."""
    fields: dict[str, dataclasses.Field | OwnOption] = {}
    for f in dataclasses.fields(cls):
        kind = f.metadata.get("kind")
        if kind == "own":
            fields.update((o.key, o) for o in own_options(path))
        elif kind != "internal":
            fields[_key(f)] = f
    return fields


def _merge(base: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = base
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise SpecError(f"{'.'.join(parts[:-1])}: expected a table")
    parts_key = parts[-1]
    if isinstance(value, list) and isinstance(node.get(parts_key), list):
        node[parts_key] = [*node[parts_key], *value]  # repeatable flags add to the file's list
    elif isinstance(value, dict) and isinstance(node.get(parts_key), dict):
        node[parts_key] = {**node[parts_key], **value}
    else:
        node[parts_key] = value


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML spec file; a missing or malformed file is a one-line SpecError."""
    p = Path(path)
    if not is_utf8(str(p)):
        raise SpecError(f"{ascii(str(p))}: the spec file's name is not UTF-8; rename it")
    try:
        return read_toml_file(
            p, MAX_SPEC_BYTES, "a job spec file", "a job spec", missing="no such spec file"
        )
    except TomlFileError as err:
        raise SpecError(str(err)) from None


def apply_smoke(merged: dict[str, Any], smoke: bool, where: str) -> dict[str, Any]:
    """The spec file's own ``[smoke]`` table (tables like the file's: ``resources``, ``program``,
    …) replaces the values it names when ``smoke`` is asked for (``--smoke``: the job's
    minutes-long form on a small or test cluster: a tiny model, the built-in data); its
    ``unset`` list names fields (``"resources.account"``) the smoke form leaves at their
    defaults. Without ``smoke`` it is set aside. It is checked either way, by the file's rules."""
    table = merged.pop("smoke", None)
    if table is None:
        if smoke:
            raise SpecError(f"{where}--smoke: this spec has no [smoke] table")
        return merged
    if not isinstance(table, dict):
        raise SpecError(f"{where}smoke: expected a table of the spec's tables")
    table = dict(table)
    unset = table.pop("unset", [])
    if not isinstance(unset, list) or not all(
        isinstance(u, str) and u.count(".") == 1 for u in unset
    ):
        raise SpecError(f'{where}smoke.unset: expected a list of fields like "resources.account"')
    for dotted in unset:  # a misspelt field would silently stay set in the smoke form
        section, key = dotted.replace("-", "_").split(".")
        tables = {
            _key(f): f for f in dataclasses.fields(JobSpec) if f.metadata.get("kind") == "table"
        }
        known = (
            set(_table_fields(tables[section].metadata["cls"], section))
            if section in tables
            else set()
        )
        if key not in known:
            raise SpecError(f"{where}smoke.unset: {dotted!r} is not a field of the spec")

    def deep(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = deep(out[key], value)
            else:
                out[key] = value
        return out

    smoked = copy.deepcopy(merged)
    for dotted in unset:  # either spelling, of the field and of the file's key
        section, key = dotted.replace("-", "_").split(".")
        for name, values in smoked.items():
            if name.replace("-", "_") == section and isinstance(values, dict):
                for found in [k for k in values if k.replace("-", "_") == key]:
                    del values[found]
    smoked = deep(smoked, table)
    if not smoke:  # the smoke form is checked too, so that a broken one is found before use
        _build(JobSpec, copy.deepcopy(smoked), "", {}, f"{where}smoke: ")
        return merged
    return smoked


def _deep(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        alike = [k for k in out if k.replace("-", "_") == key.replace("-", "_")]
        old = out.pop(alike[0]) if alike else None
        out[key] = _deep(old, value) if isinstance(value, dict) and isinstance(old, dict) else value
    return out


def _given(table: dict[str, Any], dotted: str) -> bool:
    """Whether ``table`` (a spec file's tables) sets the field ``dotted`` (either spelling)."""
    node: Any = table
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return False
        keys = [k for k in node if k.replace("-", "_") == part]
        if not keys:
            return False
        node = node[keys[0]]
    return True


def _with_profile(
    merged: dict[str, Any], profile: Profile, origin: dict[str, str]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The spec file's tables over the profile's; each field the profile fills is named in
    ``origin``. The profile's values are checked on their own first, so that a bad one is
    found even where the spec replaces it."""
    table, named = profile.spec_table()
    _build(JobSpec, copy.deepcopy(table), "", named, "", frozenset(named))
    for dotted, label in named.items():
        if not _given(merged, dotted):
            origin[dotted] = label
    return _deep(table, merged), frozenset(named)


def build_spec(
    data: dict[str, Any] | None = None,
    overrides: dict[str, tuple[str, Any]] | None = None,
    source: str | None = None,
    smoke: bool = False,
    profile: Profile | None = None,
) -> JobSpec:
    """Validate ``data`` (a parsed spec file) over ``profile`` with ``overrides`` on top.

    ``overrides`` maps a dotted field (``"resources.nodes"``) to ``(origin, value)``, where origin
    is what the user typed (``"--nodes"``) so that errors name it. ``smoke``: the file's
    ``[smoke]`` form (:func:`apply_smoke`). ``profile``: a cluster's settings under the file's
    (:mod:`hpcbench.jobs.profiles`).
    """
    where0 = f"{source}: " if source else ""
    merged: dict[str, Any] = apply_smoke(copy.deepcopy(data or {}), smoke, where0)
    origin: dict[str, str] = {}
    typed: frozenset[str] = frozenset()
    if profile is not None:
        merged, typed = _with_profile(merged, profile, origin)
    # A program named on the command line replaces the file's program of another kind.
    chosen = {k for k in _PROGRAM_KINDS if f"program.{k}" in (overrides or {})}
    if chosen and isinstance(merged.get("program"), dict):
        for kind in _PROGRAM_KINDS - chosen:
            merged["program"].pop(kind, None)
    for dotted, (label, value) in (overrides or {}).items():
        _merge(merged, dotted, value)
        origin[dotted] = label
    typed = frozenset(t for t in typed if t not in (overrides or {}))
    where = f"{source}: " if source else ""
    spec = _build(JobSpec, merged, "", origin, where, typed)
    spec.source = source
    _check_program(spec.program, merged.get("program", {}), where)
    return spec


def _check_program(program: Program, table: dict[str, Any], where: str) -> None:
    given = [k for k in ("module", "script", "command") if table.get(k) not in (None, [], "")]
    if len(given) > 1:
        raise SpecError(
            f"{where}program: set only one of module, script or command (got {', '.join(given)})"
        )
    if program.command == []:
        raise SpecError(f"{where}program.command: must not be empty")
    if not given:
        program.module = DEFAULT_PROGRAM_MODULE
    if program.config:
        _check_program_config(program, where)


def _check_program_config(program: Program, where: str) -> None:
    """The file must be there now: the job starts in the directory it is submitted from, where
    a relative path is read. The trainer's own file is checked as the trainer will read it."""
    path = Path(program.config or "").expanduser()
    if not path.is_file():
        raise SpecError(
            f"{where}program.config: no such file {program.config!r} (a relative path is read "
            "from the directory you submit from, where the job starts)"
        )
    if program.module == DEFAULT_PROGRAM_MODULE:
        from hpcbench.train.config import ConfigError  # stdlib only: no torch here
        from hpcbench.train.config_file import read_toml

        try:
            read_toml(str(path))
        except ConfigError as err:
            raise SpecError(f"{where}program.config: {err}") from None


def load_spec(
    path: str | Path | None = None,
    overrides: dict[str, tuple[str, Any]] | None = None,
    smoke: bool = False,
    profile: str | None = None,
) -> JobSpec:
    """Load a spec file (or start from the defaults) over the chosen cluster profile
    (``profile``, else ``$HPCBENCH_PROFILE``, else none) and apply CLI-style overrides;
    ``smoke``: its ``[smoke]`` form."""
    data = read_spec_file(path) if path is not None else {}
    source = str(path) if path is not None else None
    return build_spec(data, overrides, source, smoke, load_profile(profile))


def explain(
    path: str | Path | None = None,
    overrides: dict[str, tuple[str, Any]] | None = None,
    smoke: bool = False,
    profile: str | None = None,
) -> list[tuple[str, Any, str]]:
    """Every field of the effective spec: (dotted field, value, where it came from: a flag, the
    job spec, a profile, or the default), in the spec's order."""
    data = read_spec_file(path) if path is not None else {}
    source = str(path) if path is not None else None
    chosen = load_profile(profile)
    spec = build_spec(data, overrides, source, smoke, chosen)
    smoked = apply_smoke(copy.deepcopy(data), smoke, "")
    by_profile = chosen.spec_table()[1] if chosen is not None else {}
    rows = []
    for dotted, value in _fields(spec):
        if dotted in (overrides or {}):
            came = f"flag {(overrides or {})[dotted][0]}"
        elif _given(smoked, dotted):
            came = f"job spec {source}" + (" [smoke]" if smoke else "")
        elif dotted in by_profile:
            came = by_profile[dotted]
        else:
            came = "default"
        rows.append((dotted, value, came))
    return rows


def _fields(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, f in _table_fields(type(obj), prefix.rstrip(".")).items():
        if isinstance(f, OwnOption):
            out.append((f"{prefix}{key}", obj.own.get(key, f.default)))
            continue
        value = getattr(obj, f.name)
        dotted = f"{prefix}{key}"
        if f.metadata.get("kind") == "table" and value is not None:
            out += _fields(value, f"{dotted}.")
        else:
            out.append((dotted, value))
    return out
