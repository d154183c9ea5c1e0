#!/usr/bin/python3
"""Record files through a loader: PatchCamelyon-like HDF5 (x: N x 96 x 96 x
3 uint8, y: N x 1 x 1 x 1) read by stoker.Loader and by DataLoader, 2
workers each, the same files and the same torchvision transform.

    /usr/bin/python3 bench/records.py [--quick] [--rounds N] [--epochs N]
        [--images N] [--build build] [--data /tmp/stoker-records-bench] [--out bench]

The set (made once in --data): PCam's two files under its names
(pcam/camelyonpatch_level_2_split_train_{x,y}.h5), written by h5py as
PCam's are (contiguous, uncompressed once gunzip'd), of H&E-like tiles: a
pink stroma field with fibre texture, purple nuclei of varied size and
density, pixel noise. The transform, as PCam training scripts write it:
RandomHorizontalFlip, RandomVerticalFlip, ToTensor, Normalize; batch 128,
shuffled, float32 [128, 3, 96, 96].

Three sides, each in its own process per round:
  stoker       stoker.Loader(x.h5, record_labels=y.h5, transform=..., size=96),
               a private daemon with 2 workers;
  torchvision  DataLoader(torchvision.datasets.PCAM(root, transform=...)),
               2 workers: PCAM's __getitem__ opens both files for each item,
               as torchvision ships it;
  h5_once      DataLoader over a Dataset that opens the files once per
               worker and keeps them (the advice users are given), 2 workers.
For each: one epoch untimed, then --epochs timed: images/s (wall) and CPU
seconds per 1000 images of the whole process tree. Medians over --rounds
rounds, the sides alternated, the CPU named; ratios stoker / each side.
Nothing here asserts a timing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from proc_tree import tree  # noqa: E402

SIDES = ("stoker", "torchvision", "h5_once")
X_NAME = "camelyonpatch_level_2_split_train_x.h5"
Y_NAME = "camelyonpatch_level_2_split_train_y.h5"
BATCH = 128


def he_tiles(rng, n, side=96):
    """n H&E-like tiles, n x side x side x 3 uint8."""
    import numpy as np
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    out = np.empty((n, side, side, 3), np.uint8)
    stroma = np.array([232, 178, 204], np.float32)
    nucleus = np.array([92, 54, 138], np.float32)
    for i in range(n):
        # Fibres: a few oriented sinusoids, then nuclei as soft discs.
        f = np.zeros((side, side), np.float32)
        for _ in range(3):
            a, k, ph = rng.uniform(0, np.pi), rng.uniform(0.2, 0.9), rng.uniform(0, 6.3)
            f += np.sin(k * (xx * np.cos(a) + yy * np.sin(a)) + ph)
        f = 0.5 + f / 6.0
        m = np.zeros((side, side), np.float32)
        for _ in range(int(rng.integers(5, 60))):
            cy, cx, r = rng.uniform(0, side), rng.uniform(0, side), rng.uniform(2, 7)
            m = np.maximum(m, np.clip(1.5 - ((yy - cy) ** 2 + (xx - cx) ** 2) / (r * r), 0, 1))
        img = stroma * (0.85 + 0.15 * f)[..., None]
        img = img * (1 - m[..., None]) + nucleus * m[..., None]
        img += rng.normal(0, 9, img.shape)
        out[i] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def make_set(data, count):
    import h5py
    import numpy as np
    folder = os.path.join(data, "pcam")
    xp, yp = os.path.join(folder, X_NAME), os.path.join(folder, Y_NAME)
    if os.path.exists(xp) and os.path.exists(yp):
        with h5py.File(xp) as f:
            if f["x"].shape[0] == count:
                return folder
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    with h5py.File(xp + ".tmp", "w") as f:
        x = f.create_dataset("x", shape=(count, 96, 96, 3), dtype=np.uint8)
        for at in range(0, count, 1024):
            x[at:at + 1024] = he_tiles(rng, min(1024, count - at))
    with h5py.File(yp, "w") as f:
        f.create_dataset("y", data=rng.integers(0, 2, (count, 1, 1, 1), dtype=np.uint8))
    os.replace(xp + ".tmp", xp)
    return folder


class H5Once:
    """The files opened once per worker (on first use in it) and kept."""

    def __init__(self, folder, transform):
        import h5py
        self.folder, self.transform = folder, transform
        with h5py.File(os.path.join(folder, X_NAME)) as f:
            self.n = f["x"].shape[0]
        self.x = self.y = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import h5py
        from PIL import Image
        if self.x is None:
            self.x = h5py.File(os.path.join(self.folder, X_NAME))["x"]
            self.y = h5py.File(os.path.join(self.folder, Y_NAME))["y"]
        return self.transform(Image.fromarray(self.x[i]).convert("RGB")), int(self.y[i, 0, 0, 0])


def side(a):
    """One side, one round, in this process: prints a JSON line."""
    import torch
    import torchvision.transforms as T
    transform = T.Compose([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.ToTensor(),
                           T.Normalize([0.70, 0.55, 0.70], [0.15, 0.17, 0.13])])
    folder = a.root
    if a.side == "stoker":
        sys.path.insert(0, os.path.join(a.build, "python"))
        import stoker
        loader = stoker.Loader(os.path.join(folder, X_NAME),
                               record_labels=os.path.join(folder, Y_NAME), transform=transform,
                               size=96, batch_size=BATCH, shuffle=True, num_workers=2, seed=0,
                               data_root=os.path.dirname(folder))
    else:
        if a.side == "torchvision":
            from torchvision.datasets import PCAM
            ds = PCAM(os.path.dirname(folder), split="train", transform=transform)
        else:
            ds = H5Once(folder, transform)
        loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=2,
                                             persistent_workers=True)
    for x, y in loader:  # untimed: the daemon's start, the page cache
        pass
    t1, c1 = time.monotonic(), tree(os.getpid())[0]
    images = 0
    for e in range(a.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(e + 1)
        for x, y in loader:
            assert x.dtype == torch.float32 and tuple(x.shape[1:]) == (3, 96, 96)
            images += x.shape[0]
    wall, cpu = time.monotonic() - t1, tree(os.getpid())[0] - c1
    if hasattr(loader, "close"):
        loader.close()
    print(json.dumps(dict(images=images, seconds=wall, cpu=cpu)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--images", type=int, default=16384)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", default="/tmp/stoker-records-bench")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--side")
    ap.add_argument("--root")
    ap.add_argument("--sides", default=",".join(SIDES))
    a = ap.parse_args()
    if a.side:
        return side(a)
    cpu_model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                      if line.startswith("model name")), "?")
    count = 1024 if a.quick else a.images
    data = a.data + ("-quick" if a.quick else "")
    folder = make_set(data, count)
    sides = tuple(s for s in a.sides.split(",") if s)
    runs = {s: [] for s in sides}
    rounds = 1 if a.quick else a.rounds
    for r in range(rounds):
        for s in (sides if r % 2 == 0 else tuple(reversed(sides))):
            cmd = [sys.executable, os.path.abspath(__file__), "--side", s, "--root", folder,
                   "--build", a.build, "--epochs", str(1 if a.quick else a.epochs)]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[s].append(json.loads(line.strip().splitlines()[-1]))
            print(s, runs[s][-1], flush=True)
    row = dict(images=count)
    for s in sides:
        row[s] = dict(
            images_per_s=statistics.median(x["images"] / x["seconds"] for x in runs[s]),
            cpu_s_per_1000=statistics.median(1000 * x["cpu"] / x["images"] for x in runs[s]))
    for s in sides:
        if s != "stoker" and "stoker" in sides:
            row[f"speedup_vs_{s}"] = row["stoker"]["images_per_s"] / row[s]["images_per_s"]
    if not a.quick:
        with open(os.path.join(a.out, "records.json"), "w") as f:
            json.dump(dict(cpu=cpu_model, rounds=rounds, row=row), f, indent=1)
    print(f"CPU: {cpu_model}; {count} PCam-like images, medians of {rounds} round(s)")
    for s in sides:
        x = row[s]
        print(f"{s:>12}: {x['images_per_s']:8.0f} images/s, "
              f"{x['cpu_s_per_1000']:.2f} CPU s per 1000 images")
    for s in sides:
        if f"speedup_vs_{s}" in row:
            print(f"stoker vs {s}: {row[f'speedup_vs_{s}']:.2f}x")


if __name__ == "__main__":
    main()
