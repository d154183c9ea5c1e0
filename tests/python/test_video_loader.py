"""Video clips through the daemon: stoker.Loader over a Kinetics-layout
folder of videos that look real (video_corpus.py) against torchvision's
Kinetics / VideoClips + DataLoader on the same files and transforms.

The daemon indexes the videos in its sandboxed workers, cuts the clips as
VideoClips does and decodes and transforms them in its workers into the
ring; the Loader yields (clips, labels) as the video reference's collate_fn
gives them.
"""

import json
import os
import shutil
import warnings

import numpy as np
import pytest

from video_corpus import write_videos

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")
from torchvision import transforms as T  # noqa: E402
from torchvision.datasets import Kinetics  # noqa: E402
from torchvision.datasets.samplers import RandomClipSampler, UniformClipSampler  # noqa: E402

EXTENSIONS = ("mp4", "avi", "webm", "mkv")
MEAN = (0.43216, 0.394666, 0.37645)
STD = (0.22803, 0.22145, 0.216989)


class ConvertBCHWtoCBHW(torch.nn.Module):
    """The video reference's (references/video_classification/transforms.py)."""

    def forward(self, vid):
        return vid.permute(1, 0, 2, 3)


def eval_preset(layout_cthw=False):
    steps = [T.ConvertImageDtype(torch.float32), T.Resize((128, 171), antialias=False),
             T.Normalize(mean=MEAN, std=STD), T.CenterCrop((112, 112))]
    if layout_cthw:
        steps.append(ConvertBCHWtoCBHW())
    return T.Compose(steps)


@pytest.fixture(scope="module")
def kinetics_root(tmp_path_factory):
    """root/train/<class>/<video>: the corpus' videos in two classes."""
    corpus = write_videos(tmp_path_factory.mktemp("corpus"))
    root = tmp_path_factory.mktemp("kinetics")
    for k, (name, path) in enumerate(corpus):
        ext = path.suffix.lstrip(".")
        if ext not in EXTENSIONS:
            continue
        cls = root / "train" / ("abseiling" if k % 2 == 0 else "bowling")
        cls.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, cls / f"{name}.{ext}")
    return root


def kinetics(root, frames, step, transform, rate=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Kinetics(str(root), frames, split="train", step_between_clips=step,
                        frame_rate=rate, transform=transform, extensions=EXTENSIONS,
                        output_format="TCHW", num_workers=0)


def test_every_clip_equals_torchvision_kinetics(stoker, kinetics_root, daemon_factory):
    """Loader(Kinetics(...)): every clip of every video, in clip order, within
    torch's own float32 ulp of Kinetics[i] through the same eval preset
    (CTHW), and the labels are the class folders'."""
    d = daemon_factory(workers=2, data_root=str(kinetics_root))
    ds = kinetics(kinetics_root, 8, 12, eval_preset(layout_cthw=True))
    n = ds.video_clips.num_clips()
    assert n > 20
    got_clips, got_labels = [], []
    with stoker.Loader(ds, socket=d.socket, batch_size=4, shuffle=False, epochs=1,
                       copy=True) as loader:
        for clips, labels in loader:
            assert clips.shape[1:] == (3, 8, 112, 112) and clips.dtype == torch.float32
            got_clips += list(clips)
            got_labels += labels.tolist()
        assert loader.class_names == ds.classes
    assert len(got_clips) == n
    worst = 0.0
    for i in range(n):
        want, _, label = ds[i]
        assert got_labels[i] == label, i
        worst = max(worst, float((got_clips[i] - want).abs().max()))
    # torch's bilinear kernel orders its sums its own way: one float32 ulp
    # of a resized value, scaled by 1/std (test_video_fidelity's bound).
    assert worst <= 8e-7, worst


def test_keywords_random_clip_sampler_exactly_once_and_worker_count(stoker, kinetics_root,
                                                                     daemon_factory):
    """Loader(path, frames_per_clip=..., sampler=RandomClipSampler(...)): each
    epoch min(clips, k) distinct clips of each video, as many as torchvision's
    sampler yields; the same batches for one seed whatever the worker count;
    another epoch another draw."""
    ds = kinetics(kinetics_root, 16, 4, None)
    sampler = RandomClipSampler(ds.video_clips, 3)
    per_video = [min(len(c), 3) for c in ds.video_clips.clips]
    train = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize((128, 171), antialias=False),
                       T.RandomHorizontalFlip(), T.Normalize(mean=MEAN, std=STD),
                       T.RandomCrop((112, 112))])

    def run(workers):
        d = daemon_factory(workers=workers, data_root=str(kinetics_root))
        out = []
        with stoker.Loader(str(kinetics_root / "train"), frames_per_clip=16, step_between_clips=4,
                           transform=train, extensions=EXTENSIONS, sampler=sampler,
                           socket=d.socket, batch_size=5, seed=11, epochs=2) as loader:
            assert len(loader) == -(-sum(per_video) // 5)
            for epoch in range(2):
                loader.set_epoch(epoch)
                clips_seen = []
                for clips, labels in loader:
                    assert clips.shape[1:] == (16, 3, 112, 112)
                    clips_seen += loader.last_indices.tolist()
                    out.append((clips.clone(), labels.clone()))
                assert len(clips_seen) == sum(per_video) == len(sampler)
                assert len(set(clips_seen)) == len(clips_seen)  # no clip twice
                video_of = np.searchsorted(ds.video_clips.cumulative_sizes, clips_seen,
                                           side="right")
                counts = np.bincount(video_of, minlength=len(per_video))
                assert counts.tolist() == per_video
        return out

    one, three = run(1), run(3)
    assert len(one) == len(three)
    for (a, la), (b, lb) in zip(one, three):
        assert torch.equal(la, lb)
        assert torch.equal(a, b)
    half = len(one) // 2
    assert any(not torch.equal(a[0], b[0]) for (a, _), (b, _) in zip(one[:half], one[half:]))


def test_uniform_sampler_and_uint8_clips(stoker, kinetics_root, daemon_factory):
    """UniformClipSampler's clips in its order, uint8 (no Normalize: for the
    device), within half a level of torchvision's float path x 255."""
    d = daemon_factory(workers=2, data_root=str(kinetics_root))
    tr = T.Compose([T.Resize((64, 86), antialias=False), T.CenterCrop((56, 56))])
    ds = kinetics(kinetics_root, 8, 8, None)
    sampler = UniformClipSampler(ds.video_clips, 2)
    order = list(iter(sampler))
    got, idx = [], []
    with stoker.Loader(ds, transform=tr, sampler=sampler, socket=d.socket, batch_size=3,
                       epochs=1, copy=True) as loader:
        for clips, _ in loader:
            assert clips.dtype == torch.uint8 and clips.shape[1:] == (8, 3, 56, 56)
            got += list(clips)
            idx += loader.last_indices.tolist()
    assert idx == order
    ref = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize((64, 86), antialias=False),
                     T.CenterCrop((56, 56))])
    for clip, i in zip(got[:12], order[:12]):
        want = ref(ds.video_clips.get_clip(i)[0]) * 255
        assert float((clip.float() - want).abs().max()) <= 0.5 + 1e-3, i


def test_float_clips_for_the_device_come_uint8_and_are_normalized_there(stoker, kinetics_root,
                                                                       daemon_factory):
    """device='cuda' with a float preset: the daemon serves the clips uint8
    (a quarter of the bytes through the ring and PCIe) and the loader's
    normalize_clips makes them float on the device. Its arithmetic is
    ConvertImageDtype + Normalize's own (equal on the served uint8), and the
    result is within the daemon's uint8 rounding (0.5 / 255 / std) of the
    daemon's float clips and of torchvision's, in TCHW and CTHW. (The device
    copy itself needs a GPU: scripts/gpu-check.sh.)"""
    from stoker.loader._video import normalize_clips
    d = daemon_factory(workers=2, data_root=str(kinetics_root))
    ds = kinetics(kinetics_root, 8, 12, None)
    bound = 0.5 / 255 / min(STD) + 1e-6
    for cthw in (False, True):
        layout = "CTHW" if cthw else "TCHW"
        float_tr = eval_preset(layout_cthw=cthw)
        planned = stoker.Loader(ds, transform=float_tr, socket=d.socket, batch_size=4)
        planned._mode = "cuda"  # what a CUDA loader asks the daemon for
        request = json.loads(planned._daemon_request())
        assert request["dtype"] == "uint8" and "mean" not in request and "std" not in request
        steps = [T.Resize((128, 171), antialias=False), T.CenterCrop((112, 112))]
        uint8_tr = T.Compose(steps + ([ConvertBCHWtoCBHW()] if cthw else []))
        kw = dict(socket=d.socket, batch_size=4, shuffle=False, epochs=1, copy=True)
        with stoker.Loader(ds, transform=float_tr, **kw) as f_loader, \
                stoker.Loader(ds, transform=uint8_tr, **kw) as u_loader:
            n = 0
            for (f, _), (u, _) in zip(f_loader, u_loader):
                assert u.dtype == torch.uint8 and f.dtype == torch.float32
                got = normalize_clips(u, list(MEAN), list(STD), layout)
                assert got.dtype == torch.float32 and got.shape == f.shape
                assert float((got - f).abs().max()) <= bound
                for k in range(u.shape[0]):
                    tchw = u[k].permute(1, 0, 2, 3) if cthw else u[k]
                    ref = T.Normalize(MEAN, STD)(T.ConvertImageDtype(torch.float32)(tchw))
                    assert torch.equal(got[k], ref.permute(1, 0, 2, 3) if cthw else ref)
                    want = ds.video_clips.get_clip(n)[0]
                    want = float_tr(want)
                    assert float((got[k] - want).abs().max()) <= bound + 8e-7, n
                    n += 1
            assert n == ds.video_clips.num_clips()
    # Without Normalize: ConvertImageDtype alone is x / 255.
    u = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 16, 16).expand(2, 4, 3, 16, 16)
    assert torch.equal(normalize_clips(u, [], [], "TCHW"),
                       T.ConvertImageDtype(torch.float32)(u.contiguous()))


def test_bad_videos_cost_their_clips_not_the_dataset(stoker, kinetics_root, daemon_factory,
                                                     tmp_path):
    """A truncated video, a text file named .mp4 and an audio-only file beside
    good ones: indexed as what can be decoded (the text and audio files give
    no clip, the truncated one its frames before the cut), the daemon lives,
    every clip served is whole."""
    root = tmp_path / "bad" / "train"
    shutil.copytree(kinetics_root / "train", root)
    good = sorted((root / "abseiling").iterdir())[0]
    data = good.read_bytes()
    (root / "abseiling" / "truncated.mp4").write_bytes(data[: len(data) * 2 // 3])
    (root / "bowling" / "notes.mp4").write_bytes(b"this is not a video\n" * 100)
    audio = root / "bowling" / "audio_only.mp4"
    container = av.open(str(audio), "w")
    stream = container.add_stream("aac", rate=16000)
    for _ in range(20):
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp",
                                           layout="mono")
        frame.rate = 16000
        for p in stream.encode(frame):
            container.mux(p)
    for p in stream.encode():
        container.mux(p)
    container.close()
    d = daemon_factory(workers=2, data_root=str(tmp_path / "bad"))
    n = 0
    with stoker.Loader(str(root), frames_per_clip=8, step_between_clips=8, transform=eval_preset(),
                       extensions=EXTENSIONS, socket=d.socket, batch_size=4, epochs=1) as loader:
        batches = len(loader)
        for clips, _ in loader:
            assert torch.isfinite(clips).all()
            n += 1
        status = stoker.Client(d.socket).status()["sessions"][0]
    assert n == batches > 0
    assert int(status.get("samples_failed", 0)) == 0
    log = open(d.log_path, errors="replace").read()
    assert "notes.mp4: no clip (DATA_LOSS" in log
    assert "audio_only.mp4: no clip (FAILED_PRECONDITION" in log
    assert "truncated.mp4" in log  # no clip, or its frames before the cut
    d.stop()


def test_refusals_name_the_fix(stoker, kinetics_root, daemon_factory):
    d = daemon_factory(workers=1, data_root=str(kinetics_root))
    with pytest.raises(stoker.InvalidRequestError, match="ColorJitter"):
        stoker.Loader(str(kinetics_root / "train"), frames_per_clip=8,
                      transform=T.Compose([T.ConvertImageDtype(torch.float32),
                                           T.ColorJitter(0.4), T.CenterCrop(112)]),
                      socket=d.socket, batch_size=2)
    with pytest.raises(stoker.InvalidRequestError, match="need one size"):
        with stoker.Loader(str(kinetics_root / "train"), frames_per_clip=8,
                           transform=T.Compose([T.RandomHorizontalFlip()]),
                           extensions=EXTENSIONS, socket=d.socket, batch_size=2) as loader:
            next(iter(loader))
    with pytest.raises(stoker.InvalidRequestError, match="frames_per_clip must be 1..256"):
        with stoker.Loader(str(kinetics_root / "train"), frames_per_clip=300,
                           transform=eval_preset(), extensions=EXTENSIONS, socket=d.socket,
                           batch_size=2) as loader:
            next(iter(loader))
    assert os.path.exists(d.socket)


def test_resume_mid_epoch_and_a_manifest_of_videos(stoker, kinetics_root, daemon_factory):
    """load_state_dict after 3 batches: the rest of the epoch as an
    uninterrupted run serves it (RandomClipSampler's draw and each clip's
    crop and flip alike). A manifest listing the videos gives VideoClips'
    clips of that list."""
    d = daemon_factory(workers=2, data_root=str(kinetics_root))
    ds = kinetics(kinetics_root, 8, 4, None)
    train = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize((64, 86), antialias=False),
                       T.RandomHorizontalFlip(), T.RandomCrop((56, 56))])

    def loader():
        return stoker.Loader(ds, transform=train, sampler=RandomClipSampler(ds.video_clips, 4),
                             socket=d.socket, batch_size=4, seed=3, copy=True)

    with loader() as ld:
        ld.set_epoch(1)
        whole = [(c, loader_idx) for c, loader_idx in
                 ((clips, ld.last_indices.copy()) for clips, _ in ld)]
    with loader() as ld:
        ld.set_epoch(1)
        it = iter(ld)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
    with loader() as ld:
        ld.load_state_dict(state)
        rest = [(clips, ld.last_indices.copy()) for clips, _ in ld]
    assert len(rest) == len(whole) - 3
    for (a, ia), (b, ib) in zip(whole[3:], rest):
        assert ia.tolist() == ib.tolist()
        assert torch.equal(a, b)

    manifest = kinetics_root / "videos.tsv"
    videos = [p for p, _ in ds.samples]
    manifest.write_text("".join(f"{os.path.relpath(p, kinetics_root)}\t{k % 3}\n"
                                for k, p in enumerate(videos)))
    with stoker.Loader(str(manifest), frames_per_clip=8, step_between_clips=4,
                       transform=eval_preset(), socket=d.socket, batch_size=5, shuffle=False,
                       epochs=1) as ld:
        labels = [int(v) for _, lb in ld for v in lb]
    assert len(labels) == ds.video_clips.num_clips()
    video_of = np.searchsorted(ds.video_clips.cumulative_sizes, range(len(labels)), side="right")
    assert labels == [int(v) % 3 for v in video_of]


def test_workers_killed_mid_batch_lose_and_repeat_no_clip(stoker, kinetics_root, daemon_factory):
    """Workers SIGKILLed while they decode clips are replaced and their clips
    redone: the epoch is the uninterrupted run's, clip for clip."""
    import signal
    ds = kinetics(kinetics_root, 8, 4, None)

    def run(kill):
        d = daemon_factory(workers=2, data_root=str(kinetics_root))
        client = stoker.Client(d.socket)
        out, killed = [], 0
        with stoker.Loader(ds, transform=eval_preset(), socket=d.socket, batch_size=4, seed=9,
                           epochs=1, copy=True, ring_slots=2) as ld:
            for k, (clips, labels) in enumerate(ld):
                out.append((clips, ld.last_indices.tolist()))
                if kill and k % 3 == 0:
                    live = [int(w["pid"]) for w in client.status()["workers"]
                            if int(w.get("pid", 0))]
                    if live:
                        os.kill(live[k % len(live)], signal.SIGKILL)
                        killed += 1
        return out, killed

    calm, _ = run(False)
    stormy, killed = run(True)
    assert killed >= 3
    assert [i for _, i in calm] == [i for _, i in stormy]
    for (a, _), (b, _) in zip(calm, stormy):
        assert torch.equal(a, b)


def test_webdataset_shards_with_video_members(stoker, kinetics_root, daemon_factory, tmp_path):
    """Videos as WebDataset members (mp4/avi/webm keys, .cls labels): the
    clips are VideoClips' over the same files, in shard order, each equal to
    the one read from the file itself."""
    import tarfile
    ds = kinetics(kinetics_root, 8, 8, None)
    videos = [p for p, _ in ds.samples if not p.endswith(".mkv")]
    data = tmp_path / "wds"
    data.mkdir()
    for s in range(2):
        with tarfile.open(data / f"videos-{s}.tar", "w") as tar:
            for k, path in enumerate(videos[s::2]):
                key = f"s{s}k{k:03d}"
                tar.add(path, arcname=f"{key}.{path.rsplit('.', 1)[1]}")
                label = tmp_path / "label.cls"
                label.write_text(str(10 * s + k))
                tar.add(label, arcname=f"{key}.cls")
    order = videos[0::2] + videos[1::2]
    d = daemon_factory(workers=2, data_root=str(data))
    got, labels = [], []
    with stoker.Loader(str(data / "videos-{0..1}.tar"), frames_per_clip=8, step_between_clips=8,
                       transform=eval_preset(), socket=d.socket, batch_size=4, shuffle=False,
                       epochs=1, copy=True) as ld:
        for clips, lb in ld:
            got += list(clips)
            labels += lb.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchvision.datasets.video_utils import VideoClips
        vc = VideoClips(order, 8, 8, num_workers=0, output_format="TCHW")
    assert len(got) == vc.num_clips()
    preset = eval_preset()
    for i in range(0, len(got), 5):
        want = preset(vc.get_clip(i)[0])
        assert float((got[i] - want).abs().max()) <= 8e-7, i
    video_of = np.searchsorted(vc.cumulative_sizes, range(len(got)), side="right")
    want_labels = [10 * (v >= len(videos[0::2])) + (v if v < len(videos[0::2])
                                                   else v - len(videos[0::2])) for v in video_of]
    assert labels == want_labels
