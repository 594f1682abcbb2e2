"""``hpcbench prep …``: the data-preparation commands (argparse only; the work is in hpcbench/data_prep/).

Nothing here imports numpy or h5py until a prep command actually runs, so ``hpcbench submit``
keeps its start-up time.

Signals: SIGTERM (``scancel``, a batch time limit) is handled like Ctrl-C: the conversion's
temporary directory is removed, one line is printed and the exit status is 143 (130 for
SIGINT). Output into a closed pipe (``hpcbench prep info … | head``) ends quietly with 141,
as a Unix tool killed by SIGPIPE does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

SOURCES = ("folder", "json", "csv", "arrays", "synthetic")


def _conversion_options(p: argparse.ArgumentParser, synthetic: bool) -> None:
    g = p.add_argument_group("conversion")
    if synthetic:
        g.add_argument("--size", default="197x148", help="WIDTHxHEIGHT (default: 197x148)")
    else:
        g.add_argument("--size", help="WIDTHxHEIGHT to resize to (required for image files)")
        g.add_argument(
            "--resize",
            default="crop",
            choices=("crop", "stretch", "pad"),
            help="crop: cover then centre-crop (default); stretch: ignore aspect; pad: fit, pad black",
        )
    colour = g.add_mutually_exclusive_group()
    colour.add_argument(
        "--grayscale",
        action="store_true",
        default=None,
        help="one channel (default: as many as the source has"
        + (", one" if synthetic else "")
        + ")",
    )
    colour.add_argument(
        "--rgb",
        dest="grayscale",
        action="store_false",
        help="three channels",
    )
    g.add_argument(
        "--dtype",
        default="uint8",
        choices=("uint8", "float16"),
        help="stored pixels (default uint8)",
    )
    g.add_argument("--split", help="train/val/test fractions (default 85/2/13)")
    size = g.add_mutually_exclusive_group()
    size.add_argument("--shard-samples", type=int, metavar="N", help="samples per shard")
    size.add_argument(
        "--shard-size", default="64MB", metavar="SIZE", help="shard size (default 64MB)"
    )
    g.add_argument(
        "--limit", type=int, metavar="N", help="at most N samples, classes kept balanced"
    )
    g.add_argument("--per-class", type=int, metavar="N", help="at most N samples per class")
    g.add_argument("--seed", type=int, default=0, help="split/shuffle seed (default 0)")
    if not synthetic:
        g.add_argument(
            "--strict",
            action="store_true",
            help="an unreadable image is fatal (default: skipped, listed)",
        )
    g.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes (default: all cores; under mpiexec: the ranks)",
    )
    g.add_argument("--name", help="dataset name in the manifest (default: the directory name)")
    g.add_argument("--overwrite", action="store_true", help="replace OUT if it exists (atomically)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def add_parsers(sub: Any) -> None:
    prep = sub.add_parser(
        "prep",
        help="convert data into HDF5 shards; verify or describe a dataset",
        description="Convert an image folder, a metadata JSON, a CSV or numpy arrays into a "
        "sharded HDF5 dataset, or generate the built-in synthetic set (docs/data.md).",
    )
    ps = prep.add_subparsers(dest="prep_action", required=True, metavar="SOURCE")

    _file_sources(ps)
    _other_actions(ps)
    for name in ("prep",):
        sub.choices[name].set_defaults(run=run)


def _file_source(
    ps: Any, name: str, metavar: str, help_text: str, description: str
) -> argparse.ArgumentParser:
    """A conversion from a file or folder of images: SOURCE, OUT and where names resolve."""
    p = ps.add_parser(name, help=help_text, description=description)
    p.add_argument("source", metavar=metavar)
    p.add_argument("out", metavar="OUT")
    if name != "folder":
        p.add_argument(
            "--image-root",
            metavar="DIR",
            help=f"where file names resolve (default: the {metavar}'s directory)",
        )
    return p


def _file_sources(ps: Any) -> None:
    """``prep folder``, ``prep json`` and ``prep csv``."""
    p = _file_source(
        ps, "folder", "DIR", "one sub-directory per class", "Convert an ImageFolder-style tree."
    )
    _conversion_options(p, False)
    p = _file_source(
        ps,
        "json",
        "JSON",
        "COCO/Herbarium-style metadata JSON",
        "Convert images listed in a metadata JSON.",
    )
    p.add_argument(
        "--split-column",
        metavar="KEY",
        help="each image entry's train/val/test under KEY decides its split (instead of --split)",
    )
    _unlabeled_test_options(p, "metadata JSON with images and no annotations (or a CSV)")
    _conversion_options(p, False)
    p = _file_source(
        ps, "csv", "CSV", "rows of file,label", "Convert images listed in a CSV of file,label rows."
    )
    p.add_argument(
        "--split-column",
        metavar="NAME",
        help="the column whose train/val/test decides each row's split (instead of --split)",
    )
    p.add_argument("--path-column", metavar="NAME")
    p.add_argument("--label-column", metavar="NAME")
    _unlabeled_test_options(p, "CSV of image paths (or a metadata JSON)")
    _conversion_options(p, False)


def _other_actions(ps: Any) -> None:
    """``prep arrays``, ``prep synthetic``, ``prep verify`` and ``prep info``."""
    p = ps.add_parser(
        "arrays", help="numpy .npy/.npz images and labels", description="Convert numpy arrays."
    )
    p.add_argument("images", metavar="IMAGES", help=".npy, or .npz with --images-key")
    p.add_argument(
        "labels", metavar="LABELS", help=".npy, or .npz with --labels-key (may be the same .npz)"
    )
    p.add_argument("out", metavar="OUT")
    p.add_argument("--images-key", metavar="KEY")
    p.add_argument("--labels-key", metavar="KEY")
    p.add_argument("--layout", default="auto", choices=("auto", "nhw", "nhwc", "nchw"))
    p.add_argument("--class-names", metavar="A,B,…", help="names for labels 0, 1, …")
    _conversion_options(p, False)
    p = ps.add_parser(
        "synthetic",
        help="the built-in learnable shapes set",
        description="Generate the built-in learnable dataset (shapes; 9 classes, 9000 samples, 197x148 grayscale by default).",
    )
    p.add_argument("out", metavar="OUT")
    p.add_argument("--samples", type=int, default=9000, help="number of samples (default 9000)")
    p.add_argument("--classes", type=int, default=9, help="number of classes, 2-16 (default 9)")
    _conversion_options(p, True)
    p = ps.add_parser(
        "verify",
        help="check shards against the manifest",
        description="Check every shard (size, sha256, shapes, labels) against the manifest.",
    )
    p.add_argument("dataset", metavar="DIR")
    p.add_argument("--no-hash", action="store_true", help="skip the sha256 check (fast)")
    p = ps.add_parser(
        "info",
        help="summary of a dataset",
        description="Print a dataset's splits, classes and sizes.",
    )
    p.add_argument("dataset", metavar="DIR")


def _unlabeled_test_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--unlabeled-test",
        metavar="FILE",
        help=f"a test set without labels: a {what}; its images become the test split, "
        "flagged unlabeled (--split then gives train/val only, default 90/10)",
    )
    p.add_argument(
        "--test-image-root",
        metavar="DIR",
        help="where the unlabeled test set's file names resolve (default: its directory)",
    )


def _options(args: argparse.Namespace) -> Any:
    from hpcbench.data.manifest import DataError
    from hpcbench.data_prep.convert import ConvertOptions, parse_megabytes, parse_size

    if args.split and getattr(args, "split_column", None):
        raise DataError(
            f"--split {args.split} and --split-column {args.split_column}: the splits come "
            "from one or the other"
        )

    return ConvertOptions(
        size=parse_size(args.size) if args.size else None,
        grayscale=args.grayscale,
        dtype=args.dtype,
        split=args.split or ("90/10" if getattr(args, "unlabeled_test", None) else "85/2/13"),
        shard_samples=args.shard_samples,
        shard_mb=parse_megabytes(args.shard_size),
        limit=args.limit,
        per_class=args.per_class,
        seed=args.seed,
        strict=getattr(args, "strict", False),
        workers=args.workers,
        resize=getattr(args, "resize", "crop"),
        overwrite=args.overwrite,
        name=args.name,
        progress=not args.quiet,
    )


class Terminated(BaseException):
    """Raised in the main process by SIGTERM, so that clean-up runs as for KeyboardInterrupt."""


_handler_pid: int | None = None  # the process that installed _on_sigterm


def _on_sigterm(signum: int, frame: Any) -> None:
    if os.getpid() != _handler_pid:
        # A pool worker that the signal caught between fork and its initializer (which would
        # have reset the handler): die of the signal quietly, as an initialised worker does.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated


def _stdout_to_devnull() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run(args: argparse.Namespace) -> int:
    from hpcbench.data.manifest import DataError

    global _handler_pid
    _handler_pid = os.getpid()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
        return code
    except DataError as err:
        from hpcbench.files import printable

        print(f"hpcbench prep: error: {printable(err)}", file=sys.stderr)
        return 1 if args.prep_action == "verify" else 2
    except MemoryError as err:  # e.g. --samples or --size far beyond this machine
        print(
            f"hpcbench prep: error: not enough memory ({err or 'MemoryError'}); no partial "
            "output left",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("hpcbench prep: interrupted; no partial output left", file=sys.stderr)
        return 130
    except Terminated:
        print("hpcbench prep: terminated (SIGTERM); no partial output left", file=sys.stderr)
        return 143
    except BrokenPipeError:
        _stdout_to_devnull()
        return 141
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    from hpcbench import data_prep
    from hpcbench.data.manifest import Manifest

    action = args.prep_action
    if action == "info":
        print(Manifest.load(args.dataset).summary())
        return 0
    if action == "verify":
        from hpcbench.data.verify import unreferenced_files, verify_dataset

        m = verify_dataset(args.dataset, check_hash=not args.no_hash)
        shards = sum(len(s.shards) for s in m.splits.values())
        what = "sizes, shapes, labels" + ("" if args.no_hash else ", sha256")
        print(f"{args.dataset}: OK ({shards} shards; {what} match the manifest)")
        for name in unreferenced_files(m):
            print(f"note: {name} is not named in the manifest (left over?)")
        return 0
    options = _options(args)
    if action == "folder":
        source = data_prep.image_folder(args.source)
    elif action == "json":
        source = data_prep.metadata_json(args.source, args.image_root, args.split_column)
    elif action == "csv":
        source = data_prep.csv_table(
            args.source, args.image_root, args.path_column, args.label_column, args.split_column
        )
    elif action == "arrays":
        names = args.class_names.split(",") if args.class_names else None
        source = data_prep.from_arrays(
            args.images,
            args.labels,
            classes=names,
            layout=args.layout,
            images_key=args.images_key,
            labels_key=args.labels_key,
        )
    else:
        source = data_prep.synthetic(args.samples, args.classes, args.seed)
    if action in ("json", "csv") and args.unlabeled_test:
        source = data_prep.with_unlabeled_test(
            source, args.unlabeled_test, args.test_image_root, getattr(args, "path_column", None)
        )
    manifest = data_prep.convert(source, args.out, options)
    from hpcbench.this_rank import detect_launch

    if detect_launch().rank == 0:
        print(manifest.summary())
        if manifest.skipped:
            print(
                f"warning: {manifest.skipped} unreadable image(s) skipped; listed in {args.out}/skipped.txt",
                file=sys.stderr,
            )
        counts = {n: s.class_counts for n, s in manifest.splits.items() if s.labeled}
        given = getattr(args, "split_column", None) is not None
        for line in data_prep.thin_splits(
            manifest.classes, counts, None if given else options.split
        ):
            print(f"warning: {line}", file=sys.stderr)
    return 0
