"""Video clips against torchvision: the index, the clip lists, the samplers
and the decoded frames, on videos that look real (video_corpus.py: H.264
with B-frames and long GOPs, open-GOP HEVC, VP8, VP9, AV1, MPEG-4 in AVI,
MJPEG; odd frame rates; an audio stream first).

The reference is torchvision 0.14 with PyAV (Debian's python3-torchvision
and python3-av): read_video_timestamps, VideoClips, UniformClipSampler and
VideoClips.get_clip (read_video). stoker's side is stoker-video-tool, which
runs the daemon's own code (server/video/): probe, clips, decode.
"""

import json
import subprocess
import warnings

import numpy as np
import pytest

from video_corpus import write_videos

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")
from torchvision.datasets.samplers import RandomClipSampler, UniformClipSampler  # noqa: E402
from torchvision.datasets.video_utils import VideoClips  # noqa: E402
from torchvision.io import read_video, read_video_timestamps  # noqa: E402

# (frames_per_clip, step_between_clips, frame_rate): the reference's
# defaults (16 frames, 1 apart), Kinetics training (16 at 15 fps), and a
# rate above most of these videos' (frames repeat).
CLIP_PARAMS = [(16, 1, None), (16, 5, 15), (8, 6, 60)]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return write_videos(tmp_path_factory.mktemp("videos"))


def _clips_json(video_tool, paths, frames, step, rate, *extra):
    args = [video_tool, "clips", "--frames-per-clip", str(frames), "--step", str(step),
            "--frame-rate", str(rate or 0), *extra, *map(str, paths)]
    return json.loads(subprocess.check_output(args))


def _video_clips(paths, frames, step, rate):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's progress bar, short videos
        return VideoClips([str(p) for p in paths], frames, step, rate, num_workers=0)


def test_index_is_read_video_timestamps(videos, video_tool):
    """Every frame's pts and the fps, as torchvision lists them, without a
    frame decoded (torchvision decodes every frame of the files whose
    extradata does not name Lavc)."""
    for name, path in videos:
        pts, fps = read_video_timestamps(str(path))
        got = json.loads(subprocess.check_output([video_tool, "probe", str(path)]))
        assert got["warning"] == "", name
        assert got["pts"] == pts, name
        assert got["fps"] == fps, name
        assert len(got["keyframes"]) >= 1 and got["keyframes"][0] == pts[0], name


@pytest.mark.parametrize("frames,step,rate", CLIP_PARAMS)
def test_clip_lists_are_videoclips(videos, video_tool, frames, step, rate):
    paths = [p for _, p in videos]
    reference = _video_clips(paths, frames, step, rate)
    got = _clips_json(video_tool, paths, frames, step, rate)
    for v, (name, _) in enumerate(videos):
        assert got["videos"][v] == reference.clips[v].tolist(), name
    assert sum(len(c) for c in got["videos"]) == reference.num_clips()


@pytest.mark.parametrize("frames,step,rate", CLIP_PARAMS[1:])
def test_clips_are_read_videos_frames(videos, video_tool, tmp_path, frames, step, rate):
    """The first, a middle and the last clip of every video: the same
    frames, byte for byte, as VideoClips.get_clip (read_video, PyAV's
    to_rgb): the seek to a keyframe, the decode forward, the pick by
    timestamp, the resampling and the YUV->RGB conversion all agree."""
    paths = [p for _, p in videos]
    reference = _video_clips(paths, frames, step, rate)
    out = tmp_path / "clip.raw"
    for v, (name, path) in enumerate(videos):
        n = len(reference.clips[v])
        first = reference.cumulative_sizes[v] - n
        for clip in sorted({0, n // 2, n - 1}):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # read_video's "pts_unit 'pts'" (it is exact here)
                want, _, _, video_idx = reference.get_clip(first + clip)
            assert video_idx == v
            line = subprocess.check_output(
                [video_tool, "decode", str(path), "--clip", str(clip), "--frames-per-clip", str(frames),
                 "--step", str(step), "--frame-rate", str(rate or 0), "--out", str(out)])
            info = json.loads(line)
            got = np.fromfile(out, np.uint8).reshape(info["frames"], info["height"],
                                                     info["width"], 3)
            assert got.shape == tuple(want.shape), (name, clip)
            diff = np.argwhere(got != want.numpy())
            assert diff.size == 0, f"{name} clip {clip}: first difference at {diff[0]}"


def test_uniform_clip_sampler_is_torchvisions(videos, video_tool):
    paths = [p for _, p in videos]
    reference = _video_clips(paths, 16, 1, None)
    for k in (1, 5, 10):
        got = _clips_json(video_tool, paths, 16, 1, None, "--sampler", "uniform",
                          "--clips-per-video", str(k))
        assert got["order"] == list(UniformClipSampler(reference, k)), k


def test_random_clip_sampler_draws_as_torchvisions(videos, video_tool):
    """torch's random stream is not reproduced (stoker draws from its seed,
    the same for any worker count): the shape of the draw is torchvision's:
    min(clips, k) distinct clips of each video, all shuffled together."""
    paths = [p for _, p in videos]
    reference = _video_clips(paths, 16, 5, 15)
    k = 3
    got = _clips_json(video_tool, paths, 16, 5, 15, "--sampler", "random", "--clips-per-video", str(k),
                      "--seed", "7", "--epoch", "2")["order"]
    assert len(got) == len(RandomClipSampler(reference, k))
    assert len(set(got)) == len(got)
    for v in range(len(paths)):
        first = reference.cumulative_sizes[v] - len(reference.clips[v])
        mine = [c for c in got if first <= c < reference.cumulative_sizes[v]]
        assert len(mine) == min(len(reference.clips[v]), k)
    again = _clips_json(video_tool, paths, 16, 5, 15, "--sampler", "random", "--clips-per-video",
                        str(k), "--seed", "7", "--epoch", "2")["order"]
    assert again == got
    other = _clips_json(video_tool, paths, 16, 5, 15, "--sampler", "random", "--clips-per-video",
                        str(k), "--seed", "7", "--epoch", "3")["order"]
    assert other != got


def test_theora_without_a_stated_rate_decodes_as_pyav(tmp_path, video_tool):
    """Ogg states no average rate: torchvision's read_video_timestamps fails
    on such a file (float(None)); stoker takes the stream's base rate and
    its frames are still PyAV's."""
    from video_corpus import encode, _texture
    path = tmp_path / "theora.ogv"
    encode(path, ["-c:v", "libtheora", "-q:v", "7", "-g", "30"], "25", (320, 240), 3,
           _texture("photo", tmp_path, 320, 240))
    info = json.loads(subprocess.check_output([video_tool, "probe", str(path)]))
    assert info["fps"] == 25.0 and len(info["pts"]) == 75
    with av.open(str(path)) as container:
        frames = {f.pts: f.to_rgb().to_ndarray() for f in container.decode(video=0)}
    pts = info["pts"][40:48]
    out = tmp_path / "clip.raw"
    subprocess.check_output([video_tool, "decode", str(path), "--pts", ",".join(map(str, pts)),
                             "--out", str(out)])
    got = np.fromfile(out, np.uint8).reshape(8, 240, 320, 3)
    for k, p in enumerate(pts):
        assert np.array_equal(got[k], frames[p]), p


KINETICS_MEAN = (0.43216, 0.394666, 0.37645)
KINETICS_STD = (0.22803, 0.22145, 0.216989)


def _preset(train, flip, top=0, left=0):
    """torchvision's VideoClassificationPresetTrain / Eval (the video
    reference's presets.py, written out: it is not an installed module) with
    RandomCrop's draw and the flip forced."""
    import torchvision.transforms as T

    class ForcedCrop(T.RandomCrop):
        @staticmethod
        def get_params(img, output_size):
            return top, left, output_size[0], output_size[1]

    steps = [T.ConvertImageDtype(torch.float32), T.Resize((128, 171), antialias=False)]
    if train:
        steps += [T.RandomHorizontalFlip(1.0 if flip else 0.0), T.Normalize(KINETICS_MEAN, KINETICS_STD),
                  ForcedCrop((112, 112))]
    else:
        steps += [T.Normalize(KINETICS_MEAN, KINETICS_STD), T.CenterCrop((112, 112))]
    compose = T.Compose(steps)
    return lambda x: compose(x).permute(1, 0, 2, 3)  # ConvertBCHWtoCBHW


@pytest.mark.parametrize("train,flip,top,left", [(True, False, 0, 0), (True, True, 7, 30),
                                                 (True, True, 16, 59), (False, False, 0, 0)])
def test_video_presets_match_torchvision(videos, video_tool, tmp_path, train, flip, top, left):
    """The reference's train and eval presets on decoded clips (TCHW uint8 in,
    CTHW float32 out) with the same draw: within one float32 ulp of torch's
    upsample_bilinear2d (clip_ops.h says why not always bit for bit), most
    values equal."""
    out = tmp_path / "clip.f32"
    for name, path in videos[:4]:
        info = json.loads(subprocess.check_output([video_tool, "probe", str(path)]))
        pts = info["pts"][20:36]
        frames, _, _ = read_video(str(path), pts[0], pts[-1])
        assert frames.shape[0] == 16, name
        want = _preset(train, flip, top, left)(frames.permute(0, 3, 1, 2)).contiguous().numpy()
        args = [video_tool, "decode", str(path), "--pts", ",".join(map(str, pts)), "--resize", "128,171",
                "--crop", "112,112", "--out", str(out)]
        if train:
            args += ["--crop-at", f"{top},{left}"] + (["--flip"] if flip else [])
        subprocess.check_output(args)
        got = np.fromfile(out, np.float32).reshape(want.shape)
        diff = np.abs(got - want)
        # One ulp (1.2e-7) of a resized value below 1, a few ulps of its
        # normalized value (magnitudes up to ~2.7).
        assert diff.max() <= 8e-7, (name, float(diff.max()))
        assert (diff == 0).mean() > 0.55, name


def test_video_resize_is_within_one_ulp_of_torch(videos, video_tool, tmp_path):
    """Before Normalize: ConvertImageDtype + Resize((128, 171),
    antialias=False) within 1.2e-7 (one float32 ulp below 1) of torch's."""
    import torchvision.transforms as T
    out = tmp_path / "clip.f32"
    for name, path in videos:
        info = json.loads(subprocess.check_output([video_tool, "probe", str(path)]))
        pts = info["pts"][:8]
        frames, _, _ = read_video(str(path), pts[0], pts[-1])
        x = T.Resize((128, 171), antialias=False)(
            T.ConvertImageDtype(torch.float32)(frames.permute(0, 3, 1, 2)))
        subprocess.check_output([video_tool, "decode", str(path), "--pts", ",".join(map(str, pts)),
                                 "--resize", "128,171", "--no-normalize", "--layout", "TCHW",
                                 "--out", str(out)])
        got = np.fromfile(out, np.float32).reshape(x.shape)
        assert np.abs(got - x.numpy()).max() <= 1.2e-7, name


def test_clips_in_order_through_one_decoder_are_read_videos_frames(videos, video_tool, tmp_path):
    """A video's clips in ascending order through one decoder: a clip that
    starts after the last one ended goes on from there without a seek when
    that is closer than its keyframe (clip_decoder.h); its frames are still
    get_clip's, byte for byte, on every codec."""
    frames, step, rate = 8, 3, None
    paths = [p for _, p in videos]
    reference = _video_clips(paths, frames, step, rate)
    out = tmp_path / "clips.raw"
    went_on = 0
    for v, (name, path) in enumerate(videos):
        n = len(reference.clips[v])
        first = reference.cumulative_sizes[v] - n
        clips = sorted({0, 3, 6, n // 2, n // 2 + 3, n - 4, n - 1} & set(range(n)))
        line = json.loads(subprocess.check_output(
            [video_tool, "decode", str(path), "--clip", ",".join(map(str, clips)), "--frames-per-clip",
             str(frames), "--step", str(step), "--out", str(out)]))
        got = np.fromfile(out, np.uint8).reshape(len(clips), frames, line["height"],
                                                 line["width"], 3)
        went_on += line["seeks"].count(0)
        for k, clip in enumerate(clips):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = reference.get_clip(first + clip)[0].numpy()
            assert np.array_equal(got[k], want), (name, clip, line["seeks"])
    assert went_on > 0  # the long-GOP videos' later clips went on without a seek


def test_slice_threads_do_not_change_a_frame(videos, video_tool, tmp_path):
    """Decoding with slice threads (the only threading stoker uses inside a
    worker) gives the same bytes as one thread: on the corpus, and on two
    videos coded so that slice threads have work (H.264 in 4 slices a frame,
    VP9 in 2 tile columns)."""
    from video_corpus import encode, _texture
    sliced = tmp_path / "sliced.mp4"
    encode(sliced, ["-c:v", "libx264", "-x264-params", "slices=4", "-bf", "2", "-g", "30",
                    "-pix_fmt", "yuv420p"], "25", (640, 360), 2, _texture("fur", tmp_path, 640, 360))
    tiled = tmp_path / "tiled.webm"
    encode(tiled, ["-c:v", "libvpx-vp9", "-tile-columns", "1", "-g", "30", "-deadline", "realtime",
                   "-cpu-used", "8", "-b:v", "1M"], "25", (640, 360), 2,
           _texture("fur", tmp_path, 640, 360))
    for name, path in list(videos) + [("sliced", sliced), ("tiled", tiled)]:
        outs = []
        for threads in (1, 3):
            out = tmp_path / f"t{threads}.raw"
            subprocess.check_output([video_tool, "decode", str(path), "--clip", "0,1", "--frames-per-clip",
                                     "8", "--step", "20", "--threads", str(threads), "--out",
                                     str(out)])
            outs.append(out.read_bytes())
        assert outs[0] == outs[1], name


def test_uint8_clips_are_within_half_a_level_of_torchvision(videos, video_tool, tmp_path):
    """For Normalize on the device: the resized clip as uint8 (nearest of
    value * 255) is within 0.5 / 255 (and torch's one ulp) of
    ConvertImageDtype + Resize((128, 171), antialias=False), so the
    device's Normalize lands within 0.5 / 255 / std of the float path."""
    import torchvision.transforms as T
    out = tmp_path / "clip.u8"
    for name, path in videos[:3]:
        info = json.loads(subprocess.check_output([video_tool, "probe", str(path)]))
        pts = info["pts"][:8]
        frames, _, _ = read_video(str(path), pts[0], pts[-1])
        x = T.Resize((128, 171), antialias=False)(
            T.ConvertImageDtype(torch.float32)(frames.permute(0, 3, 1, 2))).numpy()
        subprocess.check_output([video_tool, "decode", str(path), "--pts", ",".join(map(str, pts)),
                                 "--resize", "128,171", "--uint8", "--layout", "TCHW",
                                 "--out", str(out)])
        got = np.fromfile(out, np.uint8).reshape(x.shape)
        assert np.abs(got / np.float32(255) - x).max() <= 0.5 / 255 + 2e-7, name
