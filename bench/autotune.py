#!/usr/bin/python3
"""stokerd --workers auto against every fixed worker count, side by side.

    /usr/bin/python3 bench/autotune.py [--quick] [--rounds N] [--seconds S]
        [--steps 0,20,50,200] [--merge] [--build build] [--data bench/data] [--out bench]

Writes bench/AUTOTUNE.md (and the raw numbers in bench/out/autotune.json);
bench/run.sh runs it after bench/formats.py. It uses bench/make_data.py's
sets (bench/run.sh makes them): ImageNet-like (train 224 f32 NCHW, batch 64) and the
large photos (train 224 f32 NCHW, batch 16: a batch of 64 of them takes
seconds, so every step time is data-bound there).

For each set, each consumer and each daemon configuration (`--workers N` for
N = 1 .. the CPUs, and `--workers auto`), in an order rotated each round, a
fresh stokerd is started and one stoker.Loader consumes from it:
  * the consumer models a GPU step: after each batch it sleeps the step time
    (0: none, as fast as it can), using no CPU, as a GPU-bound trainer's main
    process mostly does; so the daemon runs with --reserve-cpus 0 (its
    default leaves one core to each trainer process, which would make auto
    stop one worker short of the machine here);
  * fixed counts: a 3 s warm-up, then `--seconds` measured;
  * auto: it starts from one worker; the warm-up lasts until no decision was
    made for 8 s (at most 60 s): the time of its last decision is its
    convergence time; then `--seconds` measured, as for the fixed counts;
  * the order rotates each round, so a number of rounds that is a multiple
    of the configurations gives each one every place equally often (the
    script warns otherwise);
  * a measurement starts at an epoch's first batch and ends at an epoch's
    last, `--seconds` at least: every configuration sees the same images
    (the large photos' cost varies tenfold from one to the next).
Measured: images/s (batches taken x batch / wall time) and the producers'
CPU (stokerd, its live workers and the workers it retired and reaped, from
/proc) per image. Per consumer: the best
fixed count by images/s (medians over the rounds), auto's images/s as a share
of it (target >= 95%) and auto's CPU per image as a share of that count's
(target <= 105%), and how many workers auto settled on. The best fixed count
is the fewest workers within 1% of the most images/s (more workers than that
only cost CPU).

--merge measures only the steps given and keeps the other rows of the last
run (bench/out/autotune.json), each row saying when and over how many rounds
it was measured: a row whose figures sit within this machine's run-to-run
spread can be measured again over more rounds without redoing the table.

Nothing here asserts a timing (the tests do not either): AUTOTUNE.md says
whether the targets were met on this machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (Daemon, CPU accounting, machine_info, log, tables)

SETS = [  # (name, folder under --data, batch)
    ("ImageNet-like", "imagenet_like", 64),
    ("large photos", "large", 16),
]


def producers_cpu(d) -> float:
    """CPU seconds of stokerd (its reaped children, i.e. retired workers,
    included: cutime + cstime) and of its live workers."""
    try:
        with open(f"/proc/{d.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        own = sum(int(x) for x in fields[11:15]) / bench.CLK
    except (OSError, IndexError, ValueError):
        own = 0.0
    return own + sum(bench.cpu_seconds(p) for p in d.worker_pids())


def run_one(build: str, root: str, rel: str, batch: int, workers: str, step_s: float,
            seconds: float, log_path: str) -> Dict[str, Any]:
    import stoker
    d = bench.Daemon(build, root, workers, log_path,
                     ["--reserve-cpus", "0", "--decode-calibration", "off"])
    try:
        ld = stoker.Loader(rel, socket=d.socket, batch_size=batch, pipeline="train",
                           dtype="float32", layout="nchw", ring_slots=4, timeout_ms=180000,
                           client_name=f"autotune-{workers}", drop_last=True)
        per_epoch = len(ld)  # batches
        taken = 0

        def take():
            nonlocal taken
            batch = next(it)
            taken += 1
            time.sleep(step_s)
            return batch

        it = iter(_forever(ld))
        t0 = time.monotonic()
        converged_s = 0.0
        # Warm-up: fixed, 3 s; auto, until 8 s pass without a decision.
        while True:
            take()
            now = time.monotonic() - t0
            if workers != "auto":
                if now >= 3:
                    break
                continue
            at = d.status()["autotune"]
            last = at["decisions"][-1]["at_seconds"] if at.get("decisions") else 0.0
            up = float(d.status()["uptime_seconds"])
            if up - last >= 8 or now >= 60:
                converged_s = last
                break
        # Measured over whole epochs, from an epoch's start: every
        # configuration sees the same images (large photos vary 10x in cost).
        while taken % per_epoch != 0:
            take()
        cpu0 = producers_cpu(d)
        w0 = time.monotonic()
        images = 0
        while time.monotonic() - w0 < seconds or taken % per_epoch != 0:
            images += len(take()[1])
        wall = time.monotonic() - w0
        cpu = producers_cpu(d) - cpu0
        at = d.status()["autotune"]
        ld.close()
        return dict(images_per_s=images / wall, cpu_per_image_ms=1000 * cpu / max(1, images),
                    cpu_cores=cpu / wall, workers=int(at["workers"]),
                    converged_s=converged_s, decisions=len(at.get("decisions", [])))
    finally:
        d.stop()


def _forever(ld):
    while True:
        yield from ld


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--steps", default="0,20,50,200", help="ms per batch, comma-separated")
    ap.add_argument("--quick", action="store_true", help="one round, 4 s, ImageNet-like only")
    ap.add_argument("--merge", action="store_true",
                    help="keep the last run's rows for the steps not measured now")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    if args.quick:
        args.rounds, args.seconds = 1, 4
    steps = [float(s) for s in args.steps.split(",")]
    data = os.path.abspath(args.quick and os.path.join(args.data, "quick") or args.data)
    sets = SETS[:1] if args.quick else SETS
    cpus = os.cpu_count() or 1
    configs = [str(n) for n in range(1, cpus + 1)] + ["auto"]
    if args.rounds % len(configs) != 0:
        # The order rotates each round: only a multiple of the configurations
        # gives each one every place in the order equally often (a machine
        # that slows over a round otherwise favours some).
        bench.log(f"!! {args.rounds} rounds over {len(configs)} configurations: the places in "
                  f"the order are unbalanced; give a multiple of {len(configs)}")
    out_dir = os.path.join(args.out, "out")
    os.makedirs(out_dir, exist_ok=True)
    log_path = os.path.join(out_dir, "autotune-stokerd.log")
    info = bench.machine_info(build)
    started = time.time()
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    meta: Dict[str, Dict[str, Any]] = {}  # per row: when and how it was measured
    old: Dict[str, Any] = {}
    if args.merge and os.path.exists(os.path.join(out_dir, "autotune.json")):
        with open(os.path.join(out_dir, "autotune.json")) as f:
            old = json.load(f)
    for r in range(args.rounds):
        for name, rel, batch in sets:
            if not os.path.isdir(os.path.join(data, rel)):
                raise SystemExit(f"no {os.path.join(data, rel)}: run bench/make_data.py first")
            for step in steps:
                key = f"{name}|{step:g}"
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for cfg in order:
                    res = run_one(build, data, rel, batch, cfg, step / 1000, args.seconds,
                                  log_path)
                    bench.log(f"round {r + 1} {name} step {step:g} ms workers {cfg}: "
                              f"{res['images_per_s']:.0f} img/s, {res['cpu_per_image_ms']:.2f} "
                              f"CPU-ms/img, {res['workers']} workers")
                    runs.setdefault(key, {}).setdefault(cfg, []).append(res)
    when = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    for key in runs:
        meta[key] = dict(rounds=args.rounds, seconds=args.seconds, at=when)
    all_steps = list(steps)
    for key, r in old.get("runs", {}).items():
        if key in runs:
            continue
        runs[key] = r
        meta[key] = old.get("meta", {}).get(key, dict(old.get("run", {}), at="earlier"))
        step = float(key.split("|")[1])
        if step not in all_steps:
            all_steps.append(step)
    with open(os.path.join(out_dir, "autotune.json"), "w") as f:
        json.dump(dict(info=info, runs=runs, meta=meta,
                       run=dict(rounds=args.rounds, seconds=args.seconds, at=when)), f, indent=1)
    write(os.path.join(args.out, "AUTOTUNE.md"), info, args, runs, configs, sets,
          sorted(all_steps), time.time() - started, meta)
    return 0


def med(rs: List[Dict[str, Any]], k: str) -> float:
    return statistics.median(x[k] for x in rs)


def write(path: str, info: Dict[str, str], args, runs, configs, sets, steps,
          took_s: float, meta: Dict[str, Dict[str, Any]]) -> None:
    lines = [
        "# stokerd --workers auto against fixed worker counts", "",
        f"Generated by `bench/autotune.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {took_s / 60:.1f} min ({args.rounds} round(s), {args.seconds:g} s measured per "
        "configuration"
        + (", the other rows kept from the previous run: the `measured` column says when"
           if args.merge else "")
        + "). Regenerated on every run; the module's docstring says how it measures.",
        "",
        f"- CPU: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM; {info['os']}; "
        f"stokerd {info['stokerd']}; load average at the end: {bench.loadavg()}.",
        "- Consumer: one stoker.Loader (train, 224 f32 NCHW) that sleeps the step time after "
        "each batch (a modelled GPU step, no CPU); stokerd --reserve-cpus 0.",
        "",
        "Images/s (medians over the rounds) and the producers' CPU-ms per image; auto: the "
        "workers it settled on and when its last decision was made.", "",
    ]
    head = ["set", "step ms/batch"] + [f"{c} worker(s)" for c in configs[:-1]] + [
        "auto", "auto workers", "converged at", "auto / best fixed (target >= 95%)",
        "auto CPU / best's (target <= 105%)", "measured"]
    rows = []
    verdicts = []
    for name, _, batch in sets:
        for step in steps:
            key = f"{name}|{step:g}"
            r = runs.get(key, {})
            if not r:
                continue
            fixed = {c: (med(r[c], "images_per_s"), med(r[c], "cpu_per_image_ms"))
                     for c in configs[:-1]}
            # The best: the fewest workers within 1% of the most images/s.
            top = max(v[0] for v in fixed.values())
            best = next(c for c in configs[:-1] if fixed[c][0] >= 0.99 * top)
            a_rate, a_cpu = med(r["auto"], "images_per_s"), med(r["auto"], "cpu_per_image_ms")
            share = a_rate / fixed[best][0]
            cpu_share = a_cpu / fixed[best][1]
            rows.append([f"{name} (batch {batch})", f"{step:g}"] +
                        [f"{fixed[c][0]:.0f} ({fixed[c][1]:.2f} ms)" for c in configs[:-1]] +
                        [f"{a_rate:.0f} ({a_cpu:.2f} ms)",
                         "/".join(str(x["workers"]) for x in r["auto"]),
                         "/".join(f"{x['converged_s']:.0f} s" for x in r["auto"]),
                         f"{100 * share:.0f}% of {best}", f"{100 * cpu_share:.0f}%",
                         "{} x {:g} s, {}".format(meta.get(key, {}).get("rounds", "?"),
                                                  meta.get(key, {}).get("seconds", 0),
                                                  meta.get(key, {}).get("at", "?"))])
            verdicts.append(
                f"- {name}, step {step:g} ms: auto {100 * share:.0f}% of the best fixed count "
                f"({best}) — {'**met**' if share >= 0.95 else '**missed**'}; CPU per image "
                f"{100 * cpu_share:.0f}% of its — {'**met**' if cpu_share <= 1.05 else '**missed**'}.")
    lines.append(bench.md_table(rows, head))
    lines += ["", "## Targets", ""] + verdicts + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    bench.log(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
