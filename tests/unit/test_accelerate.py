"""The GPU options on their own: --deterministic's settings and what a resume says of
bit-exactness (a GPU device is named, not used: the note depends only on the device's kind),
--compile's one-line refusal, --channels-last's batch layout."""

from __future__ import annotations

import pytest

from tests.conftest import need_module

torch = need_module("torch")

from hpcbench.train.accelerate import (  # noqa: E402
    batch_layout,
    make_deterministic,
    resume_note,
)
from hpcbench.train.command_line import parse_args  # noqa: E402
from hpcbench.train.config import ConfigError, TrainConfig  # noqa: E402


def test_deterministic_sets_pytorch_cudnn_and_cublas(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic)
    try:
        make_deterministic(TrainConfig(deterministic=False))
        assert not torch.are_deterministic_algorithms_enabled()
        make_deterministic(TrainConfig(deterministic=True))
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        import os

        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.deterministic = before[1]


def test_a_gpu_resume_says_when_it_cannot_be_bit_exact():
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert resume_note(cpu, False, False) is None
    assert resume_note(cuda, True, True) is None
    assert resume_note(cuda, False, True).startswith(
        "note: this run did not use --deterministic on cuda: GPU kernels may sum in another order"
    )
    assert "the run that wrote the checkpoint did not use --deterministic" in resume_note(
        cuda, True, None
    )


def test_the_options_parse_and_refuse_in_one_line():
    config = parse_args(["--channels-last", "--compile", "max-autotune", "--deterministic"])
    assert (
        config.parallelism.channels_last,
        config.parallelism.compile,
        config.checkpoints.deterministic,
    ) == (
        True,
        "max-autotune",
        True,
    )
    assert batch_layout(config) == torch.channels_last
    assert batch_layout(TrainConfig()) == torch.contiguous_format
    with pytest.raises(
        ConfigError, match=r"^--compile default cannot compile .* \(--strategy dp\)"
    ):
        parse_args(["--strategy", "dp", "--compile", "default"])


def test_the_replica_checksum_is_exact_and_independent_of_layout_and_order():
    """Integer sums of the parameters' bits: the same for the same bits in any memory layout
    (and so on any device, whose float sums would differ in the last bits), different for one
    unit in the last place, exact through a float64 all-reduce."""
    from torch import nn

    from hpcbench.train.checkpoint_file import parameter_checksum

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 2))
    plain = parameter_checksum(model)
    assert plain == int(plain) and 0 <= plain < 2**52
    twin = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 2))
    twin.load_state_dict(model.state_dict())
    twin.to(memory_format=torch.channels_last)
    assert twin[0].weight.stride() != model[0].weight.stride()
    assert parameter_checksum(twin) == plain
    with torch.no_grad():
        w = twin[2].weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(1.0))
    assert parameter_checksum(twin) != plain
