"""A researcher's own training script: their own model class, torchvision's ImageFolder over a
folder of images, plain PyTorch. It runs as one process, under torchrun (DDP) or under mpiexec
(gradients averaged with mpi4py's Allreduce). The lines marked ``# hpcbench`` are all it takes
for hpcbench to measure it (docs/measure.md):

    python jobs/own-training/make_images.py data/own-images      # a small folder of images
    python jobs/own-training/train.py --data data/own-images --epochs 2
    torchrun --nproc-per-node 2 jobs/own-training/train.py --data data/own-images
    hpcbench bench jobs/own-training/matrix.toml && hpcbench report runs/bench-own-training
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, random_split
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms

from hpcbench import measure  # hpcbench


class ShapesNet(nn.Module):
    """The researcher's own model."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/own-images", help="an ImageFolder: one folder a class")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="the global batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--size", type=int, default=32, help="images are resized to SIZE x SIZE")
    return p.parse_args()


def main() -> None:
    args = arguments()
    mpi = None
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ:
        from mpi4py import MPI  # started by mpiexec: average the gradients with MPI

        mpi, in_place = MPI.COMM_WORLD, MPI.IN_PLACE
    elif "WORLD_SIZE" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
    rank = mpi.Get_rank() if mpi else dist.get_rank() if dist.is_initialized() else 0
    world = mpi.Get_size() if mpi else dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(0)

    with measure.run(model="ShapesNet", dataset=args.data, config=vars(args)) as m:  # hpcbench
        with m.phase("setup"):  # hpcbench
            tf = transforms.Compose(
                [transforms.Grayscale(), transforms.Resize((args.size, args.size)),
                 transforms.ToTensor()]
            )  # fmt: skip
            images = datasets.ImageFolder(args.data, transform=tf)
            train_set, val_set = random_split(
                images, [0.8, 0.2], generator=torch.Generator().manual_seed(0)
            )
            sampler = DistributedSampler(train_set, world, rank, seed=0) if world > 1 else None
            loader = DataLoader(
                train_set, batch_size=args.batch_size // world, sampler=sampler,
                shuffle=sampler is None, drop_last=True,
            )  # fmt: skip
            model = ShapesNet(len(images.classes))
            if dist.is_initialized():
                model = nn.parallel.DistributedDataParallel(model)
            if mpi:  # every rank starts from rank 0's weights
                for p in model.parameters():
                    p.data.copy_(torch.from_numpy(mpi.bcast(p.data.numpy(), root=0)))
            optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            model.train()
            with m.phase("train"):  # hpcbench
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                    if mpi:
                        for p in model.parameters():
                            mpi.Allreduce(in_place, p.grad.numpy())  # summed, then averaged
                            p.grad /= world
                    optimizer.step()
                    m.step(samples=len(x))  # hpcbench
            with m.phase("val"):  # hpcbench
                accuracy = evaluate(model, val_set)
            m.epoch(train_loss=loss.item(), val_accuracy=accuracy)  # hpcbench
            if rank == 0:
                print(f"epoch {epoch + 1}: loss {loss.item():.3f}, val accuracy {accuracy:.3f}")
        m.final(test_accuracy=accuracy)  # hpcbench: this study keeps no separate test split
    if dist.is_initialized():
        dist.destroy_process_group()


@torch.no_grad()
def evaluate(model: nn.Module, data: torch.utils.data.Dataset) -> float:
    model.eval()
    right = total = 0
    for x, y in DataLoader(data, batch_size=256):
        right += int((model(x).argmax(1) == y).sum())
        total += len(y)
    return right / max(1, total)


if __name__ == "__main__":
    main()
