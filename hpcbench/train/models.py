"""Models by name. The small built-ins live here; torchvision models are adapted in issue 4's
trainer. ``small_cnn`` is the quick default: four strided conv blocks and a global average pool,
so it takes any image size and channel count.
"""

from __future__ import annotations

from torch import nn


def small_cnn(
    in_channels: int, num_classes: int, image_size: tuple[int, int] = (32, 32), width: int = 32
) -> nn.Module:
    """Strided conv blocks until the feature map is about 6 pixels across (3 to 6 blocks), so the
    receptive field covers objects of any image size; then average pool and a linear layer."""
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
