#!/usr/bin/python3
"""Multi-view recipes (self-supervised learning): stoker vs DataLoader
running the same transform objects, side by side, on the same files.

    /usr/bin/python3 bench/multiview.py [--quick] [--rounds N] [--batches N]
        [--build build] [--data bench/data] [--out bench]

Writes bench/MULTIVIEW.md (raw numbers in bench/out/multiview.json). Uses
bench/make_data.py's ImageNet-like set (run bench/run.sh or make_data.py
first: textured photos of about 400x320, progressive and optimized JPEGs
among them). The recipes, each one transform object given unchanged to
torchvision's ImageFolder (DataLoader, 2 workers) and to stoker.Loader
(transform=, 2 daemon workers), float32 NCHW normalized, batch 32:
(bench/recipes.py, each as its project writes it):
  * simclr: MoCo v2 / SimCLR's two views, MoCo's TwoCropsTransform:
    RandomResizedCrop(224, scale=(0.2, 1)),
    RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
    RandomGrayscale(0.2), RandomApply([MoCo's GaussianBlur([.1, 2.])], p=0.5)
    (PIL's ImageFilter.GaussianBlur), RandomHorizontalFlip, ToTensor,
    Normalize;
  * dino: DINO's DataAugmentationDINO (two 224 global crops, eight 96 local
    ones, all BICUBIC; flip, ColorJitter p=0.8, RandomGrayscale, DINO's own
    GaussianBlur 1.0 / 0.1 / 0.5 (PIL's filter) and Solarization 0.2 on the
    second global crop).
A sample is one image with all its views: images/s counts samples. Each
configuration, in an order rotated each round, is measured by bench.py's
measure() (a warm-up, then --batches timed batches with the producers' and
the consumer's CPU), medians over --rounds rounds. Nothing here asserts a
timing: MULTIVIEW.md says whether the target (stoker at least 4x DataLoader's
images/s at equal CPU: two workers each) was met on this machine, and by how
much it was missed if it was.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (Daemon, measure, CPU accounting, machine_info, log)
import recipes  # noqa: E402  (the projects' transform objects)

BATCH = 32
RECIPES = ("simclr", "dino")


def transform(recipe: str) -> Any:
    if recipe == "simclr":
        return recipes.TwoCropsTransform(recipes.moco_v2())
    return recipes.DataAugmentationDINO((0.4, 1.), (0.05, 0.4), 8)


def touchable(batch: Any) -> Any:
    """(the last view, labels): what bench.touch reads of a batch (it counts
    the samples from the view's first dimension)."""
    views, labels = batch
    return views[-1], labels


class DataLoaderSource(bench.DataLoaderSource):
    def __init__(self, root: str, recipe: str) -> None:  # noqa: D107
        from torchvision.datasets import ImageFolder
        self._start(ImageFolder(root, transform=transform(recipe)), BATCH, shuffle=True)

    def next(self) -> Any:
        return touchable(next(self.it))


class StokerSource(bench.StokerSource):
    def __init__(self, daemon: bench.Daemon, dataset: str, recipe: str,  # noqa: D107
                 name: str) -> None:
        super().__init__(daemon, dataset, "train", "float32", "nchw", name, batch_size=BATCH,
                         transform=transform(recipe))

    def next(self) -> Any:
        return touchable(next(self.it))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=12, help="timed batches per measurement")
    ap.add_argument("--quick", action="store_true", help="the quick data set, 1 round, 4 batches")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    if args.quick:
        args.rounds, args.batches = 1, 4
    started = time.time()
    data_root = os.path.abspath(args.data)
    base = os.path.join(data_root, "quick" if args.quick else "", "imagenet_like")
    if not os.path.isdir(base):
        raise SystemExit(f"{base} is missing: run bench/make_data.py (or bench/run.sh) first")
    rel = os.path.relpath(base, data_root)
    out_dir = os.path.join(args.out, "out")
    os.makedirs(out_dir, exist_ok=True)
    info = bench.machine_info(build)
    daemon = bench.Daemon(build, data_root, bench.WORKERS,
                          os.path.join(out_dir, "multiview-stokerd.log"))
    try:
        runs = bench.side_by_side(
            RECIPES, lambda recipe, config, r: (
                DataLoaderSource(base, recipe) if config == "dl"
                else StokerSource(daemon, rel, recipe, f"{recipe}-{r}")),
            daemon, args.rounds, args.batches)
    finally:
        daemon.stop()
    raw = dict(info=info, runs=runs, rounds=args.rounds, batches=args.batches, quick=args.quick,
               minutes=(time.time() - started) / 60)
    json.dump(raw, open(os.path.join(out_dir, "multiview.json"), "w"), indent=1)
    write(os.path.join(args.out, "MULTIVIEW.md"), raw)
    return 0


def write(path: str, raw: Dict[str, Any]) -> None:
    info, runs = raw["info"], raw["runs"]
    med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
    lines = [
        "# Multi-view recipes: stoker vs DataLoader", "",
        f"Generated by `bench/multiview.py{' --quick' if raw['quick'] else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {raw['minutes']:.1f} min "
        f"({raw['rounds']} rounds, {raw['batches']} timed batches each); the module's docstring "
        "says what runs on each side.", "",
        f"- CPU: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM; {info['os']}; "
        f"stokerd {info['stokerd']}; load average at the end: {bench.loadavg()}.",
        "- Both sides: 2 workers, the same transform object, float32 NCHW, batch "
        f"{BATCH}; images/s (samples, each with all its views) are medians over the rounds; "
        "producer CPU is the workers' (and stokerd's) cores while timed.", "",
        "| recipe | views | DataLoader img/s | stoker img/s | stoker / DataLoader (target >= 4x) "
        "| DataLoader producer cores | stoker producer cores |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for recipe, views in (("simclr", "2 x 224"), ("dino", "2 x 224 + 8 x 96")):
        dl, st = runs[recipe]["dl"], runs[recipe]["stoker"]
        ratio = med(st, "images_per_s") / med(dl, "images_per_s")
        lines.append(f"| {recipe} | {views} | {med(dl, 'images_per_s'):.1f} | "
                     f"{med(st, 'images_per_s'):.1f} | {ratio:.2f}x | "
                     f"{med(dl, 'producer_cores'):.2f} | {med(st, 'producer_cores'):.2f} |")
        verdicts.append(f"- {recipe}: {ratio:.2f}x DataLoader: "
                        + ("target met." if ratio >= 4 else
                           f"target missed by {4 / ratio:.2f}x (stoker would need "
                           f"{4 * med(dl, 'images_per_s'):.0f} img/s)."))
    lines += ["", *verdicts, ""]
    open(path, "w").write("\n".join(lines))
    bench.log("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
