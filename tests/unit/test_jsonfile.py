"""One JSON reader for the package: every way a file can fail to be JSON is one line naming the
file, and the readers of hpcbench's own state files say "damaged" instead of a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.jobs import job_store
from hpcbench.jobs.schedulers.base import SchedulerError
from hpcbench.jsonfile import JsonFileError, parse_json, read_json

DEEP = "[" * 200_000 + "]" * 200_000  # deeper than the parser's recursion allows


@pytest.mark.parametrize(
    "raw,why",
    [
        (b'{"a": 1', "Expecting ',' delimiter at line 1"),
        (b'{"a": "\xff"}', "not UTF-8 text, byte 7"),
        (b"1" * 5000, "Exceeds the limit (4300 digits)"),
        (DEEP.encode(), "nested too deeply"),
    ],
)
def test_a_file_that_is_not_json_is_one_line_naming_it(tmp_path: Path, raw: bytes, why: str):
    path = tmp_path / "x.json"
    path.write_bytes(raw)
    with pytest.raises(JsonFileError) as err:
        read_json(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not valid JSON (") and why in message
    assert "\n" not in message


def test_missing_and_refused_constants(tmp_path: Path):
    with pytest.raises(JsonFileError, match=r"x\.json: missing; run the matrix first"):
        read_json(tmp_path / "x.json", "run the matrix first")

    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not a measurement")

    with pytest.raises(JsonFileError, match=r"not valid JSON \(NaN is not a measurement\)"):
        parse_json('{"t": NaN}', "t.json", parse_constant=refuse)
    assert parse_json(b'{"t": [1, 2.5]}', "t.json") == {"t": [1, 2.5]}


def test_a_job_record_nested_too_deeply_is_damaged_not_a_traceback(tmp_path: Path, monkeypatch):
    """The state directory may sit on a shared filesystem: a record made to overflow the parser
    is a damaged record (one line), as any other that is not the JSON hpcbench writes."""
    monkeypatch.setenv("HPCBENCH_STATE_DIR", str(tmp_path))
    path = tmp_path / "jobs" / "slurm" / "42.json"
    path.parent.mkdir(parents=True)
    path.write_text(DEEP)
    with pytest.raises(SchedulerError, match=r"job record .*42\.json is damaged"):
        job_store.lookup("42", "slurm")


def test_a_byte_order_mark_and_utf16_are_read_as_json_reads_them(tmp_path: Path):
    """Windows tools save metadata JSON with a byte-order mark, or as UTF-16: json.loads reads
    both from bytes, and so must the converters and calibration readers that go through here."""
    for encoding in ("utf-8-sig", "utf-16", "utf-32"):
        path = tmp_path / f"{encoding}.json"
        path.write_bytes('{"images": ["é"]}'.encode(encoding))
        assert read_json(path) == {"images": ["é"]}
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xc3"}')
    with pytest.raises(JsonFileError, match=r"not valid JSON \(not UTF-8 text, byte 7\)") as err:
        read_json(bad)
    assert err.value.why == "not UTF-8 text, byte 7"
