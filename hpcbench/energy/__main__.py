"""``python -m hpcbench.energy idle --seconds S --output FILE``: a node's idle power.

``hpcbench bench`` submits it as a one-task job before a matrix with energy runs, so the idle
watts of each device (GPUs, CPU packages, DRAM) are measured on a compute node, not on the login
node; the report subtracts them for the net energy and adds unused devices' idle draw for the
"with idle" figures. The file is written atomically; what cannot be read is unavailable with its
reason, never 0 W.
"""

from __future__ import annotations

import argparse
import math
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from hpcbench.argparsing import Parser
from hpcbench.atomic import write_json_atomically
from hpcbench.energy import DEFAULT_INTERVAL_S, measure_idle


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(
                f"expected seconds from {low:g} to {high:g}, got {text!r}"
            )
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m hpcbench.energy", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    idle = sub.add_parser("idle", help="measure this node's idle power")
    idle.add_argument("--seconds", type=_seconds(0.5, 3600), default=10.0)
    idle.add_argument("--interval", type=_seconds(0.01, 60), default=DEFAULT_INTERVAL_S)
    idle.add_argument("--output", required=True, type=Path, help="the idle.json to write")
    args = parser.parse_args(argv)
    result = measure_idle(args.seconds, args.interval)
    try:
        write_json_atomically(args.output, result)
    except OSError as err:
        print(f"hpcbench energy: error: --output {args.output}: {err.strerror}", file=sys.stderr)
        return 1
    known = [d for d in result["devices"] if d.get("watts") is not None]
    print(
        f"idle power of {socket.gethostname()} over {args.seconds:g} s: "
        + (", ".join(f"{d['name']} {d['watts']:.1f} W" for d in known) or "nothing readable")
        + f" -> {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
