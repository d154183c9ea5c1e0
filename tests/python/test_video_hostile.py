"""Bad videos through stoker's video code (server/video/, run by
stoker-video-tool): each is a named error or an index that lists what is
really there, in bounded time and memory; never a hang, a crash or an
allocation the file asks for.

The cases are those that break loaders in the wild: a truncated file
(moov at the end, or the packets cut), a container that over-reports its
frames (decord's hang), a file with no video stream or no frame, a header
claiming 16K x 16K (in the container, or only in the frames), damaged
packets, a clip past the real end. Videos are made with Debian's ffmpeg and
patched byte by byte.
"""

import json
import struct
import subprocess

import pytest

TIMEOUT_S = 30  # per command: far above what any case takes (tens of ms)


def _ffmpeg(out, *args, source="testsrc2=size=64x48:rate=10:duration=2"):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    source, *args, str(out)], check=True, timeout=60)
    return out


def _probe(video_tool, path):
    return json.loads(subprocess.check_output([video_tool, "probe", str(path)], timeout=TIMEOUT_S))


def _decode(video_tool, path, pts):
    """(exit code, the JSON line) of decoding the frames `pts`."""
    r = subprocess.run([video_tool, "decode", str(path), "--pts", ",".join(map(str, pts))],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode in (0, 2), r.stderr  # 2: a clip that failed, said on stdout
    return r.returncode, json.loads(r.stdout)


def test_truncated_mp4_with_its_index_at_the_end_is_data_loss(video_tool, tmp_path):
    whole = _ffmpeg(tmp_path / "v.mp4", "-c:v", "libx264", "-bf", "2")
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    got = _probe(video_tool, cut)
    assert got["error"].startswith("DATA_LOSS"), got
    assert "cut.mp4" in got["error"]


def test_truncated_packets_keep_the_frames_before_the_cut(video_tool, tmp_path):
    whole = _ffmpeg(tmp_path / "v.mkv", "-c:v", "mpeg4", "-g", "5")
    full = _probe(video_tool, whole)
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3])
    got = _probe(video_tool, cut)
    assert 0 < len(got["pts"]) < len(full["pts"])
    assert got["pts"] == full["pts"][: len(got["pts"])]
    # A clip named by the whole file's index past the cut: a named failure.
    code, line = _decode(video_tool, cut, full["pts"][-4:])
    assert code == 2 and line["code"] == "DATA_LOSS" and "did not decode" in line["error"]
    # The frames before it decode.
    code, line = _decode(video_tool, cut, got["pts"][:4])
    assert code == 0 and line["frames"] == 4


def test_a_container_that_over_reports_its_frames_is_indexed_by_what_is_there(video_tool, tmp_path):
    """AVI's headers claim 100,000 frames (avih dwTotalFrames, strh dwLength)
    over 20 real ones: the index counts packets, not the header, and a clip
    past the 20th fails at once instead of waiting for frames that never
    come."""
    avi = _ffmpeg(tmp_path / "v.avi", "-c:v", "mjpeg")
    data = bytearray(avi.read_bytes())
    avih = data.find(b"avih")
    assert struct.unpack_from("<I", data, avih + 8 + 16)[0] == 20
    struct.pack_into("<I", data, avih + 8 + 16, 100000)
    strh = data.find(b"strh")
    assert struct.unpack_from("<I", data, strh + 8 + 32)[0] == 20
    struct.pack_into("<I", data, strh + 8 + 32, 100000)
    liar = tmp_path / "liar.avi"
    liar.write_bytes(bytes(data))
    got = _probe(video_tool, liar)
    assert len(got["pts"]) == 20
    code, line = _decode(video_tool, liar, [18, 19, 20, 21])
    assert code == 2 and line["code"] == "DATA_LOSS"


def test_no_video_stream_and_no_frame(video_tool, tmp_path):
    audio = _ffmpeg(tmp_path / "a.m4a", source="sine=duration=1")
    got = _probe(video_tool, audio)
    assert got["error"].startswith("FAILED_PRECONDITION") and "no video stream" in got["error"]
    # A Matroska file cut before its first cluster: its tracks and no frame.
    # FFmpeg's demuxer does not open it (PyAV neither: torchvision lists no
    # frame): a named failure.
    mkv = _ffmpeg(tmp_path / "v.mkv", "-c:v", "mpeg4")
    data = mkv.read_bytes()
    cluster = data.find(bytes.fromhex("1f43b675"))
    assert cluster > 0
    empty = tmp_path / "empty.mkv"
    empty.write_bytes(data[:cluster])
    got = _probe(video_tool, empty)
    assert got["error"].startswith("DATA_LOSS") and "empty.mkv" in got["error"]


def _max_rss_kb(video_tool, *args):
    """(exit code, stdout, peak RSS in KB) of one video_tool command, by GNU
    time (Debian's `time`, in scripts/lib.sh's packages): a child of this
    large process would report its parent's peak as its own (Linux keeps a
    process's peak across exec), a child of time does not."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", video_tool, *map(str, args)], capture_output=True,
                       text=True, timeout=TIMEOUT_S)
    return r.returncode, r.stdout, int(r.stderr.strip().splitlines()[-1])


def _claim_size(data, width, height, container=True, frames=True):
    """An MJPEG AVI of 64 x 48 frames patched to claim width x height: in the
    container (avih dwWidth/dwHeight, strf biWidth/biHeight) and/or in every
    frame (each JPEG's SOF0)."""
    out = bytearray(data)
    if container:
        avih = out.find(b"avih")
        struct.pack_into("<II", out, avih + 8 + 32, width, height)
        strf = out.find(b"strf")
        struct.pack_into("<ii", out, strf + 8 + 4, width, height)
    if frames:
        sof = bytes.fromhex("ffc000110800300040")
        assert out.count(sof) == 20
        out = bytearray(bytes(out).replace(sof, bytes.fromhex("ffc0001108") +
                                           struct.pack(">HH", height, width)))
    return bytes(out)


@pytest.mark.parametrize("width,height", [(16384, 16384), (8200, 8200)])
def test_a_frame_size_claim_is_never_allocated(video_tool, tmp_path, width, height):
    """16K x 16K (FFmpeg refuses it itself) and 8200 x 8200 (just over the
    default max_decode_pixels, 8192 x 8192): claimed by the container only,
    the real frames decide (its claim is not trusted); claimed by the frames,
    indexing and decoding stay small and the clip fails by name."""
    data = _ffmpeg(tmp_path / "v.avi", "-c:v", "mjpeg").read_bytes()
    container_only = tmp_path / "container.avi"
    container_only.write_bytes(_claim_size(data, width, height, frames=False))
    got = _probe(video_tool, container_only)
    assert (got["width"], got["height"], len(got["pts"])) == (64, 48, 20)
    code, line = _decode(video_tool, container_only, [3, 4])
    assert code == 0 and (line["width"], line["height"]) == (64, 48)

    lying = tmp_path / "frames.avi"
    lying.write_bytes(_claim_size(data, width, height))
    code, out, rss = _max_rss_kb(video_tool, "probe", lying)
    assert rss < 200_000, rss  # KB: no frame of that size was allocated
    got = json.loads(out)
    if "error" in got:
        assert got["error"].startswith("RESOURCE_EXHAUSTED") and f"{width}x{height}" in got["error"]
    else:
        assert len(got["pts"]) == 20
        code, out, rss = _max_rss_kb(video_tool, "decode", lying, "--pts", "3,4")
        assert rss < 200_000, rss
        line = json.loads(out)
        assert code == 2 and line["code"] in ("DATA_LOSS", "RESOURCE_EXHAUSTED"), line


def test_damaged_packets_fail_clips_by_name_or_decode(video_tool, tmp_path):
    """Bytes overwritten through an H.264 file's frames: every clip either
    decodes (the decoder conceals the damage, as it does for PyAV) or fails
    naming its first missing frame; the index still lists every packet."""
    mp4 = _ffmpeg(tmp_path / "v.mp4", "-c:v", "libx264", "-bf", "2", "-g", "8",
                  source="testsrc2=size=160x120:rate=10:duration=3")
    full = _probe(video_tool, mp4)
    data = bytearray(mp4.read_bytes())
    mdat = data.find(b"mdat")
    for k in range(mdat + 2000, len(data) - 3000, 1500):
        data[k:k + 40] = bytes((k * 7 + i) & 255 for i in range(40))
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))
    got = _probe(video_tool, bad)
    assert got["pts"] == full["pts"]
    outcomes = set()
    for start in range(0, len(full["pts"]) - 4, 4):
        code, line = _decode(video_tool, bad, full["pts"][start:start + 4])
        outcomes.add(code)
        if code == 2:
            assert line["code"] in ("DATA_LOSS", "RESOURCE_EXHAUSTED"), line
    assert outcomes <= {0, 2}


def test_memory_does_not_grow_with_the_clips_decoded(video_tool, tmp_path):
    """Every clip of a 720p H.264 video with a GOP longer than the video
    (each clip decodes from its first frame), in a shuffled order, through
    one decoder: resident memory after the 10th clip is what it is after
    the last (the decoder's references and one clip's frames, whatever the
    number of clips)."""
    video = _ffmpeg(tmp_path / "hd.mp4", "-c:v", "libx264", "-preset", "veryfast", "-bf", "3",
                    "-g", "250", "-pix_fmt", "yuv420p",
                    source="testsrc2=size=1280x720:rate=30:duration=2,noise=alls=10:allf=t+u")
    got = json.loads(subprocess.check_output(
        [video_tool, "sweep", str(video), "--frames-per-clip", "8", "--step", "1", "--seed", "5"],
        timeout=120))
    assert got["clips"] == 53 and got["failed"] == 0
    rss = dict(got["rss_kb"])
    assert rss[53] - rss[10] < 4096, got["rss_kb"]
