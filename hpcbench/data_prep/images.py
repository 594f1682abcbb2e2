"""Decoding and resizing one source image: the stated resize policy lives here.

Policies (target W×H, PIL bilinear with its antialiasing filter, on 8-bit pixels):

- ``crop`` (default): scale so the image covers W×H keeping its aspect ratio, then cut the centre
  (torchvision's ``Resize`` + ``CenterCrop``; PIL's ``ImageOps.fit``).
- ``stretch``: scale each axis independently to W×H (aspect ratio not kept).
- ``pad``: scale so the image fits inside W×H keeping its aspect ratio, centre it on black
  (PIL's ``ImageOps.pad``).

Colour: ``L`` (grayscale, ITU-R 601-2 luma) or ``RGB``; palette, alpha and 16-bit images are
converted by PIL's ``convert``. A file that PIL cannot decode completely raises
:class:`UnreadableImage`, never a partial image; so does anything that is not a regular file
(a FIFO would block the worker forever) and an image larger than PIL's decompression-bomb limit
(``Image.MAX_IMAGE_PIXELS``, 89 Mpixels: a small file could otherwise claim gigabytes of memory).
"""

from __future__ import annotations

import io
import os
import warnings
from typing import BinaryIO

import numpy as np

from hpcbench.files import NotRegularFile, open_regular

RESIZE_POLICIES = ("crop", "stretch", "pad")
IMAGE_EXTENSIONS = (
    ".jpg",
    ".jpeg",
    ".png",
    ".ppm",
    ".bmp",
    ".pgm",
    ".tif",
    ".tiff",
    ".webp",
    ".gif",
)


class UnreadableImage(Exception):
    """A source image that cannot be decoded (the message says why)."""


def crop_box(width: int, height: int, target: tuple[int, int]) -> tuple[float, float, float, float]:
    """The centred source box with the target's aspect ratio (for the ``crop`` policy)."""
    tw, th = target
    if width * th > height * tw:  # source is wider: cut left and right
        w = height * tw / th
        return ((width - w) / 2, 0.0, (width + w) / 2, float(height))
    h = width * th / tw
    return (0.0, (height - h) / 2, float(width), (height + h) / 2)


def resize(image, size: tuple[int, int], policy: str):  # PIL.Image -> PIL.Image
    from PIL import Image

    if image.size == tuple(size):
        return image
    bilinear = Image.Resampling.BILINEAR
    if policy == "stretch":
        return image.resize(size, bilinear)
    if policy == "crop":
        return image.resize(size, bilinear, box=crop_box(*image.size, size))
    if policy == "pad":
        from PIL import ImageOps

        return ImageOps.pad(image, size, bilinear, color=0)
    raise ValueError(f"resize policy must be one of {', '.join(RESIZE_POLICIES)}, got {policy!r}")


def to_mode(image, mode: str):
    if image.mode == mode:
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16/32-bit gray: scale to 8 bits first
        arr = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") else max(float(arr.max()), 1.0)
        from PIL import Image

        image = Image.fromarray(np.clip(arr / top * 255 + 0.5, 0, 255).astype(np.uint8), "L")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        image = image.convert("RGBA")  # alpha is dropped below (composited onto black)
    return image.convert(mode)


def _open_image(path: str) -> int:
    """A descriptor of the regular file at ``path``; :class:`UnreadableImage` otherwise."""
    try:
        return open_regular(path)
    except NotRegularFile:
        raise UnreadableImage("not a regular file") from None
    except OSError as err:
        raise UnreadableImage(f"{type(err).__name__}: {err}") from None


def load_image(path: str, size: tuple[int, int], mode: str, policy: str) -> np.ndarray:
    """C×H×W uint8 array of the image at ``path``, converted and resized."""
    with os.fdopen(_open_image(path), "rb") as fh:
        return decode_image(fh, size, mode, policy)


def read_image_bytes(path: str) -> bytes:
    """The encoded bytes of the image file at ``path`` (what a reader rank sends on; decoding them
    with :func:`decode_image` gives exactly what :func:`load_image` gives)."""
    fd = _open_image(path)
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read()
    except OSError as err:
        raise UnreadableImage(f"{type(err).__name__}: {err}") from None


def decode_image(
    data: BinaryIO | bytes, size: tuple[int, int], mode: str, policy: str
) -> np.ndarray:
    """C×H×W uint8 array of an encoded image (an open binary file or its bytes), converted and
    resized; :class:`UnreadableImage` when it cannot be decoded completely."""
    from PIL import Image, UnidentifiedImageError

    fh = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        with warnings.catch_warnings():
            # Above MAX_IMAGE_PIXELS PIL only warns; above twice that it raises. Both: refuse.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(fh) as im:
                im.load()  # decode now: a truncated file raises here, not later
                out = resize(to_mode(im, mode), size, policy)
    except (
        OSError,
        UnidentifiedImageError,
        ValueError,
        SyntaxError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ) as err:
        raise UnreadableImage(f"{type(err).__name__}: {err}") from None
    arr = np.asarray(out, dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def array_to_chw(image: np.ndarray, size: tuple[int, int], mode: str, policy: str) -> np.ndarray:
    """Resize/convert an in-memory H×W, H×W×C uint8 image through the same path as files."""
    from PIL import Image

    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    pil = Image.fromarray(np.ascontiguousarray(image))
    arr = np.asarray(resize(to_mode(pil, mode), size, policy), dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
