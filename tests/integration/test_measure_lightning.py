"""A PyTorch Lightning run measured by hpcbench's callback (:mod:`hpcbench.measure.lightning`):
Lightning's DDP on two CPU ranks under torchrun, a fit then a test, its documents read as the
trainer's are."""

from __future__ import annotations

import json
import textwrap

from tests.conftest import hpcbench, need_module
from tests.integration.test_trainer import launch, run

need_module("lightning")

SCRIPT = """
import sys, torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from hpcbench.measure.lightning import HpcbenchCallback

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)
    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss
    def validation_step(self, batch, _):
        x, y = batch
        self.log("val/acc", (self.layer(x).argmax(1) == y).float().mean(), sync_dist=True)
    def test_step(self, batch, _):
        x, y = batch
        self.log("test_accuracy", (self.layer(x).argmax(1) == y).float().mean(), sync_dist=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

torch.manual_seed(0)
x = torch.randn(256, 8)
data = TensorDataset(x, (x[:, 0] > 0).long())
loader = lambda: DataLoader(data, batch_size=16)
callback = HpcbenchCallback(sys.argv[1], until="test", model="lightning-net")
trainer = L.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, callbacks=[callback],
    logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Net(), loader(), loader())
trainer.test(trainer.lightning_module, loader())
"""


def test_a_lightning_ddp_fit_and_test_is_measured_like_the_trainer(tmp_path):
    script = tmp_path / "lit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "run"
    done = run(launch("ddp", 2, [str(script), str(out)]), tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["measured_by"] == "hpcbench.measure" and m["warnings"] == []
    assert (m["run"]["world_size"], m["run"]["epochs"], m["run"]["strategy"]) == (2, 2, "ddp")
    assert m["run"]["global_batch"] == 32 and m["run"]["steps_per_epoch"] == 8  # 128 a rank
    assert m["provenance"]["launcher"] == "lightning"
    assert all(m["phases"][k] > 0 for k in ("setup_s", "train_s", "val_s", "test_s"))
    assert [set(e) >= {"train_loss", "val_acc"} for e in m["epochs"]] == [True, True]
    assert 0.0 <= m["test"]["accuracy"] <= 1.0
    # rank 0's phases in time order: set-up, then each epoch's training and validation (the
    # validation taken out of the training), the test last
    phases = [w["phase"] for w in m["phase_windows"]]
    assert phases[0] == "setup" and phases[-1] == "test" and phases.count("val") == 2, phases
    bounds = [t for w in m["phase_windows"] for t in (w["start"], w["end"])]
    assert bounds == sorted(bounds)
    recorded = hpcbench("history", "--add", str(out), cwd=tmp_path,
                        env={"HPCBENCH_HISTORY": str(tmp_path / "h.sqlite")})  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
