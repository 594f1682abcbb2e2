"""A doctor run in the results history: every run that measured something, healthy or not, as a
record of kind ``doctor`` under the cluster's profile, else its key as the baseline's (its figures:
:mod:`.figures`), so that ``hpcbench history --profile CLUSTER`` lists a cluster's doctors and
``hpcbench check RUN --references FILE`` holds one to a site's own values. A history that cannot
be written is a warning: doctor.json stays the record."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import hpcbench
from hpcbench.doctor.figures import doctor_figures


def record_doctor(
    run_dir: str | Path, document: dict[str, Any], history: Any = None
) -> tuple[int, bool]:
    from hpcbench.history import record_document

    figures = doctor_figures(document)
    # the profile column: the cluster profile, else the cluster's key (scheduler and first node)
    cluster = os.environ.get("HPCBENCH_PROFILE") or document.get("cluster")
    provenance: dict[str, Any] = {"hpcbench": hpcbench.__version__, "profile": cluster}
    return record_document(
        kind="doctor",
        directory=run_dir,
        document="doctor.json",
        figures=figures,
        provenance=provenance,  # type: ignore[arg-type]
        hosts=sorted(str(n) for n in document.get("nodes") or {}),
        history=history,
    )


def record_or_warn(run_dir: Path, document: dict[str, Any]) -> None:
    from hpcbench.history import HistoryError, history_path

    try:
        rid, _ = record_doctor(run_dir, document)
    except (HistoryError, OSError) as err:
        print(f"hpcbench doctor: warning: not recorded in the history: {err}", file=sys.stderr)
        return
    print(f"recorded in the history as #{rid} ({history_path()})", flush=True)
