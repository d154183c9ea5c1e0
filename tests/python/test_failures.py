"""What the daemon remembers and shows, against a real stokerd: the failures of
ended sessions (`stokerctl status --failures`, Client.status), the layout of
`stokerctl top`/`status` in a narrow terminal, ListSamples against
torchvision's ImageFolder, and stokerctl consume's flags."""

import fcntl
import json
import os
import pty
import struct
import subprocess
import termios

import pytest

from conftest import imagefolder_samples, make_dataset, read_terminal, start_daemon

BAD = os.path.join("class_01", "img_0002.jpg")
LONG_DS = "a_rather_long_dataset_folder_name_to_test_the_layout/train"
EVAL_32 = {"pipeline": "eval", "size": 32}
LONG_CLIENT = "a trainer with a very long client name that no table has room for"


@pytest.fixture(scope="module")
def served(build_dir):
    """One daemon for the module: a small tree with one corrupt JPEG ("bad"),
    and a long-named good one."""
    d = start_daemon(build_dir, workers=2)
    make_dataset(os.path.join(d.data_root, "bad"), classes=2, per_class=6, sizes=(40, 80))
    with open(os.path.join(d.data_root, "bad", BAD), "wb") as f:
        f.write(b"this is not a jpeg")
    make_dataset(os.path.join(d.data_root, LONG_DS), classes=2, per_class=4, sizes=(40, 80))
    yield d
    d.stop()
    import shutil
    shutil.rmtree(d.workdir, ignore_errors=True)


def ctl_json(d, *args):
    r = d.ctl(*args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def dataset_failures(d, name):
    st = ctl_json(d, "status", "--failures", "--json")
    return [x for x in st.get("dataset_failures", []) if x["dataset"] == name]


def fail_missing_files(d, name, missing):
    """Consumes a manifest of one good file and the `missing` paths under
    policy "error" (each missing file fails once, with no replacements
    tried); returns the dataset's failure memory."""
    with open(os.path.join(d.data_root, name), "w") as f:
        f.write("bad/class_00/img_0000.jpg\t0\n")
        for path in missing:
            f.write(f"{path}\t1\n")
    r = d.ctl("consume", "--dataset", name, "--batch-size", "64", "--size", "32",
              "--no-shuffle", "--failure-policy", "error", "--json", timeout_s=120)
    assert r.returncode == 0, r.stderr
    [df] = dataset_failures(d, name)
    return df


# ---------------------------------------------------------------------------
# Row 1: failures outlive the session that hit them


def test_failures_are_shown_after_their_session_ended(served, stoker):
    r = served.ctl("consume", "--dataset", "bad", "--batch-size", "4", "--size", "32", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["replaced"] == 1
    st = ctl_json(served, "status", "--failures", "--json")
    assert st["sessions"] == []  # the session is gone...
    [df] = [x for x in st["dataset_failures"] if x["dataset"] == "bad"]  # ...its failures not
    assert int(df["samples_failed"]) == 1 and int(df["failures_not_kept"]) == 0
    [f] = df["failures"]
    assert f["path"].endswith(BAD)
    assert "jpeg" in f["reason"].lower() or "decode" in f["reason"].lower(), f["reason"]
    assert int(f["count"]) == 1
    assert int(f["dataset_index"]) == 6 + 2  # class_01's third file, in ImageFolder order
    # Without --failures the memory is not sent.
    assert ctl_json(served, "status", "--json").get("dataset_failures", []) == []

    # A second session hitting the same file counts it again, listed once.
    r = served.ctl("consume", "--dataset", "bad", "--batch-size", "4", "--size", "32", "--json")
    assert r.returncode == 0, r.stderr
    [df] = dataset_failures(served, "bad")
    assert int(df["samples_failed"]) == 2
    [f] = df["failures"]
    assert int(f["count"]) == 2

    # The text view names the dataset, the file and the reason.
    r = served.ctl("status", "--failures")
    assert r.returncode == 0, r.stderr
    assert "bad" in r.stdout and "img_0002.jpg" in r.stdout, r.stdout
    assert f["reason"][:20] in r.stdout, r.stdout

    # And the Python client shows the same.
    got = stoker.Client(served.socket).status(include_failures=True)["dataset_failures"]
    [pf] = [x for x in got if x["dataset"] == "bad"]
    assert pf["failures"][0]["path"] == f["path"]


def test_failure_memory_is_bounded_per_dataset(served):
    n = 1001
    df = fail_missing_files(served, "many.txt", [f"missing/m{i:05d}.jpg" for i in range(n)])
    assert int(df["samples_failed"]) == n
    assert len(df["failures"]) == 1000
    assert int(df["failures_not_kept"]) == n - 1000
    # The first 1000 distinct failures (in time: workers finish out of
    # order) are the ones kept, listed in dataset index order.
    kept = [int(x["dataset_index"]) for x in df["failures"]]
    assert kept == sorted(set(kept)) and set(kept) <= set(range(1, n + 1))
    assert all(x["path"] == f"missing/m{int(x['dataset_index']) - 1:05d}.jpg"
               for x in df["failures"])


def test_failure_memory_is_bounded_in_bytes_per_dataset(served):
    # 300 missing files with paths of about 2 KB: their paths alone are 600 KB,
    # more than the 256 KiB a dataset's memory may hold.
    n, deep = 300, "/".join(["d" * 200] * 10)
    df = fail_missing_files(served, "long.txt", [f"{deep}/m{i:05d}.jpg" for i in range(n)])
    kept = df["failures"]
    assert int(df["samples_failed"]) == n
    assert 0 < len(kept) < n and int(df["failures_not_kept"]) == n - len(kept)
    assert sum(len(x["path"]) + len(x["reason"]) for x in kept) <= 256 << 10
    assert all(x["path"].startswith(deep + "/m") for x in kept)


def test_failure_memory_drops_the_dataset_that_failed_longest_ago(served, stoker):
    # 65 tiny datasets with one bad file each: the memory keeps 64.
    c = stoker.Client(served.socket)
    names = [f"tiny/d{i:02d}" for i in range(65)]
    for name in names:
        root = os.path.join(served.data_root, name)
        make_dataset(root, classes=1, per_class=1, sizes=(32, 40))
        with open(os.path.join(root, "class_00", "img_0001.jpg"), "wb") as f:
            f.write(b"broken")
    for name in names + [names[1]]:  # d01 fails again last: the most recent
        s = c.attach(name, batch_size=1, pipeline=EVAL_32, epochs=1, shuffle=False)
        while True:
            try:
                s.next()
            except stoker.EndOfData:
                break
        s.detach()
    got = [x["dataset"] for x in c.status(include_failures=True)["dataset_failures"]]
    tiny = [x for x in got if x.startswith("tiny/")]
    assert len(got) == 64, got
    assert tiny[0] == names[1]  # the dataset failed most recently first
    assert names[0] not in tiny  # the oldest dropped
    assert set(tiny) == set(names[1:])
    assert "bad" not in got  # older still than d00: dropped too


# ---------------------------------------------------------------------------
# Row 2: stokerctl top and status fit the terminal


def long_session(served, stoker):
    c = stoker.Client(served.socket)
    s = c.attach(LONG_DS, batch_size=2, pipeline=EVAL_32, epochs=0,
                 client_name=LONG_CLIENT)
    s.next()
    return s


def run_top_in_pty(served, cols, env):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    p = subprocess.Popen([served.stokerctl, "top", "--socket", served.socket, "--iterations", "1",
                          "--interval-ms", "100"], stdin=slave, stdout=slave, stderr=slave,
                         env=env)
    os.close(slave)
    out = read_terminal(master)
    assert p.wait(timeout=20) == 0
    os.close(master)
    return out.decode(errors="replace").replace("\x1b[H\x1b[2J", "").replace("\r", "")


def test_top_fits_80_columns_and_shows_more_when_wider(served, stoker):
    s = long_session(served, stoker)
    try:
        env = dict(os.environ, COLUMNS="80")
        r = subprocess.run([served.stokerctl, "top", "--socket", served.socket,
                            "--iterations", "1", "--interval-ms", "100"],
                           capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert any("SESSION" in x for x in lines), r.stdout
        too_long = [x for x in lines if len(x) > 80]
        assert not too_long, "\n".join(too_long)
        assert LONG_CLIENT not in r.stdout and "…" in r.stdout  # truncated, with an ellipsis

        # The terminal's own width (TIOCGWINSZ) wins over $COLUMNS.
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        text = run_top_in_pty(served, 80, env)
        assert "SESSION" in text
        too_long = [x for x in text.splitlines() if len(x) > 80]
        assert not too_long, "\n".join(too_long)

        wide = subprocess.run([served.stokerctl, "top", "--socket", served.socket,
                               "--iterations", "1", "--interval-ms", "100"],
                              capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, COLUMNS="400"))
        assert wide.returncode == 0, wide.stderr
        head80 = [x for x in lines if x.startswith("SESSION")][0].split()
        head400 = [x for x in wide.stdout.splitlines() if x.startswith("SESSION")][0].split()
        assert len(head400) > len(head80), (head80, head400)
        assert LONG_CLIENT in wide.stdout

        # `status` lays out the same way.
        r = subprocess.run([served.stokerctl, "status", "--socket", served.socket],
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, COLUMNS="80"))
        assert r.returncode == 0, r.stderr
        too_long = [x for x in r.stdout.splitlines() if len(x) > 80]
        assert not too_long, "\n".join(too_long)
    finally:
        s.detach()


# ---------------------------------------------------------------------------
# Row 3: ListSamples is ImageFolder's sample list


def test_list_samples_equals_imagefolder_samples(served, stoker):
    root = os.path.join(served.data_root, "nested")
    make_dataset(root, classes=2, per_class=3, sizes=(32, 40))
    os.makedirs(os.path.join(root, "class_00", "sub", "deeper"))
    os.makedirs(os.path.join(root, "class_01", "x y"))
    for rel in ["class_00/sub/b.JPG", "class_00/sub/deeper/a.jpeg", "class_01/x y/z.jpg",
                "class_01/0first.jpg"]:
        with open(os.path.join(root, "class_00", "img_0000.jpg"), "rb") as src, \
                open(os.path.join(root, rel), "wb") as dst:
            dst.write(src.read())
    # A file that is a link (within the root) is listed by its own name.
    os.symlink(os.path.join(root, "class_00", "img_0001.jpg"),
               os.path.join(root, "class_01", "linked.jpg"))
    want = imagefolder_samples(root)
    assert (os.path.join(root, "class_01", "linked.jpg"), 1) in want
    c = stoker.Client(served.socket)
    s = c.attach("nested", batch_size=1, pipeline=EVAL_32, epochs=1)
    try:
        paths, labels = s.list_samples(0, 0)
        assert [(os.path.join(root, p), k) for p, k in zip(paths, labels)] == want
        # Pages, and the end.
        got = []
        off = 0
        while True:
            p, k = s.list_samples(off, 3)
            if not p:
                break
            assert len(p) <= 3
            got += list(zip(p, k))
            off += len(p)
        assert [(os.path.join(root, p), k) for p, k in got] == want
        assert s.list_samples(len(want) + 5, 10) == ([], [])
        with pytest.raises(stoker.InvalidRequestError, match="65536"):
            s.list_samples(0, 65537)
    finally:
        s.detach()


# ---------------------------------------------------------------------------
# Row 4: stokerctl consume's flags


def test_consume_refuses_an_unknown_dtype(served):
    r = served.ctl("consume", "--dataset", "bad", "--dtype", "float64", "--size", "32",
                   "--batch-size", "4", "--json")
    assert r.returncode != 0
    assert "float64" in r.stderr and "uint8" in r.stderr, r.stderr
    r = served.ctl("consume", "--dataset", "bad", "--dtype", "float16", "--size", "32",
                   "--batch-size", "4", "--json")
    assert r.returncode == 0, r.stderr


def test_consume_takes_the_attach_flags(served):
    r = served.ctl("consume", "--dataset", LONG_DS, "--size", "32", "--batch-size", "4",
                   "--allow-empty", "--skip-unsupported-formats", "--apply-exif-orientation",
                   "--exact-decode", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["samples"] == 8
    # They reach the daemon: an empty class refuses the attach unless
    # --allow-empty says otherwise.
    root = os.path.join(served.data_root, "odd")
    make_dataset(root, classes=1, per_class=4, sizes=(32, 40))
    os.makedirs(os.path.join(root, "class_09_empty"))
    args = ("consume", "--dataset", "odd", "--size", "32", "--batch-size", "2", "--json")
    r = served.ctl(*args)
    assert r.returncode != 0 and "FAILED_PRECONDITION" in r.stderr, r.stderr
    r = served.ctl(*args, "--allow-empty")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["samples"] == 4
    # A PNG is a sample now (--skip-unsupported-formats is accepted and
    # ignored): a broken one fails as a sample and is replaced.
    with open(os.path.join(root, "class_00", "extra.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
    for extra in ((), ("--skip-unsupported-formats",)):
        r = served.ctl(*args, "--allow-empty", *extra)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["samples"] == 5 and out["replaced"] == 1, out


def test_list_samples_of_webdataset_shards(served, stoker):
    import io
    import tarfile
    os.makedirs(os.path.join(served.data_root, "wds"))
    with open(os.path.join(served.data_root, "bad", "class_00", "img_0000.jpg"), "rb") as f:
        jpeg = f.read()
    for k in range(2):
        with tarfile.open(os.path.join(served.data_root, "wds", f"s-{k}.tar"), "w") as t:
            for key, label in [(f"n{k}a", 3), (f"n{k}b", 4)]:
                for ext, data in [("jpg", jpeg), ("cls", str(label).encode())]:
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
    s = stoker.Client(served.socket).attach("wds/s-{0..1}.tar", batch_size=1, pipeline=EVAL_32,
                                            epochs=1)
    try:
        assert s.list_samples() == (["s-0.tar:n0a.jpg", "s-0.tar:n0b.jpg", "s-1.tar:n1a.jpg",
                                     "s-1.tar:n1b.jpg"], [3, 4, 3, 4])
    finally:
        s.detach()
