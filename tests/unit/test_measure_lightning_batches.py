"""The Lightning callback (:mod:`hpcbench.measure.lightning`) in a real in-process ``trainer.fit``
on one CPU device, with batches whose ``shape`` cannot be read as usual: a nested tensor (its
components counted), and a batch whose ``shape`` is not a tuple of whole numbers (the fit goes on,
each such batch counts one sample, and one warning says so)."""

from __future__ import annotations

import json
import warnings

from hpcbench.measure.recorder import MeasureWarning
from tests.conftest import need_module

torch = need_module("torch")
L = need_module("lightning")


class OddShape:
    """A batch whose ``shape`` is no tuple of whole numbers (a symbolic size, a library's own)."""

    shape = ("n", 8)

    def __init__(self, x: object) -> None:
        self.x = x


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        rows = batch.x if isinstance(batch, OddShape) else batch.unbind()
        return sum(self.layer(r[:4]).sum() for r in rows)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def nested(_items):
    return torch.nested.nested_tensor([torch.ones(5), torch.ones(7)])


def odd(_items):
    return OddShape(torch.ones(3, 8))


def fit(run_dir, collate) -> list[str]:
    from torch.utils.data import DataLoader

    from hpcbench.measure.lightning import HpcbenchCallback

    loader = DataLoader(list(range(6)), batch_size=2, collate_fn=collate)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[HpcbenchCallback(run_dir, model="odd", telemetry=0)],
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Net(), loader)
    return [str(w.message) for w in caught if issubclass(w.category, MeasureWarning)]


def test_a_nested_tensor_batch_counts_its_components_and_the_fit_goes_on(tmp_path):
    said = fit(tmp_path / "run", nested)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["ranks"][0]["steps"] == 3 and metrics["ranks"][0]["samples"] == 6
    assert said == []


def test_a_batch_whose_shape_is_not_whole_numbers_counts_one_sample(tmp_path):
    said = fit(tmp_path / "run", odd)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["ranks"][0]["samples"] == 3
    assert len([w for w in said if "counted as 1 sample" in w]) == 1
