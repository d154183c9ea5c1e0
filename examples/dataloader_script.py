"""A training script written for torch's DataLoader, as people write them.

It is the test of stoker's promise to be a drop-in: tests/python/test_switch.py
runs it as it is, then with one line changed,

    from torch.utils.data import DataLoader
    from stoker import Loader as DataLoader        # the one changed line

and checks that both runs see the same classes, the same number of samples,
the same batch shapes and counts, and every sample once per epoch. It uses
the habits that a loader must get right: an ImageFolder with its transform,
DataLoader's keywords, a peek at the first batch, len(loader.dataset) and
loader.dataset.classes, DistributedSampler.set_epoch, a checkpoint, and a
resumed run.

    python3 examples/dataloader_script.py --data DIR [--epochs 2] [--sampler]
        [--checkpoint PATH [--resume]]

Prints one JSON object per line: the peek, the dataset, then one per epoch.
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import torch
import torch.nn as nn
import torchvision.transforms as T
from torch.utils.data import DistributedSampler
from torchvision.datasets import ImageFolder
from torch.utils.data import DataLoader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--sampler", action="store_true",
                    help="shard with DistributedSampler (as under torchrun)")
    ap.add_argument("--checkpoint", default="")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)

    transform = T.Compose([
        T.RandomResizedCrop(args.image_size),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize((0.5,), (0.5,)),
    ])
    dataset = ImageFolder(args.data, transform=transform)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    sampler = (DistributedSampler(dataset, num_replicas=world, rank=rank, seed=0)
               if args.sampler else None)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, num_workers=2, pin_memory=True, drop_last=True,
                        persistent_workers=True, prefetch_factor=2)

    images, labels = next(iter(loader))  # a look at the shapes before training
    print(json.dumps({"peek": list(images.shape), "peek_labels": list(labels.shape),
                      "dtype": str(images.dtype)}), flush=True)
    print(json.dumps({"len": len(loader.dataset), "classes": loader.dataset.classes,
                      "class_to_idx": loader.dataset.class_to_idx,
                      "batches": len(loader)}), flush=True)

    n_classes = len(loader.dataset.classes)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, n_classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start_epoch = 0
    if args.resume:
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start_epoch = ck["epoch"] + 1

    for epoch in range(start_epoch, args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        seen = collections.Counter()
        batches, loss_sum = 0, 0.0
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches += 1
            loss_sum += float(loss)
            seen.update(int(v) for v in labels)
        print(json.dumps({"epoch": epoch, "batches": batches, "loss": loss_sum / max(1, batches),
                          "labels": {str(k): v for k, v in sorted(seen.items())}}), flush=True)
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch},
                       args.checkpoint)


if __name__ == "__main__":
    main()
