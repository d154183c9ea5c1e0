#!/usr/bin/python3
"""stoker vs torchvision DataLoader: throughput, consumer overhead, memory.

    /usr/bin/python3 bench/bench.py [--quick] [--rounds-small 5] [--rounds-large 3]
        [--build build] [--data bench/data] [--out bench]

Normally started by bench/run.sh (which installs and builds first). See
bench/README.md for what each configuration measures and how to read the
output. Everything runs in this process tree: the stoker daemon and the
DataLoader workers are our children; the configurations of one dataset run
interleaved, round-robin (a rotated order each round), so that drift on a
noisy machine hits every side alike. Nothing here asserts a timing.

On the ImageNet-like set the configurations include torchvision's training
recipes (v2: TrivialAugmentWide + RandomErasing; rand-m9: RandAugment), one
Compose given to both sides, and stoker's loop with and without the recipes'
policy ops (their CPU cost per image); for each recipe a line
``recipe NAME images/s ratio vs DataLoader: X.XX ...`` comes before the last.

The large photos are measured as two sets, their baseline files and their
progressive files (the whole set's rows are computed from the two), with PIL's
decode alone beside stoker's loop and, where stokerd has --transcode-cache, a
second daemon with a fresh cache (its rows from the second epoch on; the first
epoch's cost timed apart); then perf profiles of the loop and a check of what
skipping rows and columns saves with and without restart markers (issue 17).

The last line printed is ``train images/s ratio vs DataLoader: X.XX``
(ImageNet-like set, train pipeline, float32 NCHW on both sides).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_data  # noqa: E402
from configs import (ALL_CONFIGS, BATCH, CFG, CONFIGS, DL_PREFETCH, EFFICIENCY,  # noqa: E402,F401
                     LARGE_CONFIGS, MEAN, PIL_CONFIG, RECIPE_CONFIGS, RECIPE_KEYS, RECIPE_OPS,
                     RECIPE_TC_CONFIGS, RECIPES, RING_SLOTS, SMALL_CONFIGS, SMALL_TC_CONFIGS,
                     STD, TC_CONFIGS, TOOL_SHAPE, WORKERS)
from report import (HEAD, chart, coding_targets, decode_share, fmt_rate,  # noqa: E402,F401
                    fmt_ratio, md_table, table_rows, text_table, verdict, write_results)

# The harness (harness.py), re-exported: the other scripts use bench.X.
from harness import (CLK, BLOCKED_S, CycleSampler, Daemon, DataLoaderSource, _cmd,  # noqa: E402,F401
                     StokerSource, cpu_seconds, loadavg, log, machine_info, measure, proc_kb,
                     pss_kb, recipe_keywords, recipe_transform, rss_kb, side_by_side,
                     torchvision_transform, touch)
# The measurements beside the daemon's loop (tool_runs.py).
from tool_runs import (epoch_time, first_epochs, first_jpeg, jpeg_paths, time_each,  # noqa: E402,F401
                       libjpeg_module, libjpeg_symbols, mix_runs, restart_check, rotated_list,
                       run_opcost, run_perf, run_pil, run_tool, status_fields,
                       transcode_supported)


# ---------------------------------------------------------------------------
# Throughput, interleaved




def is_recipe(pipeline: str) -> bool:
    return pipeline.partition("-")[0] in RECIPES


def throughput(name: str, root: str, rel: str, daemon: Daemon, build: str, rounds: int,
               warmup: int, batches: int, tool_s: float,
               configs: Optional[List[Tuple]] = None, daemon_tc: Optional[Daemon] = None,
               drop_last: bool = True,
               lists_dir: Optional[str] = None) -> Dict[str, List[Dict[str, float]]]:
    """Runs every config of `configs` (default CONFIGS) `rounds` times,
    round-robin; returns {key: [run, ...]}. Configs of kind "stoker_tc" run
    on `daemon_tc` (the one with --transcode-cache). `drop_last`: of stoker's
    sessions (False for sets of about one batch per epoch, which would
    otherwise leave the same files out of every eval epoch). `lists_dir`:
    the loops read a rotated list of the files there each round
    (rotated_list()), for sets that one run does not get through."""
    configs = CONFIGS if configs is None else configs
    load0 = loadavg()
    log(f"==> {name}: {rounds} rounds x {len(configs)} configs "
        f"({batches} batches of {BATCH} after warm-up; tools {tool_s:g} s)")
    # The recipes' pipelines as stoker's mapping reads their Composes (what
    # the loop runs; the Loader reads the same Compose the same way).
    keywords = {c[3]: recipe_keywords(c[3]) for c in configs
                if c[2] == "tool" and is_recipe(c[3])}
    for pipeline, kw in keywords.items():
        log(f"    {pipeline}: {json.dumps(kw)}")
    runs: Dict[str, List[Dict[str, float]]] = {c[0]: [] for c in configs}
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        t_round = time.monotonic()
        files = rotated_list(root, r, rounds, lists_dir) if lists_dir else root
        for key, label, kind, pipeline, dtype, layout, _ in order:
            t0 = time.monotonic()
            if kind == "tool":
                threads, ring_mb = TOOL_SHAPE.get(key, (1, 0))
                res = run_tool(build, files, pipeline, dtype, layout, tool_s, threads=threads,
                               ring_mb=ring_mb, keywords=keywords.get(pipeline))
            elif kind == "pil":
                res = run_pil(files, tool_s)
            else:
                recipe = recipe_transform(pipeline) if is_recipe(pipeline) else None
                d = daemon_tc if kind == "stoker_tc" else daemon
                src = (DataLoaderSource(root, torchvision_transform(pipeline),
                                        shuffle=pipeline != "eval") if kind == "dl" else
                       StokerSource(d, rel, pipeline, dtype, layout, f"bench-{key}",
                                    transform=recipe, drop_last=drop_last))
                try:
                    res = measure(src, warmup, batches)
                    if kind != "dl":
                        res["session"] = src.session_status()
                finally:
                    src.close()
                    del src
                    gc.collect()
                if kind != "dl":
                    d.check_alive()
            res["round"] = r
            res["wall_s"] = time.monotonic() - t0
            runs[key].append(res)
        line = "  ".join(f"{k}={runs[k][-1]['images_per_s']:.0f}" for k, *_ in configs)
        log(f"    round {r + 1}/{rounds} ({time.monotonic() - t_round:.0f} s): {line}")
    runs["_load"] = [dict(start=load0, end=loadavg())]  # type: ignore[list-item]
    if keywords:
        runs["_keywords"] = [keywords]  # type: ignore[list-item]
    return runs


def summarize(runs: Dict[str, List[Dict[str, float]]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for key in runs:
        if key.startswith("_"):
            continue
        for x in runs[key]:
            x["images_per_cpu_s"] = x["images_per_s"] / max(
                x["producer_cores"] + x["consumer_cores"], 1e-9)
    # The configs this run measured (an older results.json has no recipes).
    for key, label, kind, pipeline, dtype, layout, base in (c for c in ALL_CONFIGS
                                                            if c[0] in runs):
        v = [x["images_per_s"] for x in runs[key]]
        s: Dict[str, Any] = dict(label=label, kind=kind, median=statistics.median(v), min=min(v),
                                 max=max(v), n=len(v),
                                 producer_cores=statistics.median(
                                     x["producer_cores"] for x in runs[key]),
                                 consumer_cores=statistics.median(
                                     x["consumer_cores"] for x in runs[key]),
                                 per_cpu=statistics.median(
                                     x["images_per_cpu_s"] for x in runs[key]))
        if base:
            bv = [x["images_per_s"] for x in runs[base]]
            s["ratio"] = s["median"] / statistics.median(bv)
            paired = [a / b for a, b in zip(v, bv)]  # same round
            s["ratio_min"], s["ratio_max"] = min(paired), max(paired)
            s["cpu_ratio"] = s["per_cpu"] / statistics.median(
                x["images_per_cpu_s"] for x in runs[base])
        if kind == "tool":
            s["decode_ms"] = statistics.median(x["decode_ms"] for x in runs[key])
            s["augment_ms"] = statistics.median(x["augment_ms"] for x in runs[key])
        out[key] = s
    for daemon_key, tool_key in EFFICIENCY:
        if daemon_key not in out or tool_key not in out:
            continue
        d = out[daemon_key]
        d["efficiency"] = d["median"] / (out[tool_key]["median"] * WORKERS)
        paired = [a["images_per_s"] / (b["images_per_s"] * WORKERS)
                  for a, b in zip(runs[daemon_key], runs[tool_key])]
        d["efficiency_min"], d["efficiency_max"] = min(paired), max(paired)
        # The same per CPU second: robust to other load on the machine.
        d["cpu_efficiency"] = d["per_cpu"] / out[tool_key]["per_cpu"]
    return out


def summarize_recipes(runs: Dict[str, List[Dict[str, float]]],
                      summ: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per recipe measured (after summarize(), which adds images_per_cpu_s to
    the runs): both sides' images/s and their ratio, the daemon's CPU per
    image, and the CPU per image of stoker's loop with and without the
    recipe's RECIPE_OPS: `added` is what those ops add, the median of the
    same-round ratios less 1, with their min-max."""
    out: Dict[str, Dict[str, Any]] = {}
    for recipe, (title, dk, sk, tk, bk, left_out, ck) in RECIPE_KEYS.items():
        if not all(k in summ for k in (dk, sk, tk, bk)):
            continue
        d, st, t, b = summ[dk], summ[sk], summ[tk], summ[bk]
        # CPU-s per image with / without = images per CPU-s without / with.
        added = [without["images_per_cpu_s"] / with_["images_per_cpu_s"] - 1
                 for with_, without in zip(runs[tk], runs[bk])]
        out[recipe] = dict(
            title=title, left_out=left_out, dl=d["median"], stoker=st["median"],
            ratio=st["ratio"], ratio_min=st["ratio_min"], ratio_max=st["ratio_max"],
            cpu_ratio=st["cpu_ratio"], dl_cpu_ms=1000 / d["per_cpu"],
            stoker_cpu_ms=1000 / st["per_cpu"], loop_cpu_ms=1000 / t["per_cpu"],
            loop_base_cpu_ms=1000 / b["per_cpu"], added=statistics.median(added),
            added_min=min(added), added_max=max(added),
            loop_augment_ms=t["augment_ms"], loop_base_augment_ms=b["augment_ms"],
            loop_decode_share=decode_share(t))
        if ck in summ:  # measured on the transcode-cache daemon too
            c = summ[ck]
            out[recipe].update(tc=c["median"], tc_ratio=c["ratio"], tc_ratio_min=c["ratio_min"],
                               tc_ratio_max=c["ratio_max"], tc_cpu_ratio=c["cpu_ratio"],
                               tc_cpu_ms=1000 / c["per_cpu"])
    return out


# ---------------------------------------------------------------------------
# Consumer overhead: time inside next() when the batch is already in the ring


def next_overhead(daemon: Daemon, rel: str, refills: int) -> Dict[str, Any]:
    """Times next() on batches already in the ring. Before each burst the ring
    is let fill completely; the burst then takes RING_SLOTS - 1 batches and
    holds them, so that the daemon's workers stay idle (no refill competes
    with the consumer for the CPU) while next() is timed."""
    log(f"==> consumer overhead: next() on a full ring, batch 256, {refills} refills")
    res: Dict[str, Any] = {}
    for dtype, layout in (("float32", "nchw"), ("uint8", "nhwc")):
        name = f"bench-next-{dtype}"
        src = StokerSource(daemon, rel, "train", dtype, layout, name, batch_size=256)
        samples: List[float] = []
        try:
            touch(src.next())
            for _ in range(refills):
                deadline = time.monotonic() + 120
                ready = 0
                while True:
                    st = daemon.status()
                    sess = [s for s in st["sessions"] if s["client_name"] == name]
                    if not sess:
                        raise RuntimeError(
                            f"session {name} vanished from the daemon's status "
                            f"(sessions_reclaimed={st.get('sessions_reclaimed')}); see "
                            f"{daemon.log_path}")
                    ready = int(sess[0]["ring_ready"])
                    if ready >= RING_SLOTS:
                        break
                    if time.monotonic() > deadline:
                        log(f"!! the ring did not fill within 120 s: {sess[0]}")
                        break
                    time.sleep(0.05)
                held = []
                for _ in range(min(ready, RING_SLOTS - 1)):
                    t0 = time.perf_counter_ns()
                    b = src.next()
                    t1 = time.perf_counter_ns()
                    samples.append((t1 - t0) / 1000)
                    held.append(b)
                    del b
                del held
        finally:
            src.close()
        samples.sort()
        if not samples:
            raise RuntimeError("no batch was ever ready in the ring: see the log above")
        res[dtype] = dict(median_us=statistics.median(samples), min_us=samples[0],
                          max_us=samples[-1], p90_us=samples[int(0.9 * (len(samples) - 1))],
                          n=len(samples), layout=layout)
        log(f"    {dtype} {layout}: median {res[dtype]['median_us']:.0f} us "
            f"[{samples[0]:.0f}-{samples[-1]:.0f}] over {len(samples)} batches")
    return res


# ---------------------------------------------------------------------------
# Memory


def _mem_child(args: argparse.Namespace) -> int:
    """In a fresh interpreter: iterate a loader, then report PSS/RSS as JSON."""
    import torch  # noqa: F401  (both consumers pay for torch)
    out: Dict[str, Any] = {}
    if args.mem_child == "dl":
        src = DataLoaderSource(args.root, torchvision_transform("train"), shuffle=True)
        for _ in range(args.batches):
            touch(src.next())
        pids = src.producer_pids()
        out["consumer_pss_kb"] = pss_kb(os.getpid())
        out["workers_pss_kb"] = [pss_kb(p) for p in pids]
        out["workers_rss_kb"] = [rss_kb(p) for p in pids]
        src.close()
    else:
        import stoker
        ld = stoker.Loader(args.rel, socket=args.socket, batch_size=BATCH, pipeline="train",
                           dtype="float32", layout="nchw", ring_slots=RING_SLOTS,
                           timeout_ms=180000, client_name="bench-mem")
        it = (b for _ in iter(int, 1) for b in ld)  # across epochs
        for _ in range(args.batches):
            touch(next(it))
        time.sleep(0.5)  # let the ring refill: all slots mapped and written
        st = stoker.Client(args.socket).status()
        dpid, wpids = int(st["pid"]), [int(w["pid"]) for w in st["workers"]]
        out["consumer_pss_kb"] = pss_kb(os.getpid())
        out["daemon_pss_kb"] = pss_kb(dpid)
        out["daemon_rss_kb"] = rss_kb(dpid)
        out["workers_pss_kb"] = [pss_kb(p) for p in wpids]
        out["workers_rss_kb"] = [rss_kb(p) for p in wpids]
        out["ring_bytes"] = int(st["sessions"][0]["ring_bytes"]) if st["sessions"] else 0
        ld.close()
    print("MEM " + json.dumps(out), flush=True)
    return 0


def _run_mem_child(extra: List[str]) -> Dict[str, Any]:
    r = subprocess.run([sys.executable, os.path.abspath(__file__)] + extra, capture_output=True,
                       text=True, timeout=600)
    for line in r.stdout.splitlines():
        if line.startswith("MEM "):
            return json.loads(line[4:])
    raise RuntimeError(f"memory child {extra} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


def memory(build: str, data_root: str, ds: Dict[str, Any], out_dir: str,
           batches: int) -> Dict[str, Any]:
    log("==> memory")
    res: Dict[str, Any] = {}
    small_rel = os.path.relpath(ds["imagenet_like"]["path"], data_root)
    # PSS, same dataset (ImageNet-like, train, f32 NCHW, batch 64, 2 workers).
    res["dataloader"] = _run_mem_child(["--mem-child", "dl", "--root", ds["imagenet_like"]["path"],
                                        "--batches", str(batches)])
    d = Daemon(build, data_root, WORKERS, os.path.join(out_dir, "stokerd-mem.log"))
    try:
        res["stoker"] = _run_mem_child(["--mem-child", "stoker", "--socket", d.socket,
                                        "--rel", small_rel, "--batches", str(batches)])
    finally:
        d.stop()
    dl, st = res["dataloader"], res["stoker"]
    dl["total_pss_kb"] = dl["consumer_pss_kb"] + sum(dl["workers_pss_kb"])
    st["daemon_total_pss_kb"] = st["daemon_pss_kb"] + sum(st["workers_pss_kb"])
    st["total_pss_kb"] = st["daemon_total_pss_kb"] + st["consumer_pss_kb"]
    log(f"    PSS: stoker daemon+workers {st['daemon_total_pss_kb'] / 1024:.0f} MB "
        f"(+ consumer {st['consumer_pss_kb'] / 1024:.0f} MB); DataLoader main+workers "
        f"{dl['total_pss_kb'] / 1024:.0f} MB (workers {sum(dl['workers_pss_kb']) / 1024:.0f} MB)")
    # Worker RSS with a 100-entry and a 1,000,000-entry manifest (fresh daemon each).
    import stoker
    for key in ("manifest_100", "manifest_1m"):
        rel = os.path.relpath(ds[key]["path"], data_root)
        d = Daemon(build, data_root, WORKERS, os.path.join(out_dir, "stokerd-mem.log"))
        try:
            t0 = time.monotonic()
            ld = stoker.Loader(rel, socket=d.socket, batch_size=BATCH, pipeline="train",
                               dtype="uint8", ring_slots=RING_SLOTS, timeout_ms=180000,
                               client_name=f"bench-{key}")
            ld.attach()
            attach_s = time.monotonic() - t0
            it = (b for _ in iter(int, 1) for b in ld)  # across epochs
            for _ in range(batches):
                touch(next(it))
            time.sleep(0.5)
            wp = d.worker_pids()
            it.close()
            res[key] = dict(entries=ds[key]["entries"], attach_s=attach_s,
                            dataset_size=int(ld.info["dataset_size"]),
                            workers_rss_kb=[rss_kb(p) for p in wp],
                            workers_pss_kb=[pss_kb(p) for p in wp],
                            daemon_rss_kb=rss_kb(d.pid), daemon_pss_kb=pss_kb(d.pid))
            ld.close()
        finally:
            d.stop()
        m = res[key]
        log(f"    {key}: dataset_size {m['dataset_size']}, attach {attach_s:.2f} s, worker RSS "
            f"{[round(x / 1024, 1) for x in m['workers_rss_kb']]} MB, daemon RSS "
            f"{m['daemon_rss_kb'] / 1024:.1f} MB")
    a, b = res["manifest_100"], res["manifest_1m"]
    res["worker_rss_growth_kb"] = [y - x for x, y in zip(a["workers_rss_kb"], b["workers_rss_kb"])]
    res["daemon_rss_growth_kb"] = b["daemon_rss_kb"] - a["daemon_rss_kb"]
    return res


# ---------------------------------------------------------------------------
# Report


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (~1-2 minutes)")
    ap.add_argument("--rounds-small", type=int, default=None)
    ap.add_argument("--rounds-large", type=int, default=None)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=HERE, help="where RESULTS.md and results.png go")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md and results.png from bench/out/results.json")
    # internal: memory children
    ap.add_argument("--mem-child", choices=["dl", "stoker"], help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--rel", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--batches", type=int, default=10, help=argparse.SUPPRESS)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    if args.mem_child:
        return _mem_child(args)
    if args.report_only:
        with open(os.path.join(HERE, "out", "results.json")) as f:
            return report(json.load(f), args)

    t_start = time.monotonic()
    q = args.quick
    params = dict(rounds_small=args.rounds_small or (2 if q else 5),
                  rounds_large=args.rounds_large or (1 if q else 3),
                  warmup=WORKERS, small_batches=6 if q else 20,
                  large_batches=2, tool_s=1.0 if q else 4.0,
                  tool_s_large=1.5 if q else 3.0, refills=3 if q else 12,
                  mem_batches=5 if q else 10, perf_s=1.5 if q else 4.0,
                  restart_s=0.5 if q else 2.0, restart_repeats=1 if q else 3)
    data_root = os.path.abspath(args.data)
    out_dir = os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    ds = make_data.make_all(data_root, quick=q)
    small_rel = os.path.relpath(ds["imagenet_like"]["path"], data_root)

    import torch  # noqa: F401
    import stoker  # noqa: F401
    info = machine_info(build)
    log(f"==> {info['cpu']}, {info['cores']} cores, kernel {info['kernel']}; stoker "
        f"{info['stoker']}, torch {info['torch']}, torchvision {info['torchvision']}, "
        f"PIL {info['PIL']}")

    daemon_log = os.path.join(out_dir, "stokerd.log")
    daemon = Daemon(build, data_root, WORKERS, daemon_log)
    # A second daemon with a transcode cache (issue 17), fresh and empty for
    # this run, where stokerd has the option; it idles while others run.
    tc_dir = os.path.join(out_dir, "transcode-cache")
    shutil.rmtree(tc_dir, ignore_errors=True)
    daemon_tc: Optional[Daemon] = None
    raw: Dict[str, Any] = dict(params=params, info=info)
    try:
        if transcode_supported(build):
            daemon_tc = Daemon(build, data_root, WORKERS, os.path.join(out_dir, "stokerd-tc.log"),
                               ["--transcode-cache", tc_dir])
            # Its first session, untimed (baseline files: nothing to cache).
            epoch_time(daemon_tc, os.path.relpath(ds["large_baseline"]["path"], data_root),
                       "bench-warm")
        else:
            log("==> stokerd has no --transcode-cache: measuring without it")
        raw["transcode_cache"] = daemon_tc is not None
        if daemon_tc:
            # Fills the cache with the set's copies (and measures what that costs).
            raw["epochs_small"] = first_epochs(daemon, daemon_tc, small_rel, "imagenet_like")
        runs_small = throughput("ImageNet-like", ds["imagenet_like"]["path"], small_rel, daemon,
                                build, params["rounds_small"], params["warmup"],
                                params["small_batches"], params["tool_s"],
                                configs=SMALL_CONFIGS + (SMALL_TC_CONFIGS if daemon_tc else []),
                                daemon_tc=daemon_tc)
        # The large photos, baseline and progressive files apart (the mix of
        # the whole set is computed from the two, per round: mix_runs()).
        large_configs = LARGE_CONFIGS + (TC_CONFIGS if daemon_tc else [])
        epochs: Dict[str, Any] = {}
        for key, name in (("large_baseline", "large baseline"),
                          ("large_progressive", "large progressive")):
            rel = os.path.relpath(ds[key]["path"], data_root)
            if daemon_tc:
                epochs[key] = first_epochs(daemon, daemon_tc, rel, key)
            raw[f"runs_{key}"] = throughput(
                name, ds[key]["path"], rel, daemon, build, params["rounds_large"],
                params["warmup"], params["large_batches"], params["tool_s_large"],
                configs=large_configs, daemon_tc=daemon_tc, drop_last=False,
                lists_dir=os.path.join(out_dir, "lists"))
        raw["epochs"] = epochs
        if daemon_tc:
            raw["tc_status_end"] = status_fields(daemon_tc.status())
        overhead = next_overhead(daemon, small_rel, params["refills"])
        st = daemon.status()
        raw["daemon_status_end"] = dict(
            samples_failed_total=st.get("samples_failed_total"),
            worker_restarts_total=st.get("worker_restarts_total"),
            sessions_reclaimed=st.get("sessions_reclaimed"),
            workers=[{k: w.get(k) for k in ("pid", "restarts", "crashes", "samples_done",
                                              "samples_failed")} for w in st["workers"]])
    finally:
        daemon.stop()
        if daemon_tc:
            daemon_tc.stop()
    # Each op's cost, on one ImageNet-like file (a few seconds, nothing else running).
    raw["opcost"] = run_opcost(build, first_jpeg(ds["imagenet_like"]["path"]),
                               0.1 if q else 0.25)
    # Where the time goes on progressive files (and, for contrast, baseline
    # ones): perf profiles of the loop; then what skipping rows and columns
    # saves on baseline files with and without restart markers.
    log("==> perf profiles of the loop (progressive eval and train, baseline eval)")
    raw["perf"] = {f"{key}_{pipeline}": run_perf(build, ds[key]["path"], pipeline,
                                                 params["perf_s"],
                                                 os.path.join(out_dir, f"perf-{key}.data"))
                   for key, pipeline in (("large_progressive", "eval"),
                                         ("large_progressive", "train"),
                                         ("large_baseline", "eval"))}
    log("==> restart markers: full decode vs train crop (--exact), without and with")
    raw["restart"] = restart_check(build, ds["restart"], params["restart_s"],
                                   params["restart_repeats"])
    end = raw["daemon_status_end"]
    if any(int(end.get(k) or 0) for k in ("samples_failed_total", "worker_restarts_total",
                                           "sessions_reclaimed")):
        log(f"!! the daemon reported failures or restarts: {raw['daemon_status_end']}")
    mem = memory(build, data_root, ds, out_dir, params["mem_batches"])
    raw.update(runs_small=runs_small, overhead=overhead, memory=mem,
               datasets=ds, elapsed_s=time.monotonic() - t_start, quick=q)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(raw, f, indent=1)
    return report(raw, args)


def report(raw: Dict[str, Any], args: argparse.Namespace) -> int:
    """Summarizes the raw runs; prints the table; writes RESULTS.md and results.png."""
    params, info, ds = raw["params"], raw["info"], raw["datasets"]
    runs_small = raw["runs_small"]
    overhead, mem = raw["overhead"], raw["memory"]
    args.quick = raw.get("quick", args.quick)
    parts = {"large baseline": raw.get("runs_large_baseline"),
             "large progressive": raw.get("runs_large_progressive")}
    if all(parts.values()):
        # The whole large set, from its two parts (see mix_runs).
        runs_large = mix_runs([(parts["large baseline"], ds["large_baseline"]["stats"]["files"]),
                               (parts["large progressive"],
                                ds["large_progressive"]["stats"]["files"])])
    else:  # a results.json from before issue 17: the set was measured whole
        runs_large, parts = raw["runs_large"], {}
    params["loads"] = {"ImageNet-like": runs_small.pop("_load")[0]}
    params["loads"].update({n: p.pop("_load")[0] for n, p in parts.items()})
    runs_large.pop("_load")
    params["recipe_keywords"] = runs_small.pop("_keywords", [{}])[0]
    summaries = {"ImageNet-like": summarize(runs_small), "large photos": summarize(runs_large)}
    summaries.update({n: summarize(p) for n, p in parts.items()})
    # Empty for a results.json from before the recipes: no Recipes section.
    recipes = summarize_recipes(runs_small, summaries["ImageNet-like"])
    os.makedirs(args.out, exist_ok=True)
    chart({k: v for k, v in summaries.items() if k != "large photos" or not parts},
          os.path.join(args.out, "results.png"))
    elapsed = raw["elapsed_s"]
    write_results(os.path.join(args.out, "RESULTS.md"), info, args, ds, summaries, overhead, mem,
                  elapsed, params, recipes, raw.get("opcost"), raw)
    rows = table_rows(summaries)
    log("")
    log(text_table(rows, HEAD))
    log("")
    for name, summ in summaries.items():
        for dk, tk in EFFICIENCY:
            d = summ[dk]
            log(f"{name}: {d['label']} = {d['efficiency'] * 100:.0f}% of 2 x single-thread loop")
    o = overhead["float32"]
    log(f"consumer next() on a ready batch of 256 (f32): median {o['median_us']:.0f} us")
    log(f"worker RSS growth 1M vs 100 entries: "
        f"{[round(x / 1024, 1) for x in mem['worker_rss_growth_kb']]} MB; PSS stokerd+workers "
        f"{mem['stoker']['daemon_total_pss_kb'] / 1024:.0f} MB vs DataLoader main+workers "
        f"{mem['dataloader']['total_pss_kb'] / 1024:.0f} MB")
    for name, r in recipes.items():
        log(f"recipe {name} images/s ratio vs DataLoader: {r['ratio']:.2f} "
            f"(per CPU-s {r['cpu_ratio']:.2f}; stoker {r['stoker']:.0f}, DataLoader "
            f"{r['dl']:.0f}); its per-sample ops ({r['left_out']}) add {r['added'] * 100:+.0f}% "
            f"CPU per image in stoker's loop ({r['loop_base_cpu_ms']:.2f} -> "
            f"{r['loop_cpu_ms']:.2f} ms)")
    if "large progressive" in summaries:
        for line in coding_targets(summaries, ds):
            log(line.replace("**", ""))
    log(f"wrote {os.path.relpath(os.path.join(args.out, 'RESULTS.md'))}, "
        f"{os.path.relpath(os.path.join(args.out, 'results.png'))} in {elapsed / 60:.1f} min")
    log(f"train images/s ratio vs DataLoader: "
        f"{summaries['ImageNet-like']['stk_train_f32']['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
