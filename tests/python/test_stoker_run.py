"""What real training scripts do, without a line changed (issue 34).

* ``python -m stoker run`` and ``STOKER_DATALOADER=1`` (as under torchrun)
  run examples/reference_train.py, shaped like torchvision's classification
  reference, unchanged: its loaders are served by stoker, pass isinstance
  checks, see what DataLoader's see, and its eval pixels equal DataLoader's;
  a loader stoker cannot honour stays PyTorch's, and the report says why.
* RandomSampler / SequentialSampler read as shuffle=True / False.
* Without seed=, the order follows torch's global RNG.
* Ctrl-C while waiting for a batch is undone as a break is.
* data_root= with a sidecar; a private daemon reads every path it is given.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, make_dataset

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("torchvision.datasets")

SCRIPT = os.path.join(REPO, "examples", "reference_train.py")
V2_FLAGS = ["--auto-augment", "ta_wide", "--random-erase", "0.1", "--mixup-alpha", "0.2",
            "--cutmix-alpha", "1.0", "--label-smoothing", "0.1"]
CLASSES, PER_CLASS, BATCH = 3, 8, 4
N = CLASSES * PER_CLASS


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    top = str(tmp_path_factory.mktemp("run"))
    make_dataset(os.path.join(top, "train"), classes=CLASSES, per_class=PER_CLASS,
                 sizes=(60, 140), seed=3)
    make_dataset(os.path.join(top, "val"), classes=CLASSES, per_class=4, sizes=(60, 140),
                 seed=4)
    return top


def _env(build_dir, **extra):
    env = dict(os.environ)
    env.pop("STOKER_SOCKET", None)
    env.pop("STOKER_DATALOADER", None)
    env["PYTHONPATH"] = os.path.join(build_dir, "python")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _run(cmd, env, cwd, timeout=300):
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout}\n{p.stderr[-4000:]}"
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return lines, p.stderr


def _launch_two_ranks(cmd, env, cwd, timeout=300):
    """Two ranks with the environment torchrun gives them (Debian's torchrun
    cannot start on Python 3.11: its --redirects default is None)."""
    import socket as so
    with so.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in (0, 1):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(cmd, env=e, cwd=cwd, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"{cmd} failed:\n{out}\n{err[-4000:]}"
        outs.append(([json.loads(l) for l in out.splitlines() if l.startswith("{")], err))
    return outs


def _training_facts(lines):
    return [{k: l[k] for k in ("epoch", "batches", "samples", "len", "soft_targets", "shape")}
            for l in lines if "batches" in l]


def _eval_facts(lines):
    return [{k: l[k] for k in ("epoch", "evaluated", "dataset_len", "eval_labels")}
            for l in lines if "evaluated" in l]


def test_the_reference_script_runs_unchanged_under_stoker_run(build_dir, root, tmp_path):
    args = [SCRIPT, "--data-path", root, "--batch-size", str(BATCH)] + V2_FLAGS
    env = _env(build_dir)
    plain, plain_err = _run([sys.executable] + args + ["--dump-eval", str(tmp_path / "dl")],
                            env, str(tmp_path))
    ours, err = _run([sys.executable, "-m", "stoker", "run"] + args
                     + ["--dump-eval", str(tmp_path / "st")], env, str(tmp_path))
    assert "stoker run" not in plain_err
    assert "stoker run: 2 of 2 DataLoader(s) served by stoker" in err, err
    assert "reference_train.py:" in err and "ImageFolder(" in err
    # The same epochs, batches, soft (mixed) targets, shapes; the same eval.
    assert _training_facts(ours) == _training_facts(plain)
    assert _training_facts(ours)[0]["soft_targets"] is True
    assert _eval_facts(ours) == _eval_facts(plain)
    a, b = torch.load(str(tmp_path / "dl.0")), torch.load(str(tmp_path / "st.0"))
    assert a.shape == b.shape and torch.equal(a, b)  # eval pixels: DataLoader's exactly


def test_two_ranks_through_the_environment_variable(build_dir, root, tmp_path):
    args = [sys.executable, SCRIPT, "--data-path", root, "--batch-size", str(BATCH),
            "--epochs", "1"] + V2_FLAGS
    plain = _launch_two_ranks(args + ["--dump-eval", str(tmp_path / "dl")], _env(build_dir),
                              str(tmp_path))
    ours = _launch_two_ranks(args + ["--dump-eval", str(tmp_path / "st")],
                             _env(build_dir, STOKER_DATALOADER="1"), str(tmp_path))
    for rank, ((p_lines, _), (o_lines, o_err)) in enumerate(zip(plain, ours)):
        assert "2 of 2 DataLoader(s) served by stoker" in o_err, o_err
        assert _training_facts(o_lines) == _training_facts(p_lines)
        assert _training_facts(o_lines)[0]["samples"] == N // 2  # this rank's half
        assert _eval_facts(o_lines) == _eval_facts(p_lines)
        a = torch.load(str(tmp_path / f"dl.{rank}"))
        b = torch.load(str(tmp_path / f"st.{rank}"))
        assert torch.equal(a, b)


KEPT_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from torch.utils.data import DataLoader, Dataset, RandomSampler
    from torchvision import datasets, transforms as T

    class Squares(Dataset):
        def __len__(self):
            return 6
        def __getitem__(self, i):
            return torch.full((2,), float(i * i)), i

    folder = datasets.ImageFolder(sys.argv[1], T.Compose([T.RandomResizedCrop(32),
                                                          T.ToTensor()]))
    made = {
        "custom": DataLoader(Squares(), batch_size=3),
        "collate": DataLoader(folder, batch_size=4, collate_fn=lambda b: b),
        "served": torch.utils.data.DataLoader(folder, batch_size=4,
                                              sampler=RandomSampler(folder)),
    }
    out = {}
    for name, ld in made.items():
        n = sum(len(b[1]) if name != "collate" else len(b) for b in ld)
        out[name] = {"isinstance": isinstance(ld, torch.utils.data.DataLoader),
                     "samples": n, "len": len(ld),
                     "served": hasattr(ld, "stoker_loader")}
    print(json.dumps(out))
""")


def test_loaders_stoker_cannot_honour_stay_pytorchs_and_the_report_says_why(
        build_dir, root, tmp_path):
    script = tmp_path / "kept.py"
    script.write_text(KEPT_SCRIPT)
    (out,), err = _run([sys.executable, "-m", "stoker", "run", str(script),
                        os.path.join(root, "train")], _env(build_dir), str(tmp_path))
    assert out["custom"] == {"isinstance": True, "samples": 6, "len": 2, "served": False}
    assert out["collate"] == {"isinstance": True, "samples": N, "len": 6, "served": False}
    assert out["served"] == {"isinstance": True, "samples": N, "len": 6, "served": True}
    assert "1 of 3 DataLoader(s) served by stoker" in err, err
    kept = [l for l in err.splitlines() if l.strip().startswith("kept")]
    assert len(kept) == 2
    assert "kept.py:16" in kept[0] and "Squares" in kept[0] and "Python code" in kept[0]
    assert "kept.py:17" in kept[1] and "collate_fn" in kept[1]


def test_stoker_run_says_how_to_use_it(build_dir, tmp_path):
    p = subprocess.run([sys.executable, "-m", "stoker", "run", "nonexistent.py"],
                       env=_env(build_dir), capture_output=True, text=True, cwd=str(tmp_path))
    assert p.returncode == 2 and "no such script" in p.stderr
    p = subprocess.run([sys.executable, "-m", "stoker", "frobnicate"], env=_env(build_dir),
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert p.returncode == 2 and "usage: python -m stoker run" in p.stderr


# ---------------------------------------------------------------------------
# Samplers and seeds, against one module daemon


@pytest.fixture(scope="module")
def served(module_daemon_factory, root):
    return module_daemon_factory(workers=2, data_root=root)


def _orders(stoker, served, root, epochs=2, dataset=None, **kw):
    if "sampler" not in kw:
        kw.setdefault("size", 32)
    with stoker.Loader(dataset or os.path.join(root, "train"), BATCH, socket=served.socket,
                       epochs=epochs, timeout_ms=30000, **kw) as ld:
        return [[int(i) for b in ld.iter_batches() for i in b.indices] for _ in range(epochs)]


def test_random_and_sequential_samplers_read_as_shuffle(stoker, served, root):
    from torch.utils.data import RandomSampler, SequentialSampler
    import torchvision.transforms as T
    ds = datasets.ImageFolder(os.path.join(root, "train"), T.Compose([T.RandomResizedCrop(32),
                                                                      T.ToTensor()]))
    seq = _orders(stoker, served, root, dataset=ds, sampler=SequentialSampler(ds), seed=1)
    assert seq == [list(range(N))] * 2
    rnd = _orders(stoker, served, root, dataset=ds, sampler=RandomSampler(ds), seed=1)
    assert rnd == _orders(stoker, served, root, shuffle=True, seed=1)
    assert rnd[0] != list(range(N)) and sorted(rnd[0]) == list(range(N))
    for bad, name in ((RandomSampler(ds, replacement=True), "replacement=True"),
                      (RandomSampler(ds, num_samples=5), "num_samples=5"),
                      (RandomSampler(ds, generator=torch.Generator()), "generator")):
        with pytest.raises(stoker.InvalidRequestError, match=name):
            stoker.Loader(ds, sampler=bad, socket=served.socket)
    with pytest.raises(stoker.InvalidRequestError, match="another dataset"):
        stoker.Loader(ds, sampler=RandomSampler(list(range(N))), socket=served.socket)


def test_without_seed_the_order_follows_torchs_global_rng(stoker, served, root):
    torch.manual_seed(123)
    a = _orders(stoker, served, root)
    torch.manual_seed(123)
    b = _orders(stoker, served, root)
    torch.manual_seed(124)
    c = _orders(stoker, served, root)
    assert a == b  # torch.manual_seed reproduces a run
    assert a != c  # another seed (or an unseeded process) another order
    # The token names the seed drawn: a new loader resumes exactly from it.
    torch.manual_seed(123)
    with stoker.Loader(os.path.join(root, "train"), BATCH, socket=served.socket, size=32,
                       epochs=2, timeout_ms=30000) as ld:
        first = [int(i) for b in ld.iter_batches() for i in b.indices]
        state = ld.state_dict()
    assert first == a[0] and state["epoch"] == 1
    torch.manual_seed(999)  # a resumed run's RNG is not the first run's
    with stoker.Loader(os.path.join(root, "train"), BATCH, socket=served.socket, size=32,
                       epochs=2, timeout_ms=30000) as ld:
        ld.load_state_dict(state)
        assert [int(i) for b in ld.iter_batches() for i in b.indices] == a[1]
    # Sharded across ranks without seed=: 0 on every rank, DistributedSampler's.
    ranks = [stoker.Loader(os.path.join(root, "train"), BATCH, socket=served.socket,
                           world_size=2, rank=r) for r in (0, 1)]
    assert {ld.state_dict()["seed"] for ld in ranks} == {0}


# ---------------------------------------------------------------------------
# Ctrl-C


def test_an_interrupt_after_the_ring_handed_a_batch_out_is_undone_as_a_break(
        stoker, served, root, monkeypatch):
    from stoker import loader as loader_module
    ld = stoker.Loader(os.path.join(root, "train"), BATCH, socket=served.socket, size=32,
                       seed=3, epochs=2, timeout_ms=30000)
    expected = _orders(stoker, served, root, seed=3)
    real_wait = loader_module.Loader._wait
    calls = {"n": 0}

    def interrupted_wait(self):
        raw = real_wait(self)  # the native session handed the batch out...
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # ...and Ctrl-C landed before Python kept it
        return raw

    monkeypatch.setattr(loader_module.Loader, "_wait", interrupted_wait)
    with ld:
        with pytest.raises(KeyboardInterrupt):
            for _ in ld:
                pass
        got = [[int(i) for b in ld.iter_batches() for i in b.indices] for _ in range(2)]
    assert got == expected


SIGINT_SCRIPT = textwrap.dedent("""
    import os, random, signal, sys, threading, time
    import stoker
    ld = stoker.Loader(sys.argv[1], 4, socket=sys.argv[2], size=32, seed=3, epochs=1,
                       timeout_ms=30000)
    random.seed(int(sys.argv[3]))
    interrupted = 0
    for attempt in range(6):
        delay = random.uniform(0.0, 0.05)
        timer = threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT))
        try:
            timer.start()  # on a loaded machine the signal may come before start returns
            for images, labels in ld:
                time.sleep(0.2)
        except KeyboardInterrupt:
            interrupted += 1
        while True:  # a late timer's signal lands here, outside the loop
            try:
                timer.join()
                time.sleep(0.05)
                break
            except KeyboardInterrupt:
                pass
    seen = [int(i) for b in ld.iter_batches() for i in b.indices]
    print(interrupted, sorted(seen) == list(range(24)), len(seen))
""")


def test_ctrl_c_anywhere_in_the_loop_leaves_the_next_epoch_whole(build_dir, served, root,
                                                                 tmp_path):
    script = tmp_path / "sigint.py"
    script.write_text(SIGINT_SCRIPT)
    for seed in (1, 2):
        p = subprocess.run([sys.executable, str(script), os.path.join(root, "train"),
                            served.socket, str(seed)], env=_env(build_dir),
                           capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stderr[-3000:]
        interrupted, whole, n = p.stdout.split()
        assert int(interrupted) >= 1 and whole == "True" and n == str(N), p.stdout


IMPORT_SCRIPT = textwrap.dedent("""
    import os, signal, threading, sys
    from stoker import loader
    timer = threading.Timer(float(sys.argv[1]), lambda: os.kill(os.getpid(), signal.SIGINT))
    try:
        timer.start()  # on a loaded machine the signal may come before start returns
        loader._torch_module()
        print("imported", end=" ")
    except KeyboardInterrupt:
        print("interrupted", end=" ")
    import time
    while True:  # a late timer's signal lands here
        try:
            timer.join()
            time.sleep(0.2)
            break
        except KeyboardInterrupt:
            pass
    t = loader._torch_module()
    print(int(t.zeros(3).sum().item() == 0))
""")


def test_ctrl_c_during_the_first_import_of_torch_leaves_it_whole(build_dir, tmp_path):
    script = tmp_path / "imp.py"
    script.write_text(IMPORT_SCRIPT)
    for delay in ("0.05", "0.2"):
        p = subprocess.run([sys.executable, str(script), delay], env=_env(build_dir),
                           capture_output=True, text=True, timeout=120)
        assert p.stdout.strip().endswith("1"), (p.stdout, p.stderr[-2000:])


# ---------------------------------------------------------------------------
# Data roots


def test_data_root_with_a_sidecar_is_accepted_when_its_root_holds_it(stoker, served, root,
                                                                     tmp_path, caplog):
    import logging
    caplog.set_level(logging.INFO, logger="stoker")
    train = os.path.join(root, "train")
    with stoker.Loader(train, BATCH, socket=served.socket, size=32, epochs=1,
                       data_root=root, timeout_ms=30000) as ld:
        assert sum(len(y) for _, y in ld) == N
    assert any("holds it" in r.getMessage() for r in caplog.records)
    elsewhere = tmp_path / "elsewhere"
    make_dataset(str(elsewhere / "set"), classes=2, per_class=2, sizes=(40, 60), seed=1)
    with pytest.raises(stoker.InvalidRequestError) as e:
        stoker.Loader(str(elsewhere / "set"), 2, socket=served.socket, size=32,
                      data_root=str(elsewhere)).attach()
    assert str(elsewhere) in str(e.value) and repr(root) in str(e.value)


def test_a_private_daemon_reads_annotations_beside_the_images_folder(stoker, tmp_path,
                                                                     monkeypatch):
    # The README's layout: coco/train2017 and coco/annotations/instances.json.
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    from test_boxes import make_coco
    coco = tmp_path / "coco"
    make_coco(coco, [(60, 80), (70, 50), (64, 64)], lambda k, h, w: [(2, 3, 20, 10, 1, 0)])
    os.makedirs(coco / "annotations")
    os.rename(coco / "instances.json", coco / "annotations" / "instances_train2017.json")
    os.rename(coco / "images", coco / "train2017")
    monkeypatch.chdir(tmp_path)
    with stoker.Loader("coco/train2017", batch_size=3, size=32, num_workers=1, epochs=1,
                       annotations="coco/annotations/instances_train2017.json") as ld:
        (images, targets), = list(ld)
        assert images.shape[0] == 3 and len(targets) == 3
