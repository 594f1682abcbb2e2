"""``hpcbench profile``: list, show and init cluster profiles; parse, call
:mod:`hpcbench.jobs.profiles`, print."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpcbench.cli.jobs import describing_labels
from hpcbench.cli.options import job_options, overrides_from
from hpcbench.files import printable
from hpcbench.jobs.schedulers import SCHEDULER_CHOICES, SCHEDULER_CLASSES


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="cluster profiles: a cluster's settings written once",
        description="Named cluster profiles (the site's file, then the user's) under every job "
        "spec; see docs/cluster-guide.md.",
    )
    act = p.add_subparsers(dest="profile_action", required=True, metavar="ACTION")
    act.add_parser("list", help="the profiles of the site's and the user's file")
    show = act.add_parser(
        "show",
        parents=[job_options(spec_positional=False)],
        help="the effective job settings and where each came from",
        description="Print every field of the job spec as it would be submitted, and where its "
        "value came from: a flag, the job spec (--spec), the user's or the site's profile, or "
        "the default. NAME defaults to $HPCBENCH_PROFILE.",
    )
    show.add_argument("profile_name", nargs="?", metavar="NAME", help="the profile")
    describing = [c for c in SCHEDULER_CLASSES.values() if c.describes_cluster]
    asks = "; ".join(c.describe_commands for c in describing)
    init = act.add_parser(
        "init",
        help=f"write a profile from what the cluster says ({describing_labels()})",
        description=f"Ask the batch system ({asks}) for its partitions, their limits and "
        "their nodes' GPUs and cores, and add a profile NAME to the user's profiles file for "
        "you to edit.",
    )
    init.add_argument("profile_name", metavar="NAME")
    init.add_argument("--partition", help="default: the cluster's default partition")
    init.add_argument("--scheduler", choices=SCHEDULER_CHOICES, default="auto")
    for name in ("profile",):
        sub.choices[name].set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.jobs import profiles
    from hpcbench.jobs.schedulers import SchedulerError
    from hpcbench.jobs.spec import SpecError

    overrides = overrides_from(args, args.program_args)
    try:
        if args.profile_action == "list":
            found = profiles.profile_names()
            for name, path in found:
                print(f"{printable(name)}\t{printable(path)}")
            if not found:
                print(
                    f"no profiles in {profiles.site_file()} or {profiles.user_file()} "
                    "(hpcbench profile init NAME writes one)"
                )
            return 0
        if args.profile_action == "show":
            return _show(args, overrides)
        return _init(args)
    except (SpecError, SchedulerError) as err:
        print(f"hpcbench: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, SpecError) else 1


def _show(args: argparse.Namespace, overrides: dict[str, tuple[str, Any]]) -> int:
    from hpcbench.jobs import profiles
    from hpcbench.jobs.spec_load import explain
    from hpcbench.jobs.units import format_memory, format_time_hms

    name = profiles.chosen_name(args.profile_name or args.profile)
    rows = explain(args.spec, overrides, args.smoke, name)
    print(f"profile: {name or '(none chosen)'}; files: {profiles.site_file()} (site), "
          f"{profiles.user_file()} (user)")  # fmt: skip
    width = max(len(d) for d, _, _ in rows)
    for dotted, value, came in rows:
        if value is not None and dotted in ("resources.time", "requeue.lead"):
            value = format_time_hms(value)
        elif value is not None and dotted == "resources.memory":
            value = format_memory(value)
        print(f"{dotted.ljust(width)}  {_shown(value)}\t{printable(came)}")
    chosen = profiles.load_profile(name)
    for key, (value, label) in (chosen.info() if chosen else {}).items():
        print(
            f"{key.ljust(width)}  {_shown(value)}\t{printable(label)}: {key} (for hpcbench, not the "
            "script)"
        )
    return 0


def _shown(value: Any) -> str:
    return "-" if value is None or value == [] or value == {} else repr(value)


def _init(args: argparse.Namespace) -> int:
    from hpcbench.jobs import profiles, schedulers

    name = args.profile_name
    if not profiles._BARE.fullmatch(name):
        print(f"hpcbench: error: profile name {name!r}: letters, digits, '_' and '-' only",
              file=sys.stderr)  # fmt: skip
        return 2
    scheduler = args.scheduler if args.scheduler != "auto" else schedulers.detect()[0]
    values, notes = schedulers.get(scheduler).describe(args.partition)
    path = profiles.user_file()
    profiles.add_profile(path, name, profiles.profile_text(name, values, notes, scheduler))
    print(f"profile {name} written to {path}:")
    for key, value in values.items():
        print(f"  {key} = {value!r}")
    print(f"use it with --profile {name} or HPCBENCH_PROFILE={name}; edit the file to add "
          "account, modules, variables …")  # fmt: skip
    return 0
