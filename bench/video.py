#!/usr/bin/python3
"""Video clips through a loader: stoker.Loader against torchvision's
Kinetics + RandomClipSampler + DataLoader, 2 workers each, on the same
files, clips and transforms (the video reference's train preset).

    /usr/bin/python3 bench/video.py [--quick] [--rounds N] [--epochs N]
        [--build build] [--data /tmp/stoker-video-bench] [--out bench]
        [--profile SET]

Sets: bench/video_kernel.py's (made once with Debian's ffmpeg in --data,
a camera panning over fine texture with sensor noise): Kinetics-sized
(340x256, 30000/1001) H.264 with b-pyramid and 250-frame GOPs, VP9, MJPEG,
and 1080p H.264; each laid out as Kinetics' root/train/<class>/ (hard
links). Clips: Kinetics(frames_per_clip=16, step_between_clips=1,
frame_rate=15), RandomClipSampler(5), batch 8; the reference's train preset
(ConvertImageDtype, Resize((128, 171)), RandomHorizontalFlip, Normalize,
RandomCrop(112), CTHW).
Each side runs in its own process per round: one epoch to warm up (stoker:
the daemon indexes the videos; torchvision: its workers start), then
--epochs timed epochs: clips/s (wall) and CPU seconds per clip of the whole
process tree (the trainer process, DataLoader's persistent workers, or the
private stokerd and its workers), read from /proc. torchvision's metadata
pass (VideoClips' timestamps, when Kinetics is built) is left out, as is
stoker's index (its cache keeps it). stoker's side also reports its
workers' peak resident memory after the first timed epoch and at the end.
Medians over --rounds rounds, the sides alternated, the CPU named. Nothing
here asserts a timing.

--profile SET (needs Debian's linux-perf) runs instead each side once on
SET under `perf record`, sampling the timed epochs only, and splits each
side's CPU per clip by where it goes (libavcodec, libswscale, the pixel
ops, Python, libc and the kernel): VIDEO.md's "Why not 4x".
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import video_kernel  # noqa: E402  (the sets)
from proc_tree import tree  # noqa: E402

EXTENSIONS = ("mp4", "avi", "webm")


def kinetics_layout(files, root):
    """root/train/c<k % 2>/<file>: hard links to the set's files."""
    for k, f in enumerate(files):
        d = os.path.join(root, "train", f"c{k % 2}")
        os.makedirs(d, exist_ok=True)
        dst = os.path.join(d, os.path.basename(f))
        if not os.path.exists(dst):
            os.link(f, dst)
    return root


def tree_cpu(pid):
    """CPU seconds (user + system) of `pid` and every process below it."""
    return tree(pid)[0]


def worker_peaks():
    """Peak resident MiB (VmHWM) of each stoker-worker process."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if open(f"/proc/{p}/comm").read().strip() != "stoker-worker":
                continue
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmHWM:"):
                    out.append(int(line.split()[1]) / 1024)
        except OSError:
            pass
    return out


class ConvertBCHWtoCBHW:
    """The video reference's (references/video_classification/transforms.py)."""

    def __call__(self, vid):
        return vid.permute(1, 0, 2, 3)


def collate(batch):
    """The video reference's collate_fn: the audio dropped."""
    import torch
    return torch.utils.data.default_collate([(d[0], d[2]) for d in batch])


def perf_control(args, command):
    """Under --profile: turns perf's sampling on or off (its control fifo),
    waiting for its acknowledgement."""
    if not args.perf_ctl:
        return
    with open(args.perf_ctl + ".ctl", "w") as ctl:
        ctl.write(command + "\n")
    with open(args.perf_ctl + ".ack") as ack:
        ack.readline()


#: Where a side's CPU goes, by the shared object perf samples land in (first
#: match wins; stoker's own code is its worker binary, torch's its libraries).
CATEGORIES = (
    ("video decode (libavcodec)", ("libavcodec", "libdav1d", "libvpx")),
    ("demux (libavformat)", ("libavformat",)),
    ("YUV to RGB (libswscale)", ("libswscale",)),
    ("resize, flip, crop, normalize", ("stoker-worker", "libtorch", "libgomp", "libsleef",
                                       "libc10", "libblas", "libopenblas")),
    ("Python (interpreter, numpy, PyAV glue)", ("python3", "libpython", "_multiarray",
                                                "av/", ".cpython-")),
    ("memory and system (libc, kernel)", ("libc.so", "libc-", "[kernel", "ld-linux",
                                          "libstdc++", "libm.so")),
)


def profile(a, name, root):
    """--profile: each side once under perf (sampling its whole process tree
    during the timed epochs only) and its CPU per clip split by where it
    goes: prints a table and returns it."""
    import tempfile
    cut = {}
    for s in ("torchvision", "stoker"):
        tmp = tempfile.mkdtemp(prefix="stoker-video-perf-")
        fifo = os.path.join(tmp, "perf")
        os.mkfifo(fifo + ".ctl")
        os.mkfifo(fifo + ".ack")
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-F", "499", "-D", "-1", "--control",
               f"fifo:{fifo}.ctl,{fifo}.ack", "-o", data, "--", sys.executable,
               os.path.abspath(__file__), "--side", s, "--root", root, "--build", a.build,
               "--epochs", str(a.epochs), "--perf-ctl", fifo]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        run = json.loads(line.strip().splitlines()[-1])
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso",
                                 "--stdio", "-F", "overhead,dso"], check=True,
                                capture_output=True, text=True).stdout
        shares = {c: 0.0 for c, _ in CATEGORIES}
        shares["other"] = 0.0
        for row in report.splitlines():
            m = re.match(r"\s*([0-9.]+)%\s+(\S.*)$", row)
            if not m:
                continue
            dso = m.group(2).strip()
            cat = next((c for c, keys in CATEGORIES if any(k in dso for k in keys)), "other")
            shares[cat] += float(m.group(1)) / 100
        per_clip = 1000 * run["cpu"] / run["clips"]
        cut[s] = {c: per_clip * v for c, v in shares.items()}
        cut[s]["total"] = per_clip
    print(f"{name}: CPU ms per clip by where it goes (perf, timed epochs only)")
    for c in list(cut["torchvision"]):
        print(f"  {c:>40}: torchvision {cut['torchvision'][c]:7.1f}  stoker {cut['stoker'][c]:7.1f}")
    return cut


def side(args):
    """One side, one round, in this process: prints a JSON line."""
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import Kinetics
    from torchvision.datasets.samplers import RandomClipSampler

    preset = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize((128, 171), antialias=False),
                        T.RandomHorizontalFlip(), T.Normalize(video_kernel.MEAN, video_kernel.STD),
                        T.RandomCrop((112, 112)), ConvertBCHWtoCBHW()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = Kinetics(args.root, 16, split="train", frame_rate=15, step_between_clips=1,
                      transform=preset, extensions=EXTENSIONS, output_format="TCHW",
                      num_workers=0)
    torch.manual_seed(0)
    sampler = RandomClipSampler(ds.video_clips, 5)
    if args.side == "torchvision":
        # spawn: PyAV's decoder threads (the metadata pass ran here) do not
        # survive a fork; forked workers crash.
        loader = torch.utils.data.DataLoader(
            ds, batch_size=8, sampler=sampler, num_workers=2, persistent_workers=True,
            collate_fn=collate, multiprocessing_context="spawn")
    else:
        sys.path.insert(0, os.path.join(args.build, "python"))
        import stoker
        loader = stoker.Loader(ds, batch_size=8, sampler=sampler, num_workers=2, seed=0)
    seen = 0
    for clips, _ in loader:  # warm-up epoch
        seen += clips.shape[0]
    perf_control(args, "enable")
    t0, c0 = time.monotonic(), tree_cpu(os.getpid())
    clips_n, peaks_first = 0, None
    for e in range(args.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(e + 1)
        for clips, _ in loader:
            clips_n += clips.shape[0]
        if e == 0 and args.side == "stoker":
            peaks_first = worker_peaks()
    wall, cpu = time.monotonic() - t0, tree_cpu(os.getpid()) - c0
    perf_control(args, "disable")
    out = dict(clips=clips_n, seconds=wall, cpu=cpu)
    if args.side == "stoker":
        out.update(peak_mb_first=max(peaks_first or [0]), peak_mb_end=max(worker_peaks() or [0]))
        loader.close()
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", default="/tmp/stoker-video-bench")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--side")
    ap.add_argument("--root")
    ap.add_argument("--perf-ctl")
    ap.add_argument("--profile", metavar="SET",
                    help="only: each side once under perf on SET (kinetics_h264, ...): where "
                    "the CPU per clip goes; written to <out>/video_profile.json")
    a = ap.parse_args()
    if a.side:
        sys.modules.setdefault("video_bench", sys.modules[__name__])
        return side(a)
    cpu_model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                      if line.startswith("model name")), "?")
    sets = video_kernel.make_sets(a.data, a.quick)
    if a.profile:
        root = kinetics_layout(sets[a.profile], os.path.join(a.data, "kinetics", a.profile))
        cut = profile(a, a.profile, root)
        with open(os.path.join(a.out, "video_profile.json"), "w") as f:
            json.dump(dict(cpu=cpu_model, set=a.profile, ms_per_clip=cut), f, indent=1)
        return
    rows = []
    for name, files in sets.items():
        root = kinetics_layout(files, os.path.join(a.data, "kinetics", name))
        runs = {"stoker": [], "torchvision": []}
        for r in range(1 if a.quick else a.rounds):
            order = ["stoker", "torchvision"] if r % 2 == 0 else ["torchvision", "stoker"]
            for s in order:
                cmd = [sys.executable, os.path.abspath(__file__), "--side", s, "--root", root,
                       "--build", a.build, "--epochs", str(1 if a.quick else a.epochs)]
                line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                runs[s].append(json.loads(line.strip().splitlines()[-1]))

        def med(s, key):
            return statistics.median(run[key] for run in runs[s])

        row = dict(set=name, videos=len(files))
        for s in runs:
            row[f"{s}_clips_per_s"] = statistics.median(x["clips"] / x["seconds"] for x in runs[s])
            row[f"{s}_cpu_ms_per_clip"] = statistics.median(
                1000 * x["cpu"] / x["clips"] for x in runs[s])
        row["clips_per_s_ratio"] = row["stoker_clips_per_s"] / row["torchvision_clips_per_s"]
        row["cpu_per_clip_ratio"] = (row["torchvision_cpu_ms_per_clip"]
                                     / row["stoker_cpu_ms_per_clip"])
        row["stoker_worker_peak_mb"] = [med("stoker", "peak_mb_first"),
                                        med("stoker", "peak_mb_end")]
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(a.out, "video.json"), "w") as f:
        json.dump(dict(cpu=cpu_model, rows=rows), f, indent=1)
    print(f"CPU: {cpu_model}")
    for row in rows:
        print(f"{row['set']:>15}: stoker {row['stoker_clips_per_s']:7.1f} clips/s, torchvision "
              f"{row['torchvision_clips_per_s']:7.1f} ({row['clips_per_s_ratio']:.2f}x); CPU per "
              f"clip {row['stoker_cpu_ms_per_clip']:.1f} vs {row['torchvision_cpu_ms_per_clip']:.1f}"
              f" ms ({row['cpu_per_clip_ratio']:.2f}x less); stoker worker peak "
              f"{row['stoker_worker_peak_mb'][0]:.0f} -> {row['stoker_worker_peak_mb'][1]:.0f} MB")


if __name__ == "__main__":
    main()
