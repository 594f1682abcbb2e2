"""A user's own model for hpcbench's trainer (``--model tests.integration.user_model:make`` or
``--model tests/integration/user_model.py:make``): its own class, not one of hpcbench's."""

from __future__ import annotations

from torch import nn


class TinyNet(nn.Module):
    """Two convolutions and a linear head, as a user writes one."""

    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def make(shape, num_classes):
    """The factory hpcbench calls: the dataset's (channels, height, width) and classes."""
    return TinyNet(shape[0], num_classes)


def not_a_model(shape, num_classes):
    return "a string"


def broken(shape, num_classes):
    raise RuntimeError("the user's factory broke")


NOT_CALLABLE = 3
