"""The options GPU users expect, applied to the model and its batches: ``--channels-last``,
``--compile MODE`` and ``--deterministic``.

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
- ``--deterministic``: a GPU picks kernels that may sum in a different order from one run to the
  next (cuDNN's convolution backward among them), so without it a resumed GPU run is not bit for
  bit the uninterrupted one, nor are two runs alike. With it: PyTorch's deterministic algorithms
  (an operation without a deterministic kernel warns, naming itself), cuDNN's deterministic
  algorithms without autotuning, and the fixed cuBLAS workspace they need
  (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless already set). CPUs are deterministic anyway.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from hpcbench.train.config import ConfigError, TrainConfig


def to_channels_last(model: nn.Module, config: TrainConfig) -> nn.Module:
    return (
        model.to(memory_format=torch.channels_last) if config.parallelism.channels_last else model
    )


def batch_layout(config: TrainConfig) -> torch.memory_format:
    """The memory format a 4-d batch is made in."""
    return torch.channels_last if config.parallelism.channels_last else torch.contiguous_format


def check_compile(config: TrainConfig, device: torch.device) -> None:
    """Raise :class:`ConfigError` (one line) where torch.compile cannot work on ``device``."""
    if config.parallelism.compile == "off":
        return
    try:
        probe = torch.compile(lambda x: x * 2 + 1, mode=config.parallelism.compile, dynamic=False)
        probe(torch.ones(4, device=device))
    except Exception as err:  # noqa: BLE001 - any failure of the compiler stack means the same
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise ConfigError(
            f"--compile {config.parallelism.compile}: torch.compile cannot work on this machine's "
            f"{device.type} ({type(err).__name__}: {first}); run without --compile"
        ) from None
    finally:
        torch._dynamo.reset()


def compiled(model: nn.Module, config: TrainConfig) -> nn.Module:
    """What the training step calls: ``model`` compiled in ``--compile``'s mode, or itself."""
    if config.parallelism.compile == "off":
        return model
    return torch.compile(model, mode=config.parallelism.compile)  # type: ignore[return-value]


def make_deterministic(config: TrainConfig) -> None:
    """``--deterministic``: the settings above, before the first kernel runs."""
    if not config.checkpoints.deterministic:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def resume_note(device: torch.device, now: bool, then: bool | None) -> str | None:
    """What a resume on ``device`` says of bit-exactness: None where it holds (a CPU, or
    --deterministic now and when the checkpoint was written)."""
    if device.type != "cuda" or (now and then):
        return None
    missing = "this run" if not now else "the run that wrote the checkpoint"
    return (
        f"note: {missing} did not use --deterministic on {device.type}: GPU kernels may sum in "
        "another order, so this resume is not bit-exact with an uninterrupted run"
    )
