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

    # torchvision's "v2" ImageNet recipe: TrivialAugmentWide, RandomErasing,
    # mixup / cutmix, label smoothing
    ... --recipe v2

DIR is an ImageFolder tree (DIR/<class>/<image>.jpg). The transforms are the
ImageNet train recipe (--recipe v1, the default: RandomResizedCrop +
RandomHorizontalFlip; or torchvision's reference v2 recipe: RandomResizedCrop
176, RandomHorizontalFlip, TrivialAugmentWide, PILToTensor,
ConvertImageDtype(float), Normalize, RandomErasing(0.1), then per batch a
RandomChoice of MixUp(alpha 0.2) and CutMix(alpha 1.0), with label smoothing
0.1), written once as torchvision transforms and given to either loader
(the batch transforms are stoker.batch's: with DataLoader they run after
collation). A checkpoint holds the model, the optimizer, the step and the
loader's state: with stoker, resuming continues with exactly the batches an
uninterrupted run would have seen, mixed alike (--print-batches shows which
samples).
Uses CUDA when present (stoker then copies uint8 pixels to the GPU and
normalizes there; with v2, whose RandomErasing works on normalized values, it
copies the daemon's float batches and mixes them on the GPU), else the CPU.
Under torchrun each process reads its own shard of every epoch (RANK and
WORLD_SIZE).
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
    p.add_argument("--recipe", choices=["v1", "v2"], default="v1",
                   help="v1: RandomResizedCrop + flip; v2: torchvision's reference v2 recipe "
                        "(TrivialAugmentWide, RandomErasing, mixup/cutmix, label smoothing)")
    p.add_argument("--image-size", type=int, default=None,
                   help="the train crop (default: 224 for v1, 176 for v2)")
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader workers, or a private stokerd's (default: CPUs - 1)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-batches", action="store_true",
                   help="print a digest of each batch's sample indices and pixels (stoker)")
    return p.parse_args(argv)


def train_transform(args) -> T.Compose:
    if args.recipe == "v1":
        return T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
                          T.ToTensor(), T.Normalize(MEAN, STD)])
    # torchvision's references/classification presets.ClassificationPresetTrain
    # as train.py builds it for the v2 recipe (--auto-augment ta_wide
    # --random-erase 0.1, bilinear).
    bilinear = T.InterpolationMode.BILINEAR
    return T.Compose([T.RandomResizedCrop(args.image_size, interpolation=bilinear),
                      T.RandomHorizontalFlip(), T.TrivialAugmentWide(interpolation=bilinear),
                      T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD),
                      T.RandomErasing(p=0.1)])


def batch_transform(args, num_classes: int):
    """The v2 recipe's --mixup-alpha 0.2 --cutmix-alpha 1.0: one of them per batch."""
    if args.recipe == "v1":
        return None
    import stoker

    return stoker.RandomChoice([stoker.MixUp(alpha=0.2, num_classes=num_classes),
                                stoker.CutMix(alpha=1.0, num_classes=num_classes)])


class DataLoaderFeed:
    """torchvision ImageFolder + DataLoader, with the epoch and batch counted
    so that --resume skips what was trained (DataLoader cannot restore its
    random crops; its resume is approximate)."""

    def __init__(self, args, device):
        self.ds = torchvision.datasets.ImageFolder(args.data, train_transform(args))
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
        self.mix = batch_transform(args, self.num_classes)
        self.epoch, self.batch = 0, 0

    def batches(self):
        while True:
            self.sampler.set_epoch(self.epoch)
            for i, (x, y) in enumerate(self.dl):
                if i < self.batch:
                    continue
                self.batch = i + 1
                if self.mix is not None:  # after collation, as the reference's collate_fn
                    x, y = self.mix(x, y)
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
            transform=train_transform(args), seed=args.seed, drop_last=False,
            device=device if device.type == "cuda" else None, num_workers=args.workers)
        self.num_classes = len(self.loader.class_names)
        # The one-hot labels need the classes, which the session tells.
        self.loader.batch_transform = batch_transform(args, self.num_classes)

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
    if args.image_size is None:
        args.image_size = 224 if args.recipe == "v1" else 176
    label_smoothing = 0.1 if args.recipe == "v2" else 0.0
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
            # v2: soft labels (mixup / cutmix), which cross_entropy takes as
            # class probabilities.
            loss = F.cross_entropy(model(images), labels, label_smoothing=label_smoothing)
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
          f"images/s) on {device} with {args.loader}, recipe {args.recipe}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
