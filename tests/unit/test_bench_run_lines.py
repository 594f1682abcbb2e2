"""What ``hpcbench bench`` prints of a run while it goes: its epoch lines, the trainer's and a
user's script's alike (whatever the launcher's label before them), and never a progress bar or
a traceback's line that mentions an epoch."""

from __future__ import annotations

import pytest

from hpcbench.bench.reading.run_lines import epoch_line


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        # the trainer's
        ("epoch 2/3: loss 0.4121 acc 0.8500 | val_loss 0.5 | 3.1 s",
         "epoch 2/3: loss 0.4121 acc 0.8500 | val_loss 0.5 | 3.1 s"),
        ("[default0]:epoch 1/3: loss 0.9", "epoch 1/3: loss 0.9"),
        # jobs/own-training/train.py's, and other scripts' habits
        ("epoch 1: loss 0.693, val accuracy 0.500", "epoch 1: loss 0.693, val accuracy 0.500"),
        ("[0] epoch 3: loss 0.1", "epoch 3: loss 0.1"),
        ("1: Epoch 2/10 - loss: 0.31 - acc: 0.90", "Epoch 2/10 - loss: 0.31 - acc: 0.90"),
        ("[1,0]<stdout>:Epoch [4/5] loss=0.2", "Epoch [4/5] loss=0.2"),
        ("EPOCH 7 loss=0.2 acc=0.9", "EPOCH 7 loss=0.2 acc=0.9"),
    ],
)  # fmt: skip
def test_an_epoch_line_is_shown_without_its_label(line, shown):
    assert epoch_line(line) == shown


@pytest.mark.parametrize(
    "line",
    [
        "epoch 1/3 [############            ]  50% 50/100 1,200 step/s    1s left",
        "[default0]:epoch 2/3 [########################] 100% 100/100 900 step/s 0s left in 1.1s",
        '  File "train.py", line 9, in train_one_epoch',
        "UserWarning: the scheduler stepped before the epoch 1 ended",
        "epoch 3",
        "epochs: 3",
        "loading data for epoch 1: done",
    ],
)
def test_other_lines_are_not_epoch_lines(line):
    assert epoch_line(line) is None
