"""Source: a CSV of ``file,label`` rows.

With a header row, the path and label columns are found by name (``--path-column`` /
``--label-column``, default: the first of file/path/filename/image and of
label/class/category/target present); without one, the first two columns. Labels are class
names (strings); when all are integers they are ordered numerically, so 0..K-1 stay themselves.
Paths resolve against ``image_root`` (default: the CSV's directory). A row with an empty path or
label is an error naming its line. With ``split_column`` (``--split-column``; MAMe's metadata
carries one) each row's split is that column's ``train``/``val``/``test`` (any case; also
``training``, ``valid``, ``validation``, ``dev``, ``testing``) instead of a drawn one; any other
value is an error naming its line.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from hpcbench.data.manifest import DataError
from hpcbench.data_prep.source import FileSource, image_directories, label_index
from hpcbench.data_prep.split import split_named
from hpcbench.files import open_regular

PATH_NAMES = ("file", "path", "filename", "file_name", "image", "image_path")
LABEL_NAMES = ("label", "class", "category", "target", "class_name")


def read_rows(path: Path) -> list[list[str]]:
    """The non-empty rows of the CSV file ``path`` (a regular file only); DataError naming it."""
    try:
        with open(open_regular(path), newline="") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: not a readable CSV ({err})") from None
    return [r for r in rows if any(cell.strip() for cell in r)]


def _columns(
    path: Path,
    first: list[str],
    path_column: str | None,
    label_column: str | None,
    split_column: str | None,
) -> tuple[int, int, int | None, int]:
    """The columns of the file, the label and the split (None: none), and the first data line:
    named by a header (the flags', else the usual names), or the first two columns of a file
    without one."""
    head = [c.strip().lower() for c in first]
    has_header = bool(path_column or label_column or split_column) or any(
        h in PATH_NAMES + LABEL_NAMES for h in head
    )
    if not has_header:
        return 0, 1, None, 1

    def column(wanted: str | None, options: tuple[str, ...], flag: str) -> int:
        for name in [wanted.lower()] if wanted else options:
            if name in head:
                return head.index(name)
        raise DataError(f"{path}: no column {wanted or '/'.join(options)!r} in the header ({flag})")

    pcol = column(path_column, PATH_NAMES, "--path-column")
    lcol = column(label_column, LABEL_NAMES, "--label-column")
    scol = column(split_column, (), "--split-column") if split_column else None
    return pcol, lcol, scol, 2


def csv_table(
    path: str | os.PathLike[str],
    image_root: str | os.PathLike[str] | None = None,
    path_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
) -> FileSource:
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: empty")
    pcol, lcol, scol, first_line = _columns(path, rows[0], path_column, label_column, split_column)
    body = rows[first_line - 1 :]
    root = Path(image_root) if image_root is not None else path.parent
    files, values, splits = [], [], []
    for n, row in enumerate(body, start=first_line):
        if len(row) <= max(pcol, lcol) or not row[pcol].strip() or not row[lcol].strip():
            raise DataError(f"{path}:{n}: row needs a file and a label, got {row!r}")
        files.append(row[pcol].strip())
        values.append(row[lcol].strip())
        if scol is not None:
            given = split_named(row[scol]) if len(row) > scol else None
            if given is None:
                value = row[scol] if len(row) > scol else ""
                raise DataError(
                    f"{path}:{n}: split {value!r} in column {split_column!r} is not train, "
                    "val or test"
                )
            splits.append(given)
    try:
        classes, labels = label_index(values, str(path))
    except ValueError as err:
        raise DataError(str(err)) from None
    paths = [str(root / f) for f in files]
    return FileSource(
        kind="csv",
        classes=classes,
        labels=labels,
        names=files,
        paths=paths,
        given_splits=splits if scol is not None else None,
        describe={
            "kind": "csv",
            "path": str(path.resolve()),
            "image_root": str(root.resolve()),
            **({"split_column": split_column} if scol is not None else {}),
        },
        inputs=[str(path), *image_directories(paths)],
    )
