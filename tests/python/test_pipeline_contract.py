"""The pipeline contract end to end (issue 14): one request, every front end.

Against one real daemon:
  * the same request through Loader(transform=Compose), Loader(keywords),
    Loader(ops=[...]), `stokerctl consume` and `stoker-attach-probe` (the C++
    AttachOptions) reaches the daemon as the same spec: its Status shows
    identical `requested_pipeline` and identical `pipeline` (effective) for
    every front end, for a train, an eval and an op-list case with new ops;
  * Loader(ops=...) written by hand and Loader(transform=...) deliver the
    same batches, of the right shape, for each new op;
  * with their random parameters forced, the ops give torchvision's pixels
    (PIL backend) on the decoded image: exactly for crops, flips, padding,
    grayscale, brightness, contrast and saturation (exact_decode=True),
    within a mean absolute error for the resampling Resize;
  * bad requests are refused by name: an unknown op, a bad parameter, ops=
    with transform=, a refused transform, sizes that vary with batch_size > 1.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
from PIL import Image

from conftest import photo_like, write_jpeg

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
TF = pytest.importorskip("torchvision.transforms.functional")

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
H, W = 40, 52  # every image of the "fixed" set: forced crops are then deterministic
FIXED_N = 6


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    top = str(tmp_path_factory.mktemp("contract"))
    rng = np.random.default_rng(14)
    for k in range(2):  # "set": varied sizes, for the front ends
        d = os.path.join(top, "set", f"class_{k}")
        os.makedirs(d)
        for i in range(4):
            h, w = int(rng.integers(60, 120)), int(rng.integers(60, 120))
            write_jpeg(os.path.join(d, f"img_{i}.jpg"), photo_like(rng, h, w))
    d = os.path.join(top, "fixed", "class_0")  # "fixed": H x W, for pixel checks
    os.makedirs(d)
    for i in range(FIXED_N):
        write_jpeg(os.path.join(d, f"img_{i}.jpg"), photo_like(rng, H, W),
                   subsampling="444" if i % 2 else "420", quality=92)
    return top


@pytest.fixture(scope="module")
def served(module_daemon_factory, root):
    return module_daemon_factory(workers=2, data_root=root)


def probe_binary(daemon) -> str:
    return os.path.join(daemon.build_dir, "bin", "stoker-attach-probe")


# ---------------------------------------------------------------------------
# 1. One request through every front end


def session_status(daemon, **match) -> Optional[Dict[str, Any]]:
    """The daemon's status of the one session whose fields equal `match`."""
    import stoker
    found = [s for s in stoker.Client(daemon.socket).status()["sessions"]
             if all(s.get(k) == v for k, v in match.items())]
    assert len(found) <= 1, found
    return found[0] if found else None


def specs(session: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    return session["requested_pipeline"], session["pipeline"]


def via_loader(stoker, daemon, **kw) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    with stoker.Loader("set", socket=daemon.socket, batch_size=2, **kw) as ld:
        ld.attach()
        s = session_status(daemon, session_id=ld.info["session_id"])
        assert s is not None
        return specs(s)


def held_by(daemon, cmd: List[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The specs of the session that the process `cmd` holds: once attached
    it prints {"session_id", "effective_pipeline"} as one line, and detaches
    when its stdin closes."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            proc.stdin.close()
            pytest.fail(f"{cmd} printed nothing, exit {proc.wait(30)}:\n{proc.stderr.read()}")
        said = json.loads(line)
        s = session_status(daemon, session_id=said["session_id"])
        assert s is not None, said
        assert s["client_pid"] == proc.pid
        return specs(s)
    finally:
        proc.stdin.close()  # it detaches and exits
        assert proc.wait(30) == 0, proc.stderr.read()


#: The pipeline keywords that `stokerctl consume` has flags for.
CTL_KEYWORDS = ("pipeline", "ops", "size", "dtype", "layout", "exact_decode",
                "apply_exif_orientation")


def ctl_flags(keywords: Dict[str, Any]) -> List[str]:
    """`stokerctl consume` flags for pipeline keywords."""
    out: List[str] = []
    for k, v in keywords.items():
        flag = "--" + k.replace("_", "-")
        if k == "ops":
            out += [flag, json.dumps(v)]
        elif isinstance(v, bool):
            out += [flag] if v else []
        elif isinstance(v, (list, tuple)):
            out += [flag, *[str(x) for x in v]]
        else:
            out += [flag, str(v)]
    return out


def via_stokerctl(daemon, keywords: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    return held_by(daemon, [daemon.stokerctl, "consume", "--socket", daemon.socket,
                            "--dataset", "set", "--batch-size", "2", "--hold",
                            *ctl_flags(keywords)])


def via_probe(daemon, keywords: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    return held_by(daemon, [probe_binary(daemon), "--socket", daemon.socket, "--dataset", "set",
                            "--batch-size", "2", "--pipeline-json", json.dumps(keywords)])


ALL_FRONT_ENDS = ["Loader(transform=)", "Loader(ops=)", "stokerctl consume",
                  "stoker-attach-probe"]
PRESET_FRONT_ENDS = ["Loader(keywords)", "stokerctl consume", "stoker-attach-probe"]

#: (case, the pipeline keywords or a torchvision recipe, the front ends that
#: can say it). A recipe is read into ops (Loader(transform=)); then
#: Loader(ops=), stokerctl and the probe are given the same keywords.
CASES = [
    ("train", [T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.PILToTensor()],
     ALL_FRONT_ENDS),
    ("train_preset", dict(pipeline="train", size=48, layout="nchw"), PRESET_FRONT_ENDS),
    # The eval preset's Resize is round(256 * 40 / 224) = 46.
    ("eval", [T.Resize(46), T.CenterCrop((40, 48)), T.PILToTensor()], ALL_FRONT_ENDS),
    ("eval_preset", dict(pipeline="eval", size=[40, 48], layout="nchw"), PRESET_FRONT_ENDS),
    ("new_ops", [T.RandomCrop(32, padding=4, fill=(10, 20, 30)), T.RandomVerticalFlip(0.3),
                 T.ColorJitter(0.4, (0.5, 1.5), 0.2, 0.1), T.RandomGrayscale(0.2),
                 T.GaussianBlur((3, 5), (0.2, 1.5)), T.Resize((36, 30)), T.CenterCrop(28),
                 T.PILToTensor()], ALL_FRONT_ENDS),
    # stokerctl has no flags for these keywords.
    ("float_ops", [T.RandomResizedCrop(40, scale=(0.3, 1)), T.RandomHorizontalFlip(0.3),
                   T.ToTensor(), T.Normalize(MEAN, (0.5,))],
     ["Loader(transform=)", "Loader(ops=)", "stoker-attach-probe"]),
    ("float_preset", dict(pipeline="train", size=40, scale=[0.3, 1.0], flip_prob=0.3,
                          dtype="float32", std=[0.5]),
     ["Loader(keywords)", "stoker-attach-probe"]),
]


@pytest.fixture(scope="module")
def through_every_front_end(stoker, served):
    """{case: {front end: (requested, effective)}}."""
    from stoker._transforms import loader_options
    got: Dict[str, Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]]] = {}
    for case, asked, front_ends in CASES:
        keywords = asked if isinstance(asked, dict) else loader_options(asked)
        run = {
            "Loader(transform=)": lambda: via_loader(stoker, served, transform=T.Compose(asked)),
            "Loader(ops=)": lambda: via_loader(stoker, served, **keywords),
            "Loader(keywords)": lambda: via_loader(stoker, served, **keywords),
            "stokerctl consume": lambda: via_stokerctl(served, keywords),
            "stoker-attach-probe": lambda: via_probe(served, keywords),
        }
        if "stokerctl consume" in front_ends:
            assert set(keywords) <= set(CTL_KEYWORDS), keywords
        got[case] = {name: run[name]() for name in front_ends}
    return got


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_every_front_end_sends_the_same_spec(through_every_front_end, case):
    ends = through_every_front_end[case]
    (first, (requested, effective)), *others = ends.items()
    assert others
    for name, (r, e) in others:
        assert r == requested, f"{name} and {first} sent different requests"
        assert e == effective, f"{name} and {first} were given different effective specs"
    # The daemon filled in the defaults, not the front ends.
    assert effective["output"]["dtype"] and len(effective["output"]["mean"]) == 3
    assert requested != effective


def test_the_request_holds_only_what_was_asked(through_every_front_end):
    req, eff = through_every_front_end["float_preset"]["Loader(keywords)"]
    assert req["preset"] == "train" and eff["preset"] == "train"
    assert req["output"]["dtype"] == "float32" and req["output"].get("mean", []) == []
    assert req["output"]["std"] == [0.5] and req["output"].get("layout", "") == ""
    assert eff["output"]["layout"] == "nchw"  # the daemon's default for floats
    assert eff["output"]["mean"] == pytest.approx(MEAN) and eff["output"]["std"] == [0.5] * 3
    assert [list(op) for op in eff["ops"]] == [["random_resized_crop"],
                                               ["random_horizontal_flip"]]
    rrc = eff["ops"][0]["random_resized_crop"]
    assert rrc["scale"] == pytest.approx([0.3, 1.0]) and rrc["size"] == [40, 40]
    assert eff["ops"][1]["random_horizontal_flip"]["p"] == pytest.approx(0.3)
    assert eff["size"] == [40, 40]
    req, eff = through_every_front_end["eval_preset"]["stokerctl consume"]
    assert req["preset"] == "eval" and req.get("ops", []) == [] and req["size"] == [40, 48]
    assert [list(op) for op in eff["ops"]] == [["resize"], ["center_crop"]]
    assert eff["ops"][0]["resize"]["size"] == [46] and eff["size"] == [40, 48]
    assert eff["output"]["dtype"] == "uint8"


@pytest.mark.parametrize("ops_case,preset_case,name", [("train", "train_preset", "train"),
                                                       ("eval", "eval_preset", "eval"),
                                                       ("float_ops", "float_preset", "train")])
def test_a_preset_and_its_op_list_are_the_same_pipeline(through_every_front_end, ops_case,
                                                        preset_case, name):
    _, ops = through_every_front_end[ops_case]["stoker-attach-probe"]
    _, preset = through_every_front_end[preset_case]["stoker-attach-probe"]
    assert ops["preset"] == "" and preset["preset"] == name
    assert dict(preset, preset="") == ops


def test_the_new_ops_reach_the_daemon_with_torchvisions_parameters(through_every_front_end):
    _, eff = through_every_front_end["new_ops"]["stoker-attach-probe"]
    names = [next(iter(op)) for op in eff["ops"]]
    assert names == ["random_crop", "random_vertical_flip", "color_jitter", "random_grayscale",
                     "gaussian_blur", "resize", "center_crop"]
    crop, flip, jitter, gray, blur = (next(iter(op.values())) for op in eff["ops"][:5])
    assert crop["size"] == [32, 32] and crop["padding"] == [4] * 4
    assert crop["fill"] == [10, 20, 30] and crop["padding_mode"] == "constant"
    assert flip["p"] == pytest.approx(0.3) and gray["p"] == pytest.approx(0.2)
    assert jitter["brightness"] == pytest.approx([0.6, 1.4])
    assert jitter["contrast"] == pytest.approx([0.5, 1.5])
    assert jitter["saturation"] == pytest.approx([0.8, 1.2])
    assert jitter["hue"] == pytest.approx([-0.1, 0.1])
    assert blur["kernel_size"] == [3, 5] and blur["sigma"] == pytest.approx([0.2, 1.5])
    assert eff["size"] == [28, 28] and eff["output"]["layout"] == "nchw"


# ---------------------------------------------------------------------------
# 2. Each new op from the real daemon: ops= by hand and transform= agree


#: (ops as a user writes them, the torchvision transform, the output [h, w]).
#: Resize(int) makes each image's own size (here all the same): batch 1.
NEW_OPS = [
    ([{"Resize": {"size": [36, 30]}}], T.Resize((36, 30)), (36, 30)),
    ([{"Resize": {"size": 30, "max_size": 34}}], T.Resize(30, max_size=34), (26, 34)),
    ([{"CenterCrop": {"size": [30, 36]}}], T.CenterCrop((30, 36)), (30, 36)),
    ([{"RandomCrop": {"size": 32, "padding": 4}}], T.RandomCrop(32, padding=4), (32, 32)),
    ([{"RandomCrop": {"size": [44, 60], "pad_if_needed": True, "padding_mode": "reflect"}}],
     T.RandomCrop((44, 60), pad_if_needed=True, padding_mode="reflect"), (44, 60)),
    ([{"RandomVerticalFlip": {}}], T.RandomVerticalFlip(), (H, W)),
    ([{"ColorJitter": {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}}],
     T.ColorJitter(0.4, 0.4, 0.4, 0.1), (H, W)),
    ([{"Grayscale": {"num_output_channels": 3}}], T.Grayscale(3), (H, W)),
    ([{"RandomGrayscale": {"p": 0.5}}], T.RandomGrayscale(0.5), (H, W)),
    ([{"GaussianBlur": {"kernel_size": [5, 3], "sigma": [0.1, 2.0]}}], T.GaussianBlur((5, 3)),
     (H, W)),
]


#: The ops that keep the image's size: alone, every sample has its own size,
#: so a batch needs size= (or a fixed-size op before them).
KEEPS_SIZE = {"RandomHorizontalFlip", "RandomVerticalFlip", "ColorJitter", "Grayscale",
              "RandomGrayscale", "GaussianBlur"}


def fixed_loader(stoker, served, **kw):
    kw.setdefault("shuffle", False)
    kw.setdefault("batch_size", 3)
    return stoker.Loader("fixed", socket=served.socket, epochs=1, seed=3, timeout_ms=30000,
                         **kw)


@pytest.mark.parametrize("ops,transform,hw", NEW_OPS, ids=[next(iter(o[0][0])) + str(i)
                                                           for i, o in enumerate(NEW_OPS)])
def test_ops_by_hand_and_the_transform_deliver_the_same_batches(stoker, served, ops, transform,
                                                                hw):
    batch = 1 if isinstance(transform, T.Resize) and isinstance(transform.size, int) else 3
    recipe = [transform, T.PILToTensor()]
    if type(transform).__name__ in KEEPS_SIZE:  # a crop to the images' size fixes it
        ops = [{"CenterCrop": {"size": [H, W]}}] + ops
        recipe = [T.CenterCrop((H, W))] + recipe
    with fixed_loader(stoker, served, ops=ops, dtype="uint8", layout="nchw",
                      batch_size=batch) as a, \
            fixed_loader(stoker, served, transform=T.Compose(recipe), batch_size=batch) as b:
        assert a.effective_pipeline == b.effective_pipeline
        n = 0
        for (xa, ya), (xb, yb) in zip(a, b):
            if batch == 1:  # each image its own size: a list of one
                (xa,), (xb,) = xa, xb
                xa, xb = xa[None], xb[None]
            assert xa.shape == (batch, 3, *hw) and xa.dtype == torch.uint8
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
            assert xa.float().std() > 1  # real pixels
            n += 1
        assert n == FIXED_N // batch


# ---------------------------------------------------------------------------
# 3. Forced parameters: torchvision's pixels


def pil_images(root: str) -> List[Image.Image]:
    d = os.path.join(root, "fixed", "class_0")
    return [Image.open(os.path.join(d, f)).convert("RGB") for f in sorted(os.listdir(d))]


def served_pixels(stoker, served, ops, **kw) -> List[np.ndarray]:
    """Each sample of "fixed" in order, uint8 HWC, through `ops`, exact decode."""
    out: List[np.ndarray] = []
    if all(next(iter(op)) in KEEPS_SIZE for op in ops):
        kw.setdefault("size", [H, W])  # every image is H x W
    with fixed_loader(stoker, served, ops=ops, dtype="uint8", layout="nhwc",
                      exact_decode=True, **kw) as ld:
        for b in ld.iter_batches():
            assert (b.statuses == 0).all()
            out += [np.array(x) for x in b.images.numpy()]
    assert len(out) == FIXED_N
    return out


#: Ops whose output is torchvision's exactly, their randomness forced.
EXACT = [
    ("center_crop", [{"CenterCrop": {"size": [30, 37]}}], T.CenterCrop((30, 37))),
    ("center_crop_pads", [{"CenterCrop": {"size": [44, 56]}}], T.CenterCrop((44, 56))),
    ("pad_constant", [{"RandomCrop": {"size": [H + 8, W + 8], "padding": [4],
                                      "fill": [10, 200, 30]}}],
     T.RandomCrop((H + 8, W + 8), padding=4, fill=(10, 200, 30))),
    *[(f"pad_{mode}", [{"RandomCrop": {"size": [H + 6, W + 4], "padding": [1, 2, 3, 4],
                                       "padding_mode": mode}}],
       T.RandomCrop((H + 6, W + 4), padding=(1, 2, 3, 4), padding_mode=mode))
      for mode in ("edge", "reflect", "symmetric")],
    ("hflip", [{"RandomHorizontalFlip": {"p": 1}}], T.RandomHorizontalFlip(1)),
    ("vflip", [{"RandomVerticalFlip": {"p": 1}}], T.RandomVerticalFlip(1)),
    ("no_vflip", [{"RandomVerticalFlip": {"p": 0}}], T.RandomVerticalFlip(0)),
    ("grayscale", [{"Grayscale": {"num_output_channels": 3}}], T.Grayscale(3)),
    ("random_grayscale", [{"RandomGrayscale": {"p": 1}}], T.RandomGrayscale(1)),
    *[(f"{factor}_{v}", [{"ColorJitter": {factor: [v, v]}}], T.ColorJitter(**{factor: (v, v)}))
      for factor in ("brightness", "contrast", "saturation") for v in (0.5, 1.25)],
]


@pytest.mark.parametrize("name,ops,transform", EXACT, ids=[e[0] for e in EXACT])
def test_forced_ops_give_torchvisions_pixels_exactly(stoker, served, root, name, ops, transform):
    got = served_pixels(stoker, served, ops)
    for i, (img, px) in enumerate(zip(pil_images(root), got)):
        want = np.asarray(transform(img))
        assert px.shape == want.shape, name
        diff = np.abs(px.astype(int) - want)
        assert diff.max() == 0, (f"{name}, image {i}: {np.count_nonzero(diff)} values differ, "
                                 f"max {diff.max()}")


def test_two_forced_jitters_run_in_one_of_torchvisions_orders(stoker, served, root):
    # Each sample draws its own order of the adjustments: it must be one of
    # the two that torchvision's randperm can give.
    ops = [{"ColorJitter": {"brightness": [1.25, 1.25], "contrast": [0.5, 0.5]}}]
    for img, px in zip(pil_images(root), served_pixels(stoker, served, ops)):
        bc = np.asarray(TF.adjust_contrast(TF.adjust_brightness(img, 1.25), 0.5))
        cb = np.asarray(TF.adjust_brightness(TF.adjust_contrast(img, 0.5), 1.25))
        assert not np.array_equal(bc, cb)
        assert np.array_equal(px, bc) or np.array_equal(px, cb)


def test_random_crop_is_a_window_of_torchvisions_padded_image(stoker, served, root):
    # pad_if_needed pads both sides of a short axis by the shortfall, then the
    # crop's offset is drawn: every sample is a window of that padded image.
    ops = [{"RandomCrop": {"size": [H + 6, W - 10], "padding": [2], "pad_if_needed": True,
                           "fill": [7], "padding_mode": "constant"}}]
    offsets = set()
    for img, px in zip(pil_images(root), served_pixels(stoker, served, ops)):
        padded = TF.pad(img, 2, fill=7)
        padded = np.asarray(TF.pad(padded, [0, (H + 6) - (H + 4)], fill=7))
        assert px.shape == (H + 6, W - 10, 3)
        hits = [(t, l) for t in range(padded.shape[0] - px.shape[0] + 1)
                for l in range(padded.shape[1] - px.shape[1] + 1)
                if np.array_equal(padded[t:t + px.shape[0], l:l + px.shape[1]], px)]
        assert hits, "not a window of the padded image"
        offsets.add(hits[0])
    assert len(offsets) > 1, "every sample was cropped at the same offset"


@pytest.mark.parametrize("ops,transform,size", [
    ([{"Resize": {"size": [36, 30]}}], T.Resize((36, 30)), None),
    # Each image its own size, all 26 x 34 here: size= says so, for batches.
    ([{"Resize": {"size": [30], "max_size": 34}}], T.Resize(30, max_size=34), [26, 34]),
    ([{"Resize": {"size": [64, 80]}}], T.Resize((64, 80)), None),  # upscaling
])
def test_resize_is_within_a_level_of_pil(stoker, served, root, ops, transform, size):
    kw = {} if size is None else dict(size=size)
    for img, px in zip(pil_images(root), served_pixels(stoker, served, ops, **kw)):
        want = np.asarray(transform(img))
        assert px.shape == want.shape
        assert np.abs(px.astype(int) - want).mean() <= 1.0


# ---------------------------------------------------------------------------
# 4. Bad requests are refused by name


@pytest.mark.parametrize("kw,match", [
    (dict(ops=[{"RandomFisheye": {"distortion_scale": 0.5}}]), "RandomFisheye"),
    (dict(ops=[{"ColorJitter": {"hue": [0.7]}}]), "ColorJitter.*hue"),
    (dict(ops=[{"RandomCrop": {"size": [32], "padding_mode": "wrap"}}]),
     "RandomCrop.*padding_mode"),
    (dict(ops=[{"GaussianBlur": {"kernel_size": [4]}}]), "GaussianBlur.*kernel_size"),
    (dict(ops=[{"CenterCrop": {}}]), "CenterCrop.*size"),
    (dict(ops=[{"RandomCrop": {"size": 32}}], scale=(0.5, 1)), "scale"),
    (dict(ops=[{"Resize": {"size": [32]}}]), "batch_size=1"),
    (dict(pipeline="decode"), "batch_size=1"),
    (dict(interpolation="antialias"), "interpolation"),
    (dict(dtype="int7"), "dtype"),
])
def test_bad_pipelines_are_refused_naming_what_is_wrong(stoker, served, kw, match):
    with pytest.raises(stoker.InvalidRequestError, match=f"(?s){match}"):
        stoker.Loader("set", socket=served.socket, batch_size=2, **kw)
    # The C++ client says the same, before any RPC (a native attach).
    if "ops" in kw and "batch" not in match:
        with pytest.raises(stoker.InvalidRequestError, match=f"(?s){match}"):
            stoker.Client(served.socket).attach("set", pipeline=kw, batch_size=2)


def test_ops_beside_a_transform_and_refused_transforms(stoker, served):
    with pytest.raises(stoker.InvalidRequestError, match="(?s)transform.*ops"):
        stoker.Loader("set", socket=served.socket, ops=[{"RandomHorizontalFlip": {}}],
                      transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
    with pytest.raises(stoker.InvalidRequestError, match="Lambda is not served"):
        stoker.Loader("set", socket=served.socket,
                      transform=T.Compose([T.Lambda(lambda x: x), T.CenterCrop(8), T.ToTensor()]))
    with pytest.raises(stoker.InvalidRequestError,
                       match="(?s)RandomResizedCrop.*CenterCrop.*batch_size=1"):
        stoker.Loader("set", socket=served.socket, batch_size=2,
                      transform=T.Compose([T.Resize(40), T.ToTensor()]))
    # Each image its own size is fine one at a time.
    with stoker.Loader("set", socket=served.socket, batch_size=1, epochs=1, shuffle=False,
                       transform=T.Compose([T.Resize(40), T.PILToTensor()])) as ld:
        (img,), _ = next(iter(ld))
        assert img.dtype == torch.uint8 and img.shape[0] == 3 and min(img.shape[1:]) == 40


def test_stokerctl_refuses_an_unknown_op_by_name(served):
    r = served.ctl("consume", "--dataset", "set", "--ops", '[{"RandomFisheye": {}}]')
    assert r.returncode != 0 and "RandomFisheye" in r.stderr, (r.returncode, r.stderr)
    assert served.health()
