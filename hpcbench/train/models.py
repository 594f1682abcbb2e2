"""Models by name: small built-ins for quick runs and torchvision's classifiers, adapted to the
dataset's channel count, class count and image size. No pretrained weights (nothing can be
downloaded on a compute node; and a benchmark compares training from scratch).

- ``small_cnn``: strided conv blocks until the feature map is ~6 pixels across (3-6 blocks),
  global average pool, linear. The default.
- ``mlp``: flatten → 192 → classes (the classic 784-192-10 on 28×28 inputs); ``--model mlp:512``
  sets the hidden width.
- ``rnn``: a GRU reading the image one row at a time (C×W features per step), last state → linear.
- torchvision: ``resnet18/34/50/…``, ``efficientnet_b0…``, ``mobilenet_v3_small/large``,
  ``vit_b_16…`` (square images whose side divides by the patch size), any name in
  ``torchvision.models.list_models(module=torchvision.models)``.
- the user's own: ``package.module:factory`` or ``path/to/file.py:factory``
  (:mod:`.user_model`).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from hpcbench.train.config import ConfigError, parse_model
from hpcbench.train.model_names import BUILTINS
from hpcbench.train.option_fields import user_model


def small_cnn(
    in_channels: int, num_classes: int, image_size: tuple[int, int] = (32, 32), width: int = 32
) -> nn.Module:
    side, blocks = min(image_size), 0
    while side > 6 or blocks < 3:
        side, blocks = (side + 1) // 2, blocks + 1
    blocks = min(blocks, 6)
    channels = [in_channels] + [min(width * 2 ** max(i - 1, 0), width * 4) for i in range(blocks)]
    channels[1] = width // 2

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]

    layers = [m for i in range(blocks) for m in block(channels[i], channels[i + 1])]
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], num_classes)
    )


def mlp(in_features: int, num_classes: int, hidden: int = 192) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_features, hidden),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, num_classes),
    )


class RowRNN(nn.Module):
    """A GRU over image rows: step t sees row t of every channel."""

    def __init__(self, channels: int, width: int, num_classes: int, hidden: int = 128) -> None:
        super().__init__()
        self.gru = nn.GRU(channels * width, hidden, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        rows = x.permute(0, 2, 1, 3).reshape(n, h, c * w)
        _, last = self.gru(rows)
        return self.head(last[-1])


def _adapt_first_conv(model: nn.Module, in_channels: int) -> None:
    """Replace the first Conv2d that takes 3 channels by one taking ``in_channels``."""
    if in_channels == 3:
        return
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Conv2d) and child.in_channels == 3:
                setattr(
                    parent,
                    name,
                    nn.Conv2d(
                        in_channels,
                        child.out_channels,
                        child.kernel_size,
                        child.stride,
                        child.padding,
                        child.dilation,
                        child.groups,
                        child.bias is not None,
                    ),
                )
                return
    raise ConfigError(f"cannot adapt {type(model).__name__} to {in_channels} input channels")


def build_model(name: str, shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    c, h, w = shape
    if user_model(name) is not None:  # the user's own: package.module:factory, file.py:factory
        from hpcbench.train.user_model import build_user_model

        return build_user_model(name, shape, num_classes)
    base, width = parse_model(name)
    if base == "small_cnn":
        return small_cnn(c, num_classes, (h, w), width=width or 32)
    if base == "mlp":
        return mlp(c * h * w, num_classes, hidden=width or 192)
    if base == "rnn":
        return RowRNN(c, w, num_classes, hidden=width or 128)
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if base not in names:
        raise ConfigError(
            f"--model {name!r}: not a built-in ({', '.join(BUILTINS)}) nor a torchvision classifier (e.g. resnet34, efficientnet_b0, vit_b_16)"
        )
    kwargs: dict = {"weights": None, "num_classes": num_classes}
    if base.startswith("vit_"):
        if h != w:
            raise ConfigError(f"--model {base} needs square images, the dataset's are {w}x{h}")
        kwargs["image_size"] = h
    try:
        model = torchvision.models.get_model(base, **kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"--model {base}: {err}") from None
    _adapt_first_conv(model, c)
    return model


def _read_weights(path: str, where: str) -> Any:
    """What ``torch.load`` finds in the weights file (tensors only: ``weights_only``), read as a
    regular file of at most a checkpoint's size; a ConfigError naming it otherwise."""
    from hpcbench.files import NotRegularFile, open_regular
    from hpcbench.train.checkpoint_file import MAX_FILE_BYTES

    try:
        # a regular file only: a FIFO or a device would block the read for ever
        with os.fdopen(open_regular(path), "rb") as fh:
            if os.fstat(fh.fileno()).st_size > MAX_FILE_BYTES:
                raise ConfigError(f"{where}: larger than {MAX_FILE_BYTES >> 30} GiB")
            return torch.load(fh, map_location="cpu", weights_only=True)
    except ConfigError:
        raise
    except NotRegularFile:
        raise ConfigError(f"{where}: not a regular file (a FIFO, a device?)") from None
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a directory; give the weights file") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot be read ({err.strerror or err})") from None
    except Exception as err:  # unpickling refused or a damaged file: torch raises many kinds
        raise ConfigError(f"{where}: not a PyTorch weights file ({type(err).__name__})") from None


def load_weights(model: nn.Module, path: str, num_classes: int) -> str:
    """Load pretrained weights the user provides (``--weights FILE``: a state dict as
    ``torch.save(model.state_dict(), FILE)`` writes it, or torchvision's downloaded ``.pth``; a
    checkpoint holding one under ``state_dict``/``model`` also works; DDP's ``module.`` prefixes
    are dropped). Nothing is downloaded. Where the dataset differs from what the weights were
    trained on: a first convolution for 3 channels is summed over them for a 1-channel dataset,
    and a classifier head for another number of classes keeps its fresh initialisation. Any
    other difference is an error naming the tensor. Returns a line saying what was loaded."""
    where = f"--weights {path}"
    loaded = _read_weights(path, where)
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(loaded, dict) and isinstance(loaded.get(key), dict):
            loaded = loaded[key]
            break
    if not isinstance(loaded, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in loaded.items()
    ):
        raise ConfigError(f"{where}: expected a state dict (tensor names -> tensors)")
    loaded = {k.removeprefix("module."): v for k, v in loaded.items()}
    own = model.state_dict()
    missing, unknown = sorted(set(own) - set(loaded)), sorted(set(loaded) - set(own))
    if missing or unknown:
        raise ConfigError(
            f"{where}: does not fit this model: {len(missing)} tensor(s) missing "
            f"({', '.join(missing[:3])}{'…' if len(missing) > 3 else ''}), {len(unknown)} "
            f"unexpected ({', '.join(unknown[:3])}{'…' if len(unknown) > 3 else ''})"
        )
    take: dict[str, torch.Tensor] = {}
    fresh: list[str] = []
    for name, theirs in loaded.items():
        mine = own[name]
        if theirs.shape == mine.shape:
            take[name] = theirs.to(mine.dtype)
        elif (
            theirs.ndim == 4
            and theirs.shape[1] == 3
            and mine.shape[1] == 1
            and theirs.shape[0] == mine.shape[0]
            and theirs.shape[2:] == mine.shape[2:]
        ):
            take[name] = theirs.sum(dim=1, keepdim=True).to(mine.dtype)
        elif (
            theirs.ndim >= 1 and mine.shape[0] == num_classes and theirs.shape[1:] == mine.shape[1:]
        ):
            fresh.append(name)
        else:
            raise ConfigError(
                f"{where}: {name} is {tuple(theirs.shape)} there and {tuple(mine.shape)} in this "
                "model (another model, or another image size: train at the weights' size)"
            )
    model.load_state_dict({**own, **take})
    anew = f"; {', '.join(fresh)} initialised anew for {num_classes} classes" if fresh else ""
    return f"weights: {len(take)} of {len(own)} tensors from {path}{anew}"
