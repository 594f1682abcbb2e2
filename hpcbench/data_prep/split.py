"""Stratified train/val/test split: every class represented in every split, seeded.

Each class's samples are shuffled and divided by the fractions with largest-remainder rounding;
a split with a non-zero fraction gets at least one sample of every class (taken from the largest
part), so a class with fewer samples than splits is an error naming it. The splits' sample lists
are then shuffled, so shards are random mixtures of classes.
"""

from __future__ import annotations

import math

import numpy as np

from hpcbench.data.manifest import SPLITS, DataError


def parse_fractions(text: str) -> dict[str, float]:
    """``85/2/13`` or ``0.85/0.02/0.13`` or ``90/10`` -> {"train": .85, "val": .02, "test": .13}."""
    parts = text.replace(",", "/").split("/")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise DataError(f"--split {text!r}: expected numbers like 85/2/13") from None
    if (
        not 1 <= len(values) <= 3
        or not all(math.isfinite(v) and v >= 0 for v in values)
        or not 0 < sum(values) < math.inf
        or values[0] <= 0
    ):
        raise DataError(
            f"--split {text!r}: give 1 to 3 finite non-negative parts, train first and > 0"
        )
    total = sum(values)
    return {name: v / total for name, v in zip(SPLITS, values, strict=False) if v > 0}


def _share(n: int, fractions: list[float]) -> list[int]:
    raw = [n * f for f in fractions]
    counts = [int(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)[
        : n - sum(counts)
    ]:
        counts[i] += 1
    for i, c in enumerate(counts):  # every split gets every class
        if c == 0:
            donor = max(range(len(counts)), key=counts.__getitem__)
            counts[donor] -= 1
            counts[i] += 1
    return counts


def stratified_split(
    labels: np.ndarray, fractions: dict[str, float], seed: int, class_names: list[str]
) -> dict[str, np.ndarray]:
    """Indices into ``labels`` per split, each shuffled."""
    rng = np.random.default_rng([seed, 7])
    names, fr = list(fractions), list(fractions.values())
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for k in range(len(class_names)):
        members = np.flatnonzero(labels == k)
        if len(members) < len(names):
            raise DataError(
                f"class {class_names[k]!r} has {len(members)} sample(s); the splits "
                f"{'/'.join(names)} need at least {len(names)}"
            )
        members = rng.permutation(members)
        at = 0
        for name, c in zip(names, _share(len(members), fr), strict=True):
            parts[name].append(members[at : at + c])
            at += c
    return {n: rng.permutation(np.concatenate(p)) for n, p in parts.items()}


def given_split(names: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Indices into ``names`` (each item's split, as the metadata gives it) per split, each
    shuffled as :func:`stratified_split`'s are; an empty split is left out."""
    rng = np.random.default_rng([seed, 7])
    found = {n: np.flatnonzero(names == n) for n in ("train", "val", "test")}
    return {n: rng.permutation(idx) for n, idx in found.items() if len(idx)}


def cap_per_class(
    labels: np.ndarray, per_class: int | None, limit: int | None, seed: int, num_classes: int
) -> np.ndarray:
    """Indices kept by ``--per-class`` and ``--limit`` (classes kept balanced), sorted."""
    rng = np.random.default_rng([seed, 11])
    by_class = [rng.permutation(np.flatnonzero(labels == k)) for k in range(num_classes)]
    if per_class is not None:
        by_class = [m[:per_class] for m in by_class]
    if limit is not None and sum(len(m) for m in by_class) > limit:
        # Round-robin over classes so a debug subset stays stratified.
        take = [0] * num_classes
        left = limit
        while left > 0:
            progressed = False
            for k in range(num_classes):
                if left and take[k] < len(by_class[k]):
                    take[k] += 1
                    left -= 1
                    progressed = True
            if not progressed:
                break
        by_class = [m[:t] for m, t in zip(by_class, take, strict=True)]
    return np.sort(np.concatenate(by_class)) if by_class else np.empty(0, np.int64)


SPLIT_SPELLINGS = {
    "train": "train",
    "training": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "dev": "val",
    "test": "test",
    "testing": "test",
}


def split_named(value: object) -> str | None:
    """The split a metadata value names (``train``/``val``/``test``, any case, and the usual
    spellings: ``training``, ``valid``, ``validation``, ``dev``, ``testing``), or None."""
    return SPLIT_SPELLINGS.get(str(value).strip().lower())


def thin_splits(
    classes: list[str], counts: dict[str, list[int]], split: str | None, at_least: int = 5
) -> list[str]:
    """Warnings for the labelled splits (``counts``: split -> samples per class) holding fewer
    than ``at_least`` samples of some class: their accuracy moves in steps too coarse to compare
    (one validation image a class: 0 or 100 %). Each names the split and the class, and, where
    the data allow one, a ``--split`` that gives every such split ``at_least`` a class."""
    if not counts or not classes:
        return []
    totals = [sum(c[k] for c in counts.values()) for k in range(len(classes))]
    out = []
    for name, per_class in counts.items():
        k = min(range(len(classes)), key=lambda j: per_class[j])
        if name == "train" or per_class[k] >= at_least:
            continue
        out.append(
            f"split {name} holds {per_class[k]} sample(s) of class {classes[k]!r}, fewer than "
            f"{at_least}: accuracy on that class moves in steps of "
            f"{100 / max(1, per_class[k]):.0f} %"
        )
    if out and split is not None and (better := _wider_split(counts, totals, at_least)):
        out.append(f"for {min(totals)} sample(s) in the smallest class, try --split {better}")
    return out


def _wider_split(counts: dict[str, list[int]], totals: list[int], at_least: int) -> str | None:
    """train/val[/test] percentages giving each held-out split ``at_least`` samples of the
    smallest class, the rest to train; None when train would keep less than half."""
    smallest = min(totals)
    if smallest <= 0:
        return None
    held = {n: math.ceil(100 * at_least / smallest) for n in counts if n != "train"}
    for name, per_class in counts.items():  # never less than the split has now
        if name != "train":
            held[name] = max(held[name], round(100 * sum(per_class) / sum(totals)))
    train = 100 - sum(held.values())
    if train < 50:
        return None
    return "/".join(str(p) for p in [train, *held.values()])
