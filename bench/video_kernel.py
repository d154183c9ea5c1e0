#!/usr/bin/python3
"""Video clips, one process and one thread each: stoker's clip decode and
preset (server/video/, through stoker-video-tool) against torchvision's
VideoClips.get_clip and its video reference's train preset, on the same
clips of the same files.

    /usr/bin/python3 bench/video_kernel.py [--quick] [--rounds N] [--clips N]
        [--build build] [--data /tmp/stoker-video-bench] [--out bench]

This is the per-clip cost before any loader: the daemon does not serve
video yet (issue 36), so DataLoader's side (workers, collation) and
stoker's (the ring) are not in it. bench/video.py will measure those.

Sets (made once in --data with Debian's ffmpeg, a camera panning across
fine texture with sensor noise: tests/python/video_corpus.py):
  * kinetics_h264: 340x256 like Kinetics, 10 s at 30000/1001, H.264 with
    b-pyramid (3 B-frames) and a keyframe every 250 frames, as x264's
    defaults code YouTube-style uploads;
  * kinetics_vp9: the same size and length in VP9 (keyframe every 150);
  * kinetics_mjpeg: 340x256, 5 s of MJPEG (every frame a keyframe);
  * hd_h264: 1920x1080, 5 s at 30, H.264 as above.
Clips: 16 frames at 15 fps (frames_per_clip=16, step_between_clips=1,
frame_rate=15), the first --clips clips RandomClipSampler(clips, 5) draws
(torch seed 0). torchvision: get_clip, then ConvertImageDtype, Resize((128,
171), antialias=False), RandomHorizontalFlip, Normalize, RandomCrop(112)
and the CTHW permute, process CPU time. stoker: stoker-video-tool decode of
each video's clips, in the drawn order, with the same transforms, the time
of its decode-and-transform loop (one thread: its CPU on an idle core). Both
sides leave out the video's index (VideoClips' timestamps, made when it is
built; stoker's Probe, kept by the daemon's index cache) and their process's
start (a worker lives for the run).
Medians over --rounds rounds, each side's order alternated. Also the peak
and the growth of resident memory of one decoder through every clip of a
1080p video (sweep). Nothing here asserts a timing.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import video_corpus  # noqa: E402

SETS = {
    "kinetics_h264": (["-c:v", "libx264", "-bf", "3", "-g", "250", "-crf", "23",
                       "-pix_fmt", "yuv420p"], "30000/1001", (340, 256), 10, 6),
    "kinetics_vp9": (["-c:v", "libvpx-vp9", "-g", "150", "-deadline", "realtime", "-cpu-used",
                      "8", "-b:v", "800k"], "30000/1001", (340, 256), 10, 4),
    "kinetics_mjpeg": (["-c:v", "mjpeg", "-q:v", "4"], "30000/1001", (340, 256), 5, 3),
    "hd_h264": (["-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", "250", "-crf", "23",
                 "-pix_fmt", "yuv420p"], "30", (1920, 1080), 5, 2),
}
TEXTURES = ["fur", "text", "fabric", "photo"]
MEAN = (0.43216, 0.394666, 0.37645)
STD = (0.22803, 0.22145, 0.216989)


def make_sets(data, quick):
    out = {}
    for name, (args, rate, size, seconds, count) in SETS.items():
        folder = os.path.join(data, name)
        os.makedirs(folder, exist_ok=True)
        files = []
        for k in range(1 if quick else count):
            ext = ".webm" if "vp9" in name else ".avi" if "mjpeg" in name else ".mp4"
            path = os.path.join(folder, f"v{k}{ext}")
            if not os.path.exists(path):
                tex = video_corpus._texture(TEXTURES[k % len(TEXTURES)], pathlib.Path(folder),
                                            *size)
                video_corpus.encode(path + ".tmp" + ext, args, rate, size, seconds, tex)
                os.replace(path + ".tmp" + ext, path)
            files.append(path)
        out[name] = files
    return out


def drawn_clips(files, n):
    import torch
    from torchvision.datasets.samplers import RandomClipSampler
    from torchvision.datasets.video_utils import VideoClips
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vc = VideoClips(files, 16, 1, 15, num_workers=0, output_format="TCHW")
    torch.manual_seed(0)
    return vc, list(RandomClipSampler(vc, 5))[:n]


def run_torchvision(vc, clips):
    import torch
    import torchvision.transforms as T
    preset = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize((128, 171), antialias=False),
                        T.RandomHorizontalFlip(), T.Normalize(MEAN, STD), T.RandomCrop((112, 112))])
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in clips:
            preset(vc.get_clip(i)[0]).permute(1, 0, 2, 3).contiguous()
    return (time.process_time() - start) / len(clips)


def run_stoker(tool, vc, clips):
    by_video = {}
    for i in clips:
        v, c = vc.get_clip_location(i)
        by_video.setdefault(v, []).append(c)
    seconds = 0.0
    for v, cs in by_video.items():
        line = subprocess.run([tool, "decode", vc.video_paths[v], "--clip", ",".join(map(str, cs)),
                               "--frames-per-clip", "16", "--step", "1", "--frame-rate", "15",
                               "--resize", "128,171", "--crop", "112,112", "--flip"],
                              check=True, capture_output=True, text=True).stdout
        seconds += json.loads(line)["seconds"]
    return seconds / len(clips)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--clips", type=int, default=30)
    p.add_argument("--build", default="build")
    p.add_argument("--data", default="/tmp/stoker-video-bench")
    p.add_argument("--out", default=os.path.join(HERE))
    a = p.parse_args()
    if a.quick:
        a.rounds, a.clips = 1, 6
    import torch
    torch.set_num_threads(1)
    tool = os.path.join(a.build, "bin", "stoker-video-tool")
    sets = make_sets(a.data, a.quick)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    rows = []
    for name, files in sets.items():
        vc, clips = drawn_clips(files, a.clips)
        tv, st = [], []
        for r in range(a.rounds):
            for side in (("tv", "st") if r % 2 == 0 else ("st", "tv")):
                if side == "tv":
                    tv.append(run_torchvision(vc, clips))
                else:
                    st.append(run_stoker(tool, vc, clips))
        row = dict(set=name, clips=len(clips), torchvision_ms=1e3 * statistics.median(tv),
                   stoker_ms=1e3 * statistics.median(st),
                   ratio=statistics.median(tv) / statistics.median(st), rounds=a.rounds)
        rows.append(row)
        print(json.dumps(row), flush=True)
    sweep = json.loads(subprocess.check_output(
        [tool, "sweep", sets["hd_h264"][0], "--frames-per-clip", "16", "--step", "1",
         "--frame-rate", "15", "--resize", "128,171", "--crop", "112,112", "--seed", "1"]))
    print(json.dumps(dict(sweep=sweep)), flush=True)
    os.makedirs(os.path.join(a.out, "out"), exist_ok=True)
    with open(os.path.join(a.out, "out", "video_kernel.json"), "w") as f:
        json.dump(dict(cpu=cpu, rows=rows, sweep=sweep), f, indent=1)
    lines = ["# Video clips, one process and one thread each: stoker vs torchvision", "",
             f"CPU: {cpu}. `/usr/bin/python3 bench/video_kernel.py --build {a.build} "
             f"--rounds {a.rounds} --clips {a.clips}` (see its header: the per-clip cost of the "
             "decode and the train preset, before any loader; the daemon does not serve video "
             "yet).", "",
             "| set | clips | torchvision ms/clip | stoker ms/clip | ratio |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['clips']} | {r['torchvision_ms']:.1f} | "
                     f"{r['stoker_ms']:.1f} | {r['ratio']:.2f}x |")
    rss = sweep["rss_kb"]
    lines += ["", f"One decoder through all {sweep['clips']} clips of a 1080p H.264 video "
              f"(shuffled): resident memory {rss[0][1] / 1024:.0f} MB after the first clip, "
              f"{rss[-1][1] / 1024:.0f} MB after the last ({sweep['failed']} failed).", ""]
    if not a.quick:
        with open(os.path.join(a.out, "VIDEO_KERNEL.md"), "w") as f:
            f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
