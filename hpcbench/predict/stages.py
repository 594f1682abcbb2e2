"""The work of each stage on one unit, and the one contiguous buffer a unit travels in.

Stages (the same functions in every mode, so every mode predicts the same thing):

- :func:`read_unit`: the encoded bytes of each file (or the stored samples of an HDF5 dataset);
- :func:`prepare_unit`: decode, convert and resize with the converters' code, store as the
  training set stored pixels; an unreadable image is marked, with its reason (or fatal, strict);
- :func:`predict_unit`: normalise, forward, softmax: float32 probabilities per readable item.

A unit between ranks is a list of numpy arrays packed into one uint8 buffer (:func:`pack`):
a small int64 header (kind, unit number, array count, then dtype, rank and shape of each array)
followed by each array's bytes, 8-byte aligned. It is sent with mpi4py's buffer calls (no pickling
of pixels) and unpacked as views into the received buffer (no copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.predict.config import PredictError
from hpcbench.predict.inputs import Items
from hpcbench.predict.model import Classifier, InputFormat

# message kinds
RAW_FILES, RAW_SAMPLES, PREPARED, RESULTS, END = 1, 2, 3, 4, 5
KIND_NAMES = {RAW_FILES: "raw", RAW_SAMPLES: "raw", PREPARED: "prepared", RESULTS: "results"}

_DTYPES = [np.dtype(t) for t in ("uint8", "int8", "int64", "float16", "float32")]
_CODE = {dt: k for k, dt in enumerate(_DTYPES)}
MAX_DIMS = 4
_HEADER = 3  # kind, unit, count
_PER_ARRAY = 2 + MAX_DIMS  # dtype code, ndim, dims


@dataclass
class Unit:
    kind: int
    number: int
    arrays: list[np.ndarray]

    @property
    def ids(self) -> np.ndarray:
        return self.arrays[0]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


def pack(kind: int, number: int, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One uint8 buffer holding the header and every array (C-contiguous copies)."""
    head = np.zeros(_HEADER + _PER_ARRAY * len(arrays), dtype=np.int64)
    head[:_HEADER] = kind, number, len(arrays)
    sizes = []
    for k, a in enumerate(arrays):
        if a.ndim > MAX_DIMS:
            raise ValueError(f"array of {a.ndim} dimensions (at most {MAX_DIMS})")
        at = _HEADER + _PER_ARRAY * k
        head[at : at + 2] = _CODE[a.dtype], a.ndim
        head[at + 2 : at + 2 + a.ndim] = a.shape
        sizes.append((a.nbytes + 7) // 8 * 8)
    out = np.empty(head.nbytes + sum(sizes), dtype=np.uint8)
    out[: head.nbytes] = head.view(np.uint8)
    at = head.nbytes
    for a, size in zip(arrays, sizes, strict=True):
        out[at : at + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        at += size
    return out


def unpack(buf: np.ndarray) -> Unit:
    """The unit in ``buf`` (arrays are views into it)."""
    fixed = buf[: _HEADER * 8].view(np.int64)
    kind, number, count = (int(v) for v in fixed)
    head = buf[: (_HEADER + _PER_ARRAY * count) * 8].view(np.int64)
    at = head.nbytes
    arrays = []
    for k in range(count):
        base = _HEADER + _PER_ARRAY * k
        dtype = _DTYPES[int(head[base])]
        shape = tuple(int(v) for v in head[base + 2 : base + 2 + int(head[base + 1])])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        arrays.append(buf[at : at + nbytes].view(dtype).reshape(shape))
        at += (nbytes + 7) // 8 * 8
    return Unit(kind, number, arrays)


def _reasons(texts: list[str]) -> np.ndarray:
    joined = "\n".join(t.replace("\n", " ") for t in texts)
    return np.frombuffer(joined.encode(), dtype=np.uint8).copy()


def reasons_of(blob: np.ndarray) -> list[str]:
    return bytes(blob).decode().split("\n") if len(blob) else []


# ---- the stages ------------------------------------------------------------------------------------
def read_unit(items: Items, number: int, ids: np.ndarray) -> Unit:
    """Files: [ids, status, lengths, bytes, reasons]; a dataset: [ids, samples]."""
    if items.kind == "dataset":
        return Unit(RAW_SAMPLES, number, [ids, items.read_dataset(ids)])
    from hpcbench.data_prep.images import UnreadableImage, read_image_bytes

    status = np.zeros(len(ids), dtype=np.int8)
    chunks: list[bytes] = []
    reasons: list[str] = []
    for k, i in enumerate(ids):
        try:
            chunks.append(read_image_bytes(items.paths[int(i)]))
        except UnreadableImage as err:
            status[k], reasons = 1, [*reasons, str(err)]
            chunks.append(b"")
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    blob = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    return Unit(RAW_FILES, number, [ids, status, lengths, blob, _reasons(reasons)])


def prepare_unit(unit: Unit, fmt: InputFormat, items: Items, strict: bool) -> Unit:
    """[ids, status, stored pixels of the readable items, reasons of the others]."""
    ids = unit.ids
    if unit.kind == RAW_SAMPLES:
        return Unit(PREPARED, unit.number, [ids, np.zeros(len(ids), np.int8),
                                            _samples_to_format(unit.arrays[1], items, fmt),
                                            _reasons([])])  # fmt: skip
    from hpcbench.data_prep.images import UnreadableImage, decode_image

    _, status, lengths, blob, reason_blob = unit.arrays
    status = status.copy()
    earlier = iter(reasons_of(reason_blob))
    reasons: list[str] = []
    pixels = np.empty((len(ids), *fmt.shape), dtype=fmt.stored_dtype)
    kept = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for k, i in enumerate(ids):
        why = next(earlier) if status[k] else None
        if why is None:
            data = blob[offsets[k] : offsets[k + 1]].tobytes()
            try:
                image = decode_image(data, fmt.size, fmt.mode, fmt.resize)
                pixels[kept] = fmt.stored(image)
                kept += 1
                continue
            except UnreadableImage as err:
                status[k], why = 1, str(err)
        if strict:
            raise PredictError(f"{items.paths[int(i)]}: unreadable image ({why}); --strict")
        reasons.append(why)
    return Unit(PREPARED, unit.number, [ids, status, pixels[:kept], _reasons(reasons)])


def _samples_to_format(samples: np.ndarray, items: Items, fmt: InputFormat) -> np.ndarray:
    """A dataset's stored samples as the model's input: as they are when the formats agree,
    else back to 8-bit pixels and through the converters' resize."""
    manifest = items.dataset
    if tuple(manifest.shape) == fmt.shape and manifest.dtype == fmt.dtype:
        return samples
    from hpcbench.data_prep.images import array_to_chw

    pixels = samples if manifest.dtype == "uint8" else np.clip(np.rint(samples.astype(np.float32) * 255), 0, 255).astype(np.uint8)  # fmt: skip
    out = np.empty((len(samples), *fmt.shape), dtype=fmt.stored_dtype)
    for k, chw in enumerate(pixels):
        hwc = chw[0] if chw.shape[0] == 1 else chw.transpose(1, 2, 0)
        out[k] = fmt.stored(array_to_chw(hwc, fmt.size, fmt.mode, fmt.resize))
    return out


def predict_unit(unit: Unit, classifier: Classifier) -> Unit:
    """[ids, status, probabilities of the readable items, reasons of the others]."""
    ids, status, pixels, reasons = unit.arrays
    probs = classifier.probabilities(pixels) if len(pixels) else np.zeros((0, 0), np.float32)
    return Unit(RESULTS, unit.number, [ids, status, probs.astype(np.float32, copy=False), reasons])


def end_marker() -> np.ndarray:
    return pack(END, -1, [])
