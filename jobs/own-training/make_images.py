"""A small folder of images for the example (nothing is downloaded): one folder per class
(circle, square, triangle), grayscale PNGs of a shape at a random place and size, as
torchvision's ImageFolder reads them.

    python jobs/own-training/make_images.py data/own-images [--per-class 200] [--size 32]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from PIL import Image, ImageDraw

CLASSES = ("circle", "square", "triangle")


def draw(kind: str, size: int, rng: random.Random) -> Image.Image:
    image = Image.new("L", (size, size), color=rng.randint(0, 60))
    pen = ImageDraw.Draw(image)
    side = rng.randint(size // 3, size - 4)
    x, y = rng.randint(0, size - side), rng.randint(0, size - side)
    shade = rng.randint(150, 255)
    if kind == "circle":
        pen.ellipse((x, y, x + side, y + side), fill=shade)
    elif kind == "square":
        pen.rectangle((x, y, x + side, y + side), fill=shade)
    else:
        pen.polygon([(x + side // 2, y), (x, y + side), (x + side, y + side)], fill=shade)
    return image


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the folder to write (one sub-folder per class)")
    p.add_argument("--per-class", type=int, default=200)
    p.add_argument("--size", type=int, default=32)
    a = p.parse_args()
    rng = random.Random(0)
    for kind in CLASSES:
        folder = Path(a.out) / kind
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(a.per_class):
            draw(kind, a.size, rng).save(folder / f"{kind}-{i:05d}.png")
    print(f"{len(CLASSES) * a.per_class} images in {a.out}")


if __name__ == "__main__":
    main()
