"""WebP decode (server/image/decode/webp_decoder.h) against PIL, byte for byte:
lossy, lossless, with alpha, animated (the first frame), written by PIL and
by libwebp's command-line tools; and hostile files that must fail cleanly."""

import io
import shutil
import struct
import subprocess

import numpy as np
import pytest
from PIL import Image

import formats_util

pytestmark = pytest.mark.skipif(not formats_util.tool_available(),
                                reason="stoker-image-tool not built")

RNG = np.random.default_rng(20240)


def photo(h, w, alpha=False):
    """Gradients plus noise; alpha with bands of 0, 255 and everything between."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                     (x + 2 * y) * 5 % 256], -1)
    img = np.clip(base + RNG.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)
    if not alpha:
        return Image.fromarray(img, "RGB")
    a = np.clip((3 * x - y) % 256 + RNG.normal(0, 20, (h, w)), 0, 255).astype(np.uint8)
    a[: h // 4] = 0
    a[h // 4: h // 3] = 255
    return Image.fromarray(np.dstack([img, a]), "RGBA")


def chunk(tag, payload):
    return tag + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) & 1)


def riff(chunks):
    return b"RIFF" + struct.pack("<I", len(chunks) + 4) + b"WEBP" + chunks


def le24(v):
    return struct.pack("<I", v)[:3]


def vp8x(flags, w, h):
    return chunk(b"VP8X", bytes([flags, 0, 0, 0]) + le24(w - 1) + le24(h - 1))


def animation(cw, ch, frames):
    """frames: (x, y, PIL image, save options), x and y even. The ANIM
    background colour is one the decode must ignore."""
    body = [vp8x(0x12, cw, ch), chunk(b"ANIM", struct.pack("<IH", 0xFF00FF00, 0))]
    encoded = {}  # a frame repeated is encoded once
    for x, y, img, opts in frames:
        if id(img) not in encoded:
            data = pil_bytes(img, **opts)
            encoded[id(img)] = data[30:] if data[12:16] == b"VP8X" else data[12:]
        body.append(chunk(b"ANMF", le24(x // 2) + le24(y // 2) + le24(img.width - 1)
                          + le24(img.height - 1) + le24(100) + b"\0" + encoded[id(img)]))
    return riff(b"".join(body))


def pil_bytes(img, **kw):
    b = io.BytesIO()
    img.save(b, "WEBP", **kw)
    return b.getvalue()


PIL_FILES = {
    "lossy_rgb": lambda: pil_bytes(photo(61, 83), quality=80),
    "lossy_rgb_1x1": lambda: pil_bytes(photo(1, 1)),
    "lossy_rgb_odd": lambda: pil_bytes(photo(7, 3), quality=50),
    "lossy_rgba": lambda: pil_bytes(photo(45, 70, True), quality=60),
    "lossless_rgb": lambda: pil_bytes(photo(33, 50), lossless=True),
    "lossless_rgba": lambda: pil_bytes(photo(33, 50, True), lossless=True),
    "lossless_rgba_exact": lambda: pil_bytes(photo(33, 50, True), lossless=True, exact=True),
    "anim_lossy": lambda: pil_bytes(photo(40, 52, True), save_all=True, duration=80,
                                    append_images=[photo(40, 52, True), photo(40, 52, True)]),
    "anim_lossless": lambda: pil_bytes(photo(40, 52, True), save_all=True, lossless=True,
                                       append_images=[photo(40, 52, True)]),
    "anim_rgb": lambda: pil_bytes(photo(40, 52), save_all=True, append_images=[photo(40, 52)]),
    "anim_mixed": lambda: pil_bytes(photo(40, 52, True), save_all=True, allow_mixed=True,
                                    append_images=[photo(40, 52, True)]),
    # The first frame on part of the canvas: the rest is (0, 0, 0).
    "anim_offset_frame": lambda: animation(
        48, 40, [(6, 10, photo(20, 30, True), {"lossless": True}),
                 (0, 0, photo(40, 48), {"lossless": True})]),
    "anim_offset_lossy_frame": lambda: animation(
        48, 40, [(4, 2, photo(21, 31, True), {"quality": 70})]),
}

CWEBP = {
    "cwebp_q80": ["-q", "80"],
    "cwebp_simple_filter": ["-q", "30", "-nostrong"],
    "cwebp_sharp_yuv": ["-q", "60", "-sharp_yuv"],
    "cwebp_no_filter": ["-q", "90", "-f", "0", "-segments", "1"],
    "cwebp_strong": ["-q", "70", "-strong", "-sharpness", "5", "-m", "6"],
    "cwebp_lossless": ["-lossless"],
    "cwebp_near_lossless": ["-near_lossless", "60"],
    "cwebp_alpha": ["-q", "70", "-alpha_filter", "best", "-alpha_q", "50", "-exact"],
    "cwebp_alpha_lossless": ["-lossless", "-exact"],
}


@pytest.mark.parametrize("name", sorted(PIL_FILES))
def test_pil_written(tmp_path, name):
    path = tmp_path / f"{name}.webp"
    path.write_bytes(PIL_FILES[name]())
    formats_util.assert_same_as_pil(path, tmp_path)
    _, header = formats_util.stoker_decode(path, tmp_path)
    if "mode" in header:
        assert header["mode"] == formats_util.pil_mode(path)


@pytest.mark.skipif(shutil.which("cwebp") is None, reason="cwebp not installed")
@pytest.mark.parametrize("name", sorted(CWEBP))
def test_cwebp_written(tmp_path, name):
    src = tmp_path / "src.png"
    photo(90, 131, alpha="alpha" in name).save(src)
    path = tmp_path / f"{name}.webp"
    subprocess.run(["cwebp", "-quiet", *CWEBP[name], str(src), "-o", str(path)], check=True)
    formats_util.assert_same_as_pil(path, tmp_path)


@pytest.mark.skipif(shutil.which("img2webp") is None, reason="img2webp not installed")
@pytest.mark.parametrize("opts", [["-lossy", "-q", "60"], ["-mixed"], ["-lossless"]])
def test_img2webp_written(tmp_path, opts):
    frames = []
    for i in range(3):
        frames.append(tmp_path / f"f{i}.png")
        photo(36, 45, alpha=True).save(frames[-1])
    path = tmp_path / "anim.webp"
    subprocess.run(["img2webp", *opts, *map(str, frames), "-o", str(path)], check=True,
                   capture_output=True)
    formats_util.assert_same_as_pil(path, tmp_path)


def pil_fails(path):
    try:
        formats_util.pil_rgb(path)
    except Exception:  # noqa: BLE001 - any PIL failure
        return True
    return False


def test_truncated(tmp_path):
    for name in ("lossy_rgba", "lossless_rgb", "anim_lossy"):
        data = PIL_FILES[name]()
        for cut in (8, 20, 31, len(data) // 3, len(data) // 2, len(data) - 1):
            path = tmp_path / f"{name}_{cut}.webp"
            path.write_bytes(data[:cut])
            assert pil_fails(path)
            assert formats_util.stoker_fails(path, tmp_path), (name, cut)


def test_riff_size_past_the_end(tmp_path):
    data = bytearray(PIL_FILES["lossless_rgb"]())
    data[4:8] = struct.pack("<I", len(data) + 100)
    path = tmp_path / "riff.webp"
    path.write_bytes(bytes(data))
    assert pil_fails(path)
    assert "truncated" in formats_util.stoker_fails(path, tmp_path)


def test_corrupt_bitstream(tmp_path):
    """No checksum in WebP: a flipped byte fails in both or decodes the same."""
    failed = 0
    for name in ("lossy_rgb", "lossless_rgba", "lossy_rgba"):
        data = PIL_FILES[name]()
        for at in range(20, len(data), max(1, len(data) // 12)):
            bad = bytearray(data)
            bad[at] ^= 0x5A
            path = tmp_path / f"{name}_{at}.webp"
            path.write_bytes(bytes(bad))
            if pil_fails(path):
                failed += 1
                assert formats_util.stoker_fails(path, tmp_path), (name, at)
            else:
                formats_util.assert_same_as_pil(path, tmp_path)
    assert failed > 0


def test_bomb_canvas(tmp_path):
    # 16383x16383 (WebP's largest) declared, a few bytes of data.
    path = tmp_path / "bomb.webp"
    path.write_bytes(riff(vp8x(0x10, 16383, 16383) + chunk(b"VP8L", b"\x2f" + b"\xff" * 9)))
    assert formats_util.stoker_fails(path, tmp_path)
    path = tmp_path / "bomb_anim.webp"
    path.write_bytes(animation(16383, 16383, [(0, 0, photo(4, 4, True), {"lossless": True})] * 1000))
    assert formats_util.stoker_fails(path, tmp_path)


def test_frame_outside_canvas(tmp_path):
    path = tmp_path / "outside.webp"
    path.write_bytes(animation(16, 16, [(10, 0, photo(8, 8, True), {"lossless": True})]))
    assert pil_fails(path)
    assert formats_util.stoker_fails(path, tmp_path)


def test_many_frames(tmp_path):
    path = tmp_path / "many.webp"
    path.write_bytes(animation(8, 8, [(2, 2, photo(4, 4, True), {"lossless": True})] * 50000))
    formats_util.assert_same_as_pil(path, tmp_path)
