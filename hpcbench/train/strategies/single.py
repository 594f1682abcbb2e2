"""``single``: one process, the model as it is (no wrapper: wrapping one device only costs time)."""

from __future__ import annotations

from hpcbench.train.strategies.base import Strategy


class SingleStrategy(Strategy):
    name = "single"
