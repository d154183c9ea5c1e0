"""A 1,000,000-entry manifest: indexed once by stokerd, never copied into the
workers (each worker's RSS grows by less than 20 MB over a 100-entry one, the
speed issue's bound), and cached: a restarted daemon maps the index.
"""

from __future__ import annotations

import os
import re

import pytest

from conftest import make_dataset

pytest.importorskip("torch")

N = 1_000_000


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def worker_pids(d):
    import json
    st = json.loads(d.ctl("status", "--json").stdout)
    return [w["pid"] for w in st["workers"]]


def test_a_million_entry_manifest_stays_out_of_the_workers(stoker, daemon_factory,
                                                          tmp_path_factory):
    root = str(tmp_path_factory.mktemp("scale"))
    files = make_dataset(os.path.join(root, "imgs"), classes=5, per_class=10, sizes=(40, 80),
                         seed=91)
    rel = [os.path.relpath(p, root) for p, _ in files]
    for name, n in (("small.tsv", 100), ("big.tsv", N)):
        with open(os.path.join(root, name), "w") as f:
            f.writelines(f"{rel[i % len(rel)]}\t{i % 1000}\n" for i in range(n))
        # Written a minute ago, as far as the daemon can tell: an index of a
        # file changed within the last 2 s is not cached (it might change
        # again within the same mtime tick).
        past = os.path.getmtime(os.path.join(root, name)) - 60
        os.utime(os.path.join(root, name), (past, past))
    grown = []
    for name in ("small.tsv", "big.tsv"):
        d = daemon_factory(workers=2, data_root=root)
        with stoker.Loader(name, socket=d.socket, batch_size=16, size=32, seed=1) as ld:
            it = iter(ld)
            for _ in range(6):
                next(it)
            assert ld.info["dataset_size"] == (100 if name == "small.tsv" else N)
            grown.append([rss_kb(p) for p in worker_pids(d)])
        if name == "big.tsv":
            m = re.search(r"indexed dataset big\.tsv: 1000000 samples.*index ([0-9.]+) MB",
                          d.log())
            assert m, d.log()[-2000:]
            assert float(m.group(1)) < 64  # 16 bytes per entry + the paths
            cache = d.workdir
            d.stop()
            # A restarted daemon with the same cache maps the index instead.
            d2 = daemon_factory(workers=1, data_root=root,
                                extra_args=["--index-cache", os.path.join(cache, "index")])
            with stoker.Loader(name, socket=d2.socket, batch_size=16, size=32) as ld:
                assert len(ld) == N // 16
            assert "loaded the cached index of dataset big.tsv: 1000000 samples" in d2.log()
        else:
            d.stop()
    growth_mb = [(b - a) / 1024 for a, b in zip(sorted(grown[0]), sorted(grown[1]))]
    assert max(growth_mb) < 20, f"worker RSS grew by {growth_mb} MB"
