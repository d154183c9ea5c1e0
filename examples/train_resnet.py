#!/usr/bin/python3
"""Trains torchvision's resnet18 on a folder of JPEGs, fed by stoker or by DataLoader.

    # no daemon: the loader starts a private stokerd for this process
    /usr/bin/python3 examples/train_resnet.py --data DIR --loader stoker --steps 100

    # beside a sidecar daemon (its --data-root must contain DIR)
    /usr/bin/python3 examples/train_resnet.py --data DIR --socket /run/stoker/stoker.sock

    # the same loop with torchvision's DataLoader, for comparison
    /usr/bin/python3 examples/train_resnet.py --data DIR --loader dataloader --steps 100

    # checkpoint every 10 steps, stop, and continue where it stopped
    ... --steps 50 --checkpoint ck.pt            (trains steps 0-49)
    ... --steps 100 --checkpoint ck.pt --resume  (trains steps 50-99)

DIR is an ImageFolder tree (DIR/<class>/<image>.jpg). The transforms are the
ImageNet train recipe, written once as torchvision transforms and given to
either loader. A checkpoint holds the model, the optimizer, the step and the
loader's state: with stoker, resuming continues with exactly the batches an
uninterrupted run would have seen (--print-batches shows which samples).
Uses CUDA when present (stoker then copies uint8 pixels to the GPU and
normalizes there), else the CPU. Under torchrun each process reads its own
shard of every epoch (RANK and WORLD_SIZE).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torchvision import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder tree of JPEGs")
    p.add_argument("--loader", choices=["stoker", "dataloader"], default="stoker")
    p.add_argument("--steps", type=int, required=True, help="train until this many steps in all")
    p.add_argument("--socket", help="a stokerd's socket (default: $STOKER_SOCKET, else a "
                                    "private daemon)")
    p.add_argument("--checkpoint", help="save model, optimizer and loader state here")
    p.add_argument("--checkpoint-every", type=int, default=10, help="steps between saves")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader workers, or a private stokerd's (default: CPUs - 1)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-batches", action="store_true",
                   help="print a digest of each batch's sample indices and pixels (stoker)")
    return p.parse_args(argv)


def train_transform(size: int) -> T.Compose:
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


class DataLoaderFeed:
    """torchvision ImageFolder + DataLoader, with the epoch and batch counted
    so that --resume skips what was trained (DataLoader cannot restore its
    random crops; its resume is approximate)."""

    def __init__(self, args, device):
        self.ds = torchvision.datasets.ImageFolder(args.data, train_transform(args.image_size))
        self.args, self.device = args, device
        self.sampler = torch.utils.data.DistributedSampler(
            self.ds, num_replicas=int(os.environ.get("WORLD_SIZE", 1)),
            rank=int(os.environ.get("RANK", 0)), shuffle=True, seed=args.seed)
        workers = args.workers if args.workers is not None else max(1, (os.cpu_count() or 2) - 1)
        self.dl = torch.utils.data.DataLoader(self.ds, batch_size=args.batch_size,
                                              sampler=self.sampler, num_workers=workers,
                                              persistent_workers=workers > 0,
                                              pin_memory=device.type == "cuda")
        self.num_classes = len(self.ds.classes)
        self.epoch, self.batch = 0, 0

    def batches(self):
        while True:
            self.sampler.set_epoch(self.epoch)
            for i, (x, y) in enumerate(self.dl):
                if i < self.batch:
                    continue
                self.batch = i + 1
                yield (x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True),
                       None)
            self.epoch, self.batch = self.epoch + 1, 0

    def state_dict(self):
        return {"epoch": self.epoch, "batch": self.batch}

    def load_state_dict(self, s):
        self.epoch, self.batch = s["epoch"], s["batch"]

    def close(self):
        pass


class StokerFeed:
    """stoker.Loader with the same transforms, run by the daemon."""

    def __init__(self, args, device):
        import stoker

        self.loader = stoker.Loader(
            args.data, socket=args.socket, batch_size=args.batch_size,
            transform=train_transform(args.image_size), seed=args.seed, drop_last=False,
            device=device if device.type == "cuda" else None, num_workers=args.workers)
        self.num_classes = len(self.loader.class_names)

    def batches(self):
        while True:
            for b in self.loader.iter_batches():
                yield b.images, b.labels, b

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, s):
        self.loader.load_state_dict(s)

    def close(self):
        self.loader.close()


def digest(view) -> str:
    """Which samples, and which pixels, a batch holds: 12 hex digits."""
    h = hashlib.sha256(view.indices.tobytes())
    h.update(view.images.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:12]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.resume and not args.checkpoint:
        sys.exit("--resume needs --checkpoint")
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and "LOCAL_RANK" in os.environ:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    feed = (StokerFeed if args.loader == "stoker" else DataLoaderFeed)(args, device)
    model = torchvision.models.resnet18(num_classes=feed.num_classes).to(device)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    step = 0
    if args.resume:
        ck = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        feed.load_state_dict(ck["loader"])
        step = ck["step"]
        print(f"resumed from {args.checkpoint} at step {step} (loader {ck['loader']})",
              flush=True)

    def save():
        tmp = args.checkpoint + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                    "loader": feed.state_dict()}, tmp)
        os.replace(tmp, args.checkpoint)

    model.train()
    t0, seen = time.perf_counter(), 0
    batches = feed.batches()
    try:
        while step < args.steps:  # checked before taking a batch: the state stays exact
            images, labels, view = next(batches)
            images = images.contiguous(memory_format=torch.channels_last)
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            value = float(loss)
            if not math.isfinite(value):
                print(f"step {step}: loss is {value}", file=sys.stderr)
                return 1
            seen += len(labels)
            line = f"step {step} loss {value:.4f}"
            if args.print_batches and view is not None:
                line += f" epoch {view.epoch} batch {view.batch_in_epoch} digest {digest(view)}"
            print(line, flush=True)
            step += 1
            del images, view  # a stoker batch's slot returns to the daemon
            if args.checkpoint and step % args.checkpoint_every == 0:
                save()
        if args.checkpoint:
            save()
    finally:
        feed.close()
    dt = time.perf_counter() - t0
    print(f"trained {step} steps, {seen} images in {dt:.1f} s ({seen / max(dt, 1e-9):.1f} "
          f"images/s) on {device} with {args.loader}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
