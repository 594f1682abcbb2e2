"""The finite check of the training step: decided on the device, never read back inside the step
(with a fused optimiser), the update of a non-finite step not applied, the first bad step named
when the run reports, and fp16's overflows skipped instead."""

from __future__ import annotations

import pytest

from tests.conftest import need_module

torch = need_module("torch")

from torch import nn  # noqa: E402

from hpcbench.train.finite import Verdicts, nonfinite_flag, step_unless  # noqa: E402
from hpcbench.train.loop import train_step  # noqa: E402
from hpcbench.train.precision import Precision  # noqa: E402


def test_the_flag_finds_nan_and_inf_and_keeps_huge_finite_values():
    model = nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    grads = [model.weight.grad, model.bias.grad, torch.empty(0)]
    assert float(nonfinite_flag(grads)) == 0.0
    assert nonfinite_flag([]) is None
    for bad in (float("nan"), float("-inf"), float("inf")):
        model.weight.grad[0, 1] = bad
        assert float(nonfinite_flag(grads)) == 1.0
    model.weight.grad[0, 1] = 3e38  # finite, though its square overflows float32
    model.bias.grad[0] = -3e38
    assert float(nonfinite_flag(grads)) == 0.0
    mixed = [torch.tensor([1.0], dtype=torch.float64), torch.tensor([float("nan")])]
    assert float(nonfinite_flag(mixed)) == 1.0


class _Single:
    """The single strategy's few methods train_step calls (the real one needs a runtime)."""

    from hpcbench.train.breakdown import NoBreakdown

    breakdown = NoBreakdown()
    loss_scale = 1.0

    def __init__(self, model):
        self.model = model

    def before_forward(self):
        pass

    def zero_grad(self, optimizer):
        optimizer.zero_grad(set_to_none=True)

    def finish_gradients(self):
        return 0.0

    def gradients(self):
        return [p.grad for p in self.model.parameters() if p.grad is not None]


def _refuse_host_reads(monkeypatch):
    def refuse(*_):
        raise AssertionError("a device value was read on the host inside the step")

    for name in ("__bool__", "item", "__float__", "__int__", "tolist", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_step_reads_nothing_back_from_the_device(monkeypatch, optimizer):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
        if optimizer == "sgd"
        else torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    )
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    _refuse_host_reads(monkeypatch)
    loss, _, _, flag = train_step(_Single(model), opt, x, y, nn.CrossEntropyLoss())
    monkeypatch.undo()
    assert float(flag) == 0.0 and loss.isfinite()


def test_a_non_finite_step_is_not_applied_on_the_device_and_is_named_when_read():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    verdicts = Verdicts()
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    strategy = _Single(model)
    for step in range(4):
        xs = x.clone()
        if step == 2:
            xs[0, 0] = float("inf")  # the forward's loss and gradients become non-finite
        before = [p.detach().clone() for p in model.parameters()]
        loss, _, _, flag = train_step(strategy, opt, xs, y, nn.CrossEntropyLoss())
        verdicts.add(flag, 0, step, loss, 0.1)
        after = list(model.parameters())
        unchanged = all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        assert unchanged == (step == 2), step
        assert all(p.isfinite().all() for p in model.parameters())
    bad = verdicts.first_bad()
    assert (bad.epoch, bad.step, bad.lr) == (0, 2, 0.1)
    assert verdicts.first_bad() is None  # read once


def test_an_optimiser_that_cannot_skip_on_the_device_is_stepped_after_a_read():
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0, foreach=False)
    p.grad = torch.ones(2)
    step_unless(opt, torch.tensor(1.0))
    assert torch.equal(p.detach(), torch.ones(2))
    step_unless(opt, torch.tensor(0.0))
    assert torch.equal(p.detach(), torch.zeros(2))


def test_fp16_skips_an_overflowed_step_lowers_the_scale_and_goes_on():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, fused=True)
    precision = Precision("fp16")
    assert not precision.diverges
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    scale = precision.scaler.get_scale()
    bad = x.clone()
    bad[0, 0] = float("inf")
    before = [p.detach().clone() for p in model.parameters()]
    train_step(_Single(model), opt, bad, y, nn.CrossEntropyLoss(), precision)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert precision.skipped == 1 and precision.scaler.get_scale() == scale / 2
    train_step(_Single(model), opt, x, y, nn.CrossEntropyLoss(), precision)
    assert precision.skipped == 1
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_the_precision_record_says_what_fp16_skipped():
    precision = Precision("fp16")
    precision._skipped = torch.tensor(3.0)
    assert precision.record() == {"name": "fp16", "skipped_steps": 3, "loss_scale": 65536.0}
    assert Precision("bf16").record() == {"name": "bf16", "skipped_steps": None, "loss_scale": None}


def test_two_non_finite_groups_still_flag_one():
    """A fused optimiser skips only where found_inf is exactly 1."""
    both = [torch.tensor([float("nan")], dtype=torch.float64), torch.tensor([float("inf")])]
    assert float(nonfinite_flag(both)) == 1.0


def test_a_bad_step_on_a_cpu_is_noticed_at_once():
    verdicts = Verdicts()
    verdicts.add(torch.tensor(0.0), 0, 0, torch.tensor(1.0), 0.1)
    assert not verdicts.maybe_bad()
    verdicts.add(torch.tensor(1.0), 0, 1, torch.tensor(float("nan")), 0.1)
    assert verdicts.maybe_bad()
    assert verdicts.first_bad().step == 1


def test_a_skipped_first_step_leaves_the_momentum_as_if_it_had_not_happened():
    """Fused SGD makes its momentum buffers uninitialised, then skips the step on found_inf
    (fp16's first steps overflow): the trainer's optimiser starts them at zero, which gives
    the first real step SGD's own first update, bit for bit."""
    from hpcbench.train.config import TrainConfig
    from hpcbench.train.optim import make_optimizer

    torch.manual_seed(0)
    a, b = nn.Linear(4, 3), nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    config = TrainConfig(momentum=0.9, lr=0.1)
    opt = make_optimizer(config, a, 128)
    assert all(torch.equal(s["momentum_buffer"], torch.zeros_like(p)) for p, s in opt.state.items())
    reference = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    for p in a.parameters():
        p.grad = torch.full_like(p, float("nan"))
    step_unless(opt, torch.tensor(1.0))  # skipped
    for _ in range(2):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            p.grad = torch.ones_like(p)
            q.grad = torch.ones_like(q)
        step_unless(opt, torch.tensor(0.0))
        reference.step()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
