"""Videos that look like real ones, made with Debian's ffmpeg: a camera
panning across fine texture (fur, print, a photo) with sensor noise, coded
the way phones, cameras and web sites code them.

    write_videos(folder) -> [(name, path)]   every video of VIDEOS, written once

What makes real video hard, and is here: B-frames (H.264 with b-pyramid,
MPEG-4 in AVI), long GOPs (a keyframe every 250 frames, past the end of
these clips), open GOPs (x265's default), odd frame rates (30000/1001,
24000/1001, 25), a variable frame rate (a phone's dropped frames), an
audio stream before the video one, full-range JPEG
frames (MJPEG), and the web codecs (VP8, VP9, AV1 through dav1d). Each
entry: (name, file name, ffmpeg output arguments, frame rate, size,
seconds, texture).  Sizes stay small so that the tests that decode every
clip with PyAV run in seconds; bench/video.py makes the Kinetics-sized
and 1080p sets.
"""

import os
import pathlib
import subprocess

import numpy as np

import textured_corpus

VIDEOS = [
    ("h264_phone", "h264_phone.mp4",
     ["-c:v", "libx264", "-profile:v", "high", "-bf", "3", "-b_strategy", "2", "-g", "250",
      "-crf", "23", "-pix_fmt", "yuv420p"], "30000/1001", (340, 256), 5, "fur"),
    ("h264_camera", "h264_camera.mp4",
     ["-c:v", "libx264", "-bf", "2", "-g", "30", "-crf", "20", "-pix_fmt", "yuv420p",
      "-c:a", "aac", "-b:a", "64k"], "25", (320, 240), 4, "photo"),
    ("hevc_open_gop", "hevc.mp4",
     ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=48:open-gop=1", "-tag:v", "hvc1",
      "-pix_fmt", "yuv420p"], "24000/1001", (320, 240), 4, "fabric"),
    ("vp9", "vp9.webm",
     ["-c:v", "libvpx-vp9", "-g", "60", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "600k"],
     "30", (320, 240), 4, "text"),
    ("vp8", "vp8.webm",
     ["-c:v", "libvpx", "-g", "45", "-deadline", "realtime", "-b:v", "600k"], "30", (320, 240), 3,
     "fur"),
    ("av1", "av1.mkv", ["-c:v", "libsvtav1", "-g", "64", "-preset", "12", "-svtav1-params",
                        "lp=1"], "24", (320, 240), 3, "photo"),
    ("mpeg4_avi", "mpeg4.avi", ["-c:v", "mpeg4", "-bf", "2", "-q:v", "4", "-g", "36"],
     "30000/1001", (320, 240), 3, "fabric"),
    ("h264_vfr", "h264_vfr.mp4",
     ["-c:v", "libx264", "-bf", "3", "-g", "250", "-crf", "23", "-pix_fmt", "yuv420p"], "30",
     (320, 240), 4, "fur"),
    ("mjpeg_avi", "mjpeg.avi", ["-c:v", "mjpeg", "-q:v", "4", "-pix_fmt", "yuvj422p"], "15",
     (320, 240), 3, "text"),
]
# The audio track of h264_camera comes first in the file (stream 0), the
# video second: torchvision reads streams.video[0], and so does stoker.
_AUDIO_FIRST = {"h264_camera"}
# A phone's variable frame rate: frames dropped at irregular places (every
# 5th from the 3rd, every 11th from the 5th) and the rest kept at their
# times, so the gaps between timestamps vary and the average rate (87/4)
# is no rate the camera ran at.
_VFR = {"h264_vfr"}


def _texture(kind, folder, width, height):
    """A still 3x the frame's size to pan across, as a PNG (lossless source)."""
    path = folder / f".{kind}-{width}x{height}.png"
    if not path.exists():
        img = textured_corpus._MAKERS[kind](3 * width, 3 * height, np.random.default_rng(17))
        tmp = folder / f".{kind}.{os.getpid()}.png"
        img.save(tmp)
        os.replace(tmp, path)
    return path


def encode(path, args, rate, size, seconds, texture_png, audio_first=False, vfr=False):
    """Pans a `size` window across the texture (diagonally, with a slow
    zoom-like drift) at `rate` for `seconds`, adds temporal noise, and codes
    it with `args` into `path` (with `vfr`, dropping frames as _VFR says)."""
    width, height = size
    pan = (f"crop={width}:{height}:x='mod(t*{width // 3},{2 * width})':"
           f"y='{height}+{height // 2}*sin(t)',noise=alls=10:allf=t+u,format=yuv420p")
    if vfr:
        pan += r",select='not(eq(mod(n\,5)\,2))*not(eq(mod(n\,11)\,4))'"
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-loop", "1", "-framerate", rate,
           "-i", str(texture_png)]
    if audio_first or "-c:a" in args:
        cmd += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"]
    cmd += ["-t", str(seconds), "-vf", pan] + (["-fps_mode", "vfr"] if vfr else ["-r", rate])
    if audio_first:
        cmd += ["-map", "1:a", "-map", "0:v"]
    elif "-c:a" in args:
        cmd += ["-map", "0:v", "-map", "1:a"]
    cmd += list(args) + [str(path)]
    # SVT-AV1 prints its configuration unless told to keep to errors.
    subprocess.run(cmd, check=True, env=dict(os.environ, SVT_LOG="1"))


def write_videos(folder):
    """Writes every video of VIDEOS into `folder` (kept if already there)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, file_name, args, rate, size, seconds, texture in VIDEOS:
        path = folder / file_name
        if not path.exists():
            tmp = folder / f".{os.getpid()}.{file_name}"
            encode(tmp, args, rate, size, seconds, _texture(texture, folder, *size),
                   audio_first=name in _AUDIO_FIRST, vfr=name in _VFR)
            os.replace(tmp, path)
        out.append((name, path))
    return out
