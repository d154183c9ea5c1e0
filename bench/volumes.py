#!/usr/bin/python3
"""3-D volumes through a loader: stoker.Loader against a DataLoader
pipeline written as MONAI users write the Decathlon spleen recipe, 2
workers each, on the same files and transforms.

    /usr/bin/python3 bench/volumes.py [--quick] [--rounds N] [--epochs N]
        [--volumes N] [--build build] [--data /tmp/stoker-volume-bench] [--out bench]

The set (bench/volume_corpus.py, made once in --data): CT-like volumes as
scanners and the Decathlon store them, 512 x 512 x 100-300 int16 in
Hounsfield units, gzip'd NIfTI, anisotropic spacing (0.7-0.9 mm in-plane,
1.5-5 mm between slices), LPS affines; a label volume each; a dataset.json.
The recipe: Orientation RAS, Spacing 1.5 x 1.5 x 2.0 (image trilinear, label
nearest), ScaleIntensityRange -57..164 -> 0..1 clipped, CropForeground,
RandCropByPosNegLabel 96^3 pos 1 neg 1 num_samples 4; batch 2 volumes (8
patches).

Three sides, each in its own process per round:
  stoker     stoker.Loader(dataset.json, transform=stoker.volume.Compose(...)),
             a private daemon with 2 workers and a fresh volume cache: the
             first epoch prepares and caches each volume, later ones cut
             patches from the cache;
  uncached   DataLoader(num_workers=2) over a Dataset whose __getitem__ runs
             the whole recipe (nibabel; numpy; torch's grid_sample for
             Spacing, as MONAI's Resample does on the CPU), every epoch;
  ram_cached MONAI's CacheDataset pattern: the deterministic prefix computed
             for every volume before the first epoch and kept in the main
             process's RAM (the workers fork and share it), the random crop
             per item in the workers (MONAI's RandCropByPosNegLabeld: the
             label's foreground and background indices found anew each call).
The DataLoader sides transcribe MONAI's transforms with the libraries MONAI
calls (its geometry functions as test_volume_ops.py checks them); the work
per volume is MONAI's. For each side: the first epoch's seconds (stoker:
preparing and caching; ram_cached: filling its cache), then --epochs timed
epochs: volumes/s (wall), CPU seconds per volume of the whole process tree,
and the tree's proportional resident memory (PSS, /proc/PID/smaps_rollup:
shared pages counted once) at the end: the whole tree's, the loader's (less
the trainer's own before the loader was made: Python, torch), and the
loader's pinned memory (its anonymous and shared memory: PSS less clean
file pages such as a mapped cache entry's, which the kernel may drop). Medians over --rounds rounds, the
sides alternated, the CPU named. Nothing here asserts a timing.
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

PIXDIM = (1.5, 1.5, 2.0)
A_MIN, A_MAX = -57.0, 164.0
PATCH, SAMPLES = 96, 4  # --quick: 48
SIDES = ("stoker", "uncached", "ram_cached")


def make_set(data, count, quick):
    """data/Task09/{imagesTr,labelsTr}/ct_N.nii.gz and dataset.json."""
    import numpy as np
    import nibabel as nib
    from volume_corpus import ct_volume
    task = os.path.join(data, "Task09")
    if os.path.exists(os.path.join(task, "dataset.json")):
        return task
    os.makedirs(os.path.join(task, "imagesTr"), exist_ok=True)
    os.makedirs(os.path.join(task, "labelsTr"), exist_ok=True)
    rng = np.random.default_rng(37)
    training = []
    for n in range(count):
        side = 256 if quick else 512
        depth = int(rng.integers(40, 80) if quick else rng.integers(100, 301))
        # At least 220 mm along z, so that a 96-voxel patch at 2 mm fits.
        z = max(float(rng.choice([1.5, 2.5, 3.0, 5.0])), 220.0 / depth)
        spacing = (float(rng.uniform(0.7, 0.9)),) * 2 + (z,)
        hu, label, aff = ct_volume((side, side, depth), rng, spacing)
        nib.save(nib.Nifti1Image(hu, aff), os.path.join(task, "imagesTr", f"ct_{n}.nii.gz"))
        nib.save(nib.Nifti1Image(label, aff), os.path.join(task, "labelsTr", f"ct_{n}.nii.gz"))
        training.append({"image": f"./imagesTr/ct_{n}.nii.gz", "label": f"./labelsTr/ct_{n}.nii.gz"})
    with open(os.path.join(task, "dataset.json"), "w") as f:
        json.dump({"name": "CT", "labels": {"0": "background", "1": "organ"},
                   "training": training}, f)
    return task


# ---------------------------------------------------------------------------
# The DataLoader sides: MONAI's transforms, transcribed.

def zoom_geometry(aff, shape, pixdim):
    """monai.data.utils.zoom_affine + compute_shape_offset (diagonal=False)."""
    import numpy as np
    rzs = aff[:3, :3]
    zs = np.linalg.cholesky(rzs.T @ rzs).T
    new = np.eye(4)
    new[:3, :3] = rzs @ np.linalg.inv(zs) @ np.diag(np.sign(np.diag(zs)) * np.abs(pixdim))
    corners = np.asarray(np.meshgrid(*[(0.0, d - 1.0) for d in shape], indexing="ij"))
    corners = np.concatenate((corners.reshape(3, -1), np.ones((1, 8))))
    out = (np.linalg.solve(new, aff) @ corners)[:3]
    world = (aff @ corners)[:3]
    out_shape = tuple(int(v) for v in np.round(np.ptp(out, axis=1) + 1.0))
    offset = None
    for i in range(8):
        if np.allclose(np.min(out - out[:, i:i + 1], 1), 0.0, rtol=1e-3):
            offset = world[:, i]
            break
    if offset is None:
        offset = aff[:3, :3] @ (np.array(shape) / 2.0) + aff[:3, 3] - new[:3, :3] @ (np.array(out_shape) / 2.0)
    new[:3, 3] = offset
    return new, out_shape


def resample(vol, src_aff, dst_aff, shape, mode):
    """MONAI's SpatialResample on the CPU: an affine grid and grid_sample
    (align_corners=False coordinates, border padding)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    m = np.linalg.solve(src_aff, dst_aff)  # output voxel -> input voxel
    src = np.array(vol.shape, float)
    dst = np.array(shape, float)
    # normalized coords (align_corners=False): x_n = (2 x + 1) / n - 1
    to_vox = np.eye(4)
    to_vox[:3, :3] = np.diag(dst / 2)
    to_vox[:3, 3] = dst / 2 - 0.5
    to_norm = np.eye(4)
    to_norm[:3, :3] = np.diag(2 / src)
    to_norm[:3, 3] = 1 / src - 1
    theta = (to_norm @ m @ to_vox)[:3]
    # grid_sample's last grid axis is (x, y, z) = (W, H, D): reverse the axes.
    perm = [2, 1, 0]
    theta = np.concatenate([theta[perm][:, perm], theta[perm][:, 3:]], axis=1)
    t = torch.from_numpy(np.ascontiguousarray(vol, dtype=np.float32))[None, None]
    grid = F.affine_grid(torch.from_numpy(theta[None]).float(), (1, 1) + tuple(shape),
                         align_corners=False)
    out = F.grid_sample(t, grid, mode=mode, padding_mode="border", align_corners=False)
    return out[0, 0].numpy()


def prefix(image_path, label_path):
    """LoadImaged .. CropForegroundd: (image [1, X, Y, Z] float32, label [1, X, Y, Z])."""
    import numpy as np
    import nibabel as nib
    img = nib.load(image_path)
    lab = nib.load(label_path)
    arr = np.asanyarray(img.dataobj).astype(np.float32)
    seg = np.asanyarray(lab.dataobj).astype(np.float32)
    aff = img.affine
    ornt = nib.orientations.ornt_transform(nib.io_orientation(aff),
                                           nib.orientations.axcodes2ornt("RAS"))
    arr = nib.orientations.apply_orientation(arr, ornt)
    seg = nib.orientations.apply_orientation(seg, ornt)
    aff = aff @ nib.orientations.inv_ornt_aff(ornt, img.shape)
    new, shape = zoom_geometry(aff, arr.shape, PIXDIM)
    arr = resample(arr, aff, new, shape, "bilinear")
    seg = resample(seg, aff, new, shape, "nearest")
    arr = np.clip((arr - A_MIN) / (A_MAX - A_MIN), 0.0, 1.0)
    fg = arr > 0
    box = []
    for ax in range(3):
        other = tuple(a for a in range(3) if a != ax)
        hits = np.where(fg.any(axis=other))[0]
        box.append(slice(hits[0], hits[-1] + 1))
    return arr[tuple(box)][None].copy(), seg[tuple(box)][None].copy()


def rand_crop(image, label, rng):
    """RandCropByPosNegLabeld(spatial_size=96, pos=1, neg=1, num_samples=4,
    image_threshold=0): map_binary_to_indices on every call, then the
    centres and crops."""
    import numpy as np
    fg = np.nonzero(label[0].ravel() > 0)[0]
    bg = np.nonzero((label[0].ravel() == 0) & (image.max(0).ravel() > 0))[0]
    shape = image.shape[1:]
    out = []
    for _ in range(SAMPLES):
        idx = fg if (rng.random() < 0.5 and len(fg)) or not len(bg) else bg
        centre = np.unravel_index(idx[rng.integers(len(idx))], shape)
        start = [min(max(int(c) - PATCH // 2, 0), max(n - PATCH, 0)) for c, n in zip(centre, shape)]
        sl = (slice(None),) + tuple(slice(s, s + PATCH) for s in start)
        out.append({"image": image[sl].copy(), "label": label[sl].copy()})
    return out


class Spleen:
    """A map-style Dataset over dataset.json's training list; `cache` holds
    the prepared volumes (CacheDataset) or is None (every epoch prepares)."""

    def __init__(self, task, cache=None):
        with open(os.path.join(task, "dataset.json")) as f:
            self.items = [(os.path.join(task, e["image"]), os.path.join(task, e["label"]))
                          for e in json.load(f)["training"]]
        self.cache = cache

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import numpy as np
        import torch
        image, label = self.cache[i] if self.cache is not None else prefix(*self.items[i])
        rng = np.random.default_rng((torch.initial_seed() + i) % 2**32)
        return rand_crop(image, label, rng)


def list_data_collate(batch):
    """MONAI's: the items' lists flattened, then default_collate."""
    import torch
    return torch.utils.data.default_collate([d for item in batch for d in item])


# ---------------------------------------------------------------------------

def side(a):
    """One side, one round, in this process: prints a JSON line."""
    import torch
    global PATCH
    PATCH = a.patch
    task = a.root
    _, base_pss, base_pinned = tree(os.getpid())  # the trainer's own: Python, torch
    t0 = time.monotonic()
    if a.side == "stoker":
        sys.path.insert(0, os.path.join(a.build, "python"))
        import shutil
        import stoker
        from stoker import volume as V
        keys = ["image", "label"]
        compose = V.Compose([
            V.LoadImaged(keys=keys), V.EnsureChannelFirstd(keys=keys),
            V.Orientationd(keys=keys, axcodes="RAS"),
            V.Spacingd(keys=keys, pixdim=PIXDIM, mode=("bilinear", "nearest")),
            V.ScaleIntensityRanged(keys=["image"], a_min=A_MIN, a_max=A_MAX, b_min=0.0,
                                   b_max=1.0, clip=True),
            V.CropForegroundd(keys=keys, source_key="image"),
            V.RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=(PATCH,) * 3,
                                     pos=1, neg=1, num_samples=SAMPLES, image_key="image",
                                     image_threshold=0)])
        cache = os.path.join(a.data, "stoker-volume-cache")
        shutil.rmtree(cache, ignore_errors=True)
        os.environ["STOKER_PREPARED_CACHE"] = cache  # the private daemon reads STOKER_<FLAG>
        # The same prefetch depth as DataLoader's (num_workers x
        # prefetch_factor = 4 batches): a ring of 4 slots, not deepened.
        loader = stoker.Loader(os.path.join(task, "dataset.json"), transform=compose,
                               batch_size=2, num_workers=2, seed=0,
                               data_root=os.path.dirname(task),
                               **({"ring_slots": a.ring_slots} if a.ring_slots else {}))
    else:
        cache = None
        if a.side == "ram_cached":  # CacheDataset(cache_rate=1.0, num_workers=2)
            from concurrent.futures import ThreadPoolExecutor
            ds = Spleen(task)
            with ThreadPoolExecutor(2) as pool:
                cache = list(pool.map(lambda it: prefix(*it), ds.items))
        loader = torch.utils.data.DataLoader(
            Spleen(task, cache), batch_size=2, shuffle=True, num_workers=2,
            persistent_workers=True, collate_fn=list_data_collate)
    n = 0
    for batch in loader:  # the first epoch
        n += 1
    first = time.monotonic() - t0
    t1, c1 = time.monotonic(), tree(os.getpid())[0]
    volumes = 0
    for e in range(a.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(e + 1)
        for batch in loader:
            volumes += batch["image"].shape[0] // SAMPLES
            assert tuple(batch["image"].shape[1:]) == (1, PATCH, PATCH, PATCH)
    wall, cpu = time.monotonic() - t1, tree(os.getpid())[0] - c1
    _, pss, pinned = tree(os.getpid())
    if hasattr(loader, "close"):
        loader.close()
    print(json.dumps(dict(first_s=first, volumes=volumes, seconds=wall, cpu=cpu, pss_mb=pss,
                          loader_pss_mb=pss - base_pss, loader_pinned_mb=pinned - base_pinned)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--volumes", type=int, default=8)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", default="/tmp/stoker-volume-bench")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--patch", type=int, default=0, help="the patch side (default 96; --quick 48)")
    ap.add_argument("--ring-slots", type=int, default=4,
                    help="stoker's ring (its prefetch depth; default 4, DataLoader's 2 workers x "
                    "prefetch_factor 2); 0: the daemon's adaptive depth")
    ap.add_argument("--side")
    ap.add_argument("--root")
    a = ap.parse_args()
    a.patch = a.patch or (48 if a.quick else PATCH)
    if a.side:
        return side(a)
    cpu_model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                      if line.startswith("model name")), "?")
    data = a.data + ("-quick" if a.quick else "")
    task = make_set(data, 4 if a.quick else a.volumes, a.quick)
    runs = {s: [] for s in SIDES}
    rounds = 1 if a.quick else a.rounds
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
        for s in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--side", s, "--root", task,
                   "--build", a.build, "--data", data, "--patch", str(a.patch),
                   "--ring-slots", str(a.ring_slots),
                   "--epochs", str(1 if a.quick else a.epochs)]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[s].append(json.loads(line.strip().splitlines()[-1]))
            print(s, runs[s][-1], flush=True)
    row = dict(volumes=len(json.load(open(os.path.join(task, "dataset.json")))["training"]))
    for s in SIDES:
        row[s] = dict(
            first_epoch_s=statistics.median(x["first_s"] for x in runs[s]),
            volumes_per_s=statistics.median(x["volumes"] / x["seconds"] for x in runs[s]),
            cpu_s_per_volume=statistics.median(x["cpu"] / x["volumes"] for x in runs[s]),
            pss_mb=statistics.median(x["pss_mb"] for x in runs[s]),
            loader_pss_mb=statistics.median(x["loader_pss_mb"] for x in runs[s]),
            loader_pinned_mb=statistics.median(x["loader_pinned_mb"] for x in runs[s]))
    for s in ("uncached", "ram_cached"):
        row[f"speedup_vs_{s}"] = row["stoker"]["volumes_per_s"] / row[s]["volumes_per_s"]
        row[f"memory_vs_{s}"] = row["stoker"]["pss_mb"] / row[s]["pss_mb"]
        row[f"loader_memory_vs_{s}"] = row["stoker"]["loader_pss_mb"] / row[s]["loader_pss_mb"]
        row[f"loader_pinned_vs_{s}"] = (row["stoker"]["loader_pinned_mb"]
                                        / row[s]["loader_pinned_mb"])
    with open(os.path.join(a.out, "volumes.json"), "w") as f:
        json.dump(dict(cpu=cpu_model, rounds=rounds, row=row), f, indent=1)
    print(f"CPU: {cpu_model}; {row['volumes']} volumes, medians of {rounds} round(s)")
    for s in SIDES:
        x = row[s]
        print(f"{s:>11}: first epoch {x['first_epoch_s']:6.1f} s; then {x['volumes_per_s']:6.2f} "
              f"volumes/s, {x['cpu_s_per_volume']:.3f} CPU s/volume; PSS {x['pss_mb']:.0f} MiB, "
              f"the loader's {x['loader_pss_mb']:.0f} (pinned {x['loader_pinned_mb']:.0f})")
    print(f"stoker vs uncached: {row['speedup_vs_uncached']:.1f}x; vs RAM-cached: "
          f"{row['speedup_vs_ram_cached']:.1f}x; memory vs RAM-cached: "
          f"{row['memory_vs_ram_cached']:.2f} of the whole tree's, "
          f"{row['loader_memory_vs_ram_cached']:.2f} of the loader's, "
          f"{row['loader_pinned_vs_ram_cached']:.2f} of the loader's pinned")


if __name__ == "__main__":
    main()
