"""The built-in learnable dataset: silhouettes of procedurally drawn shapes (numpy only).

Each class is a shape (disc, ring, square, triangle, …) drawn as an anti-aliased silhouette from
its signed distance function, at a random position, size, rotation and aspect jitter, with random
foreground/background levels, a faint distractor blob and Gaussian noise. Nothing is downloaded;
the set is a deterministic function of (seed, sample index), whatever the number of processes
that render it. Defaults mirror the reference study's fish masks: 9 classes, grayscale, 197×148.

Sample ``i`` has label ``i mod K`` (exactly balanced); the converter's stratified shuffle mixes
them. Its parameters come from a generator seeded by (seed, i // 1024), so any subset of indices
renders identically in any worker.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

DEFAULT_SIZE = (197, 148)  # width, height
DEFAULT_SAMPLES = 9000
DEFAULT_CLASSES = 9
PARAM_BLOCK = 1024

Sdf = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _box(x: np.ndarray, y: np.ndarray, bx: float, by: float) -> np.ndarray:
    qx, qy = np.abs(x) - bx, np.abs(y) - by
    outside = np.hypot(np.maximum(qx, 0), np.maximum(qy, 0))
    return outside + np.minimum(np.maximum(qx, qy), 0)


def _polygon(n: int, radius: float = 1.0) -> Sdf:
    apothem = radius * np.cos(np.pi / n)
    angles = [2 * np.pi * k / n + np.pi / 2 for k in range(n)]

    def sdf(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.max([x * np.cos(a) + y * np.sin(a) for a in angles], axis=0) - apothem

    return sdf


def _star(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r, t = np.hypot(x, y), np.arctan2(y, x)
    return (r - (0.5 + 0.5 * np.abs(np.cos(2.5 * t)) ** 3)) * 0.7


# Name -> signed distance in units of the shape's radius (negative inside).
SHAPES: dict[str, Sdf] = {
    "disc": lambda x, y: np.hypot(x, y) - 1.0,
    "ring": lambda x, y: np.abs(np.hypot(x, y) - 0.72) - 0.28,
    "square": lambda x, y: _box(x, y, 0.78, 0.78),
    "triangle": _polygon(3),
    "plus": lambda x, y: np.minimum(_box(x, y, 1.0, 0.3), _box(x, y, 0.3, 1.0)),
    "star": _star,
    "crescent": lambda x, y: np.maximum(np.hypot(x, y) - 1.0, -(np.hypot(x - 0.5, y) - 0.8)),
    "bar": lambda x, y: _box(x, y, 1.0, 0.26),
    "two-dots": lambda x, y: np.minimum(np.hypot(x - 0.6, y), np.hypot(x + 0.6, y)) - 0.38,
    "hexagon-outline": lambda x, y: np.abs(_polygon(6)(x, y) + 0.15) - 0.15,
    "semicircle": lambda x, y: np.maximum(np.hypot(x, y) - 1.0, -y - 0.1),
    "l-shape": lambda x, y: np.minimum(_box(x + 0.35, y, 0.3, 1.0), _box(x, y - 0.7, 0.65, 0.3)),
    "arrow": lambda x, y: np.minimum(
        _box(x + 0.35, y, 0.65, 0.18), _polygon(3, 0.6)(y, -(x - 0.45))
    ),
    "square-outline": lambda x, y: np.abs(_box(x, y, 0.62, 0.62)) - 0.16,
    "diamond-pair": lambda x, y: np.minimum(
        np.abs(x - 0.5) + np.abs(y) - 0.45, np.abs(x + 0.5) + np.abs(y) - 0.45
    ),
    "x-bars": lambda x, y: np.minimum(_box(x, y - 0.55, 1.0, 0.2), _box(x, y + 0.55, 1.0, 0.2)),
}
SHAPE_NAMES = list(SHAPES)


def class_names(num_classes: int) -> list[str]:
    if not 2 <= num_classes <= len(SHAPES):
        raise ValueError(f"the synthetic set has 2 to {len(SHAPES)} classes, got {num_classes}")
    return SHAPE_NAMES[:num_classes]


def _params(seed: int, indices: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample drawing parameters, identical for an index whoever asks."""
    out: dict[str, list[np.ndarray]] = {}
    for block in np.unique(indices // PARAM_BLOCK):
        rng = np.random.default_rng([seed, int(block)])
        p = {
            "size": rng.uniform(0.20, 0.34, PARAM_BLOCK),  # radius as a fraction of min(W, H)
            "cx": rng.uniform(0, 1, PARAM_BLOCK),
            "cy": rng.uniform(0, 1, PARAM_BLOCK),
            "angle": rng.uniform(0, 2 * np.pi, PARAM_BLOCK),
            "stretch": rng.uniform(0.85, 1.15, PARAM_BLOCK),
            "bg": rng.uniform(0.0, 0.35, PARAM_BLOCK),
            "fg": rng.uniform(0.6, 1.0, PARAM_BLOCK),
            "noise": rng.uniform(0.02, 0.10, PARAM_BLOCK),
            "blob_x": rng.uniform(0, 1, PARAM_BLOCK),
            "blob_y": rng.uniform(0, 1, PARAM_BLOCK),
            "blob_r": rng.uniform(0.04, 0.10, PARAM_BLOCK),
            "tint": rng.uniform(0.5, 1.0, (PARAM_BLOCK, 3)),
            "noise_seed": rng.integers(0, 2**63 - 1, PARAM_BLOCK),
        }
        sel = indices[indices // PARAM_BLOCK == block] % PARAM_BLOCK
        for k, v in p.items():
            out.setdefault(k, []).append(v[sel])
    order = np.argsort(np.argsort(indices // PARAM_BLOCK, kind="stable"), kind="stable")
    return {k: np.concatenate(v)[order] for k, v in out.items()}


def render(
    indices: np.ndarray,
    *,
    seed: int,
    num_classes: int = DEFAULT_CLASSES,
    size: tuple[int, int] = DEFAULT_SIZE,
    channels: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N×C×H×W uint8) and labels (N, int64) of the given sample indices."""
    names = class_names(num_classes)
    indices = np.asarray(indices, dtype=np.int64)
    width, height = size
    labels = indices % num_classes
    p = _params(seed, indices)
    images = np.empty((len(indices), channels, height, width), dtype=np.uint8)
    unit = min(width, height)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    for i in range(len(indices)):
        radius = p["size"][i] * unit
        margin_x, margin_y = radius * 1.1, radius * 1.1
        cx = margin_x + p["cx"][i] * max(width - 2 * margin_x, 1)
        cy = margin_y + p["cy"][i] * max(height - 2 * margin_y, 1)
        c, s = np.cos(p["angle"][i]), np.sin(p["angle"][i])
        dx, dy = (xs - cx) / radius, (ys - cy) / radius
        u = (c * dx + s * dy) * p["stretch"][i]
        v = -s * dx + c * dy
        inside = np.clip(0.5 - SHAPES[names[labels[i]]](u, v) * radius, 0.0, 1.0)
        blob_d = np.hypot(xs - p["blob_x"][i] * width, ys - p["blob_y"][i] * height)
        blob = np.clip(0.5 - (blob_d - p["blob_r"][i] * unit), 0.0, 1.0) * 0.5
        level = np.maximum(inside, blob)
        gray = p["bg"][i] + (p["fg"][i] - p["bg"][i]) * level
        noise = np.random.default_rng(int(p["noise_seed"][i])).standard_normal(
            (channels, height, width), dtype=np.float32
        )
        if channels == 1:
            img = gray[None] + p["noise"][i] * noise
        else:
            tint = p["tint"][i][:channels, None, None]
            img = gray[None] * tint + p["noise"][i] * noise
        images[i] = np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8)
    return images, labels
