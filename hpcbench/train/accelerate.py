"""The options GPU users expect, applied to the model and its batches: ``--channels-last`` and
``--compile MODE``.

- ``--channels-last``: the model's 4-d weights and every 4-d batch in the channels_last (NHWC)
  memory format, the layout tensor cores and cuDNN's fastest convolutions want. Values are the
  same; only the order in memory changes (on CPUs too, where oneDNN also prefers it). Every
  strategy takes it (the mpi strategy's gradient buckets keep their own layout: the gradients
  are accumulated into them as they are).
- ``--compile MODE``: :func:`torch.compile` of what the training step calls (DDP's wrapper
  under ``ddp``, the model under ``single`` and ``mpi``); evaluation and checkpoints use the
  model itself, so checkpoints are the same with or without it. ``dp`` is refused (its replicas
  are made anew each step). Before training, every rank compiles and runs a one-line function on
  its device: a machine where torch.compile cannot work (no C++ compiler for a CPU, no Triton
  for a GPU) stops in one line naming the option, not in the first step's traceback.
"""

from __future__ import annotations

import torch
from torch import nn

from hpcbench.train.config import ConfigError, TrainConfig


def to_channels_last(model: nn.Module, config: TrainConfig) -> nn.Module:
    return model.to(memory_format=torch.channels_last) if config.channels_last else model


def batch_layout(config: TrainConfig) -> torch.memory_format:
    """The memory format a 4-d batch is made in."""
    return torch.channels_last if config.channels_last else torch.contiguous_format


def check_compile(config: TrainConfig, device: torch.device) -> None:
    """Raise :class:`ConfigError` (one line) where torch.compile cannot work on ``device``."""
    if config.compile == "off":
        return
    try:
        probe = torch.compile(lambda x: x * 2 + 1, mode=config.compile, dynamic=False)
        probe(torch.ones(4, device=device))
    except Exception as err:  # noqa: BLE001 - any failure of the compiler stack means the same
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise ConfigError(
            f"--compile {config.compile}: torch.compile cannot work on this machine's "
            f"{device.type} ({type(err).__name__}: {first}); run without --compile"
        ) from None
    finally:
        torch._dynamo.reset()


def compiled(model: nn.Module, config: TrainConfig) -> nn.Module:
    """What the training step calls: ``model`` compiled in ``--compile``'s mode, or itself."""
    if config.compile == "off":
        return model
    return torch.compile(model, mode=config.compile)  # type: ignore[return-value]
