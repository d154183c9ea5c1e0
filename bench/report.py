"""bench.py's report: the tables, chart and prose of bench/RESULTS.md from
the measured runs (bench.py's main() and --report-only call write_results).
No measuring here."""
from __future__ import annotations

import json
import os
import time
import argparse
from typing import Any, Callable, Dict, List, Optional

from configs import (ALL_CONFIGS, BATCH, DL_PREFETCH, EFFICIENCY, RECIPE_OPS, RING_SLOTS,
                     TOOL_SHAPE, WORKERS)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt_rate(s: Dict[str, Any]) -> str:
    return f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"


def fmt_ratio(s: Dict[str, Any]) -> str:
    if "ratio" not in s:
        return "1.00 (baseline)"
    return f"{s['ratio']:.2f} [{s['ratio_min']:.2f}-{s['ratio_max']:.2f}]"


def table_rows(summaries: Dict[str, Dict[str, Dict[str, Any]]]) -> List[List[str]]:
    rows = []
    for ds_name, summ in summaries.items():
        for key in (c[0] for c in ALL_CONFIGS if c[0] in summ):
            s = summ[key]
            cpu = (f"{s['producer_cores']:.2f} / {s['consumer_cores']:.2f}"
                   if s["kind"] not in ("tool", "pil") else
                   f"{s['producer_cores']:.2f} ({TOOL_SHAPE.get(key, (1, 0))[0]} thr.)")
            rows.append([ds_name, s["label"], fmt_rate(s), fmt_ratio(s), cpu,
                         f"{s['per_cpu']:.0f}",
                         f"{s['cpu_ratio']:.2f}" if "cpu_ratio" in s else "1.00"])
    return rows


def text_table(rows: List[List[str]], head: List[str]) -> str:
    w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w[i]) for i, h in enumerate(head)),
             "  ".join("-" * x for x in w)]
    lines += ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join(lines)


def md_table(rows: List[List[str]], head: List[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


HEAD = ["dataset", "config", "images/s median [min-max]", "ratio vs DataLoader [paired min-max]",
        "CPU cores: producers / consumer", "images per CPU-s", "per-CPU ratio"]


SHORT = {"dl_train": "DataLoader\ntrain f32", "stk_train_f32": "stoker\ntrain f32",
         "stk_train_u8": "stoker\ntrain u8", "dl_eval": "DataLoader\neval f32",
         "stk_eval_f32": "stoker\neval f32", "tool_train_f32": "loop 1 thr\ntrain f32",
         "tool_train_u8": "loop 1 thr\ntrain u8", "tool_eval_f32": "loop 1 thr\neval f32",
         "tool2_train_f32": "loop 2 thr\ntrain f32", "dl_v2": "DataLoader\nv2 recipe",
         "stk_v2": "stoker\nv2 recipe", "dl_ra": "DataLoader\nRA recipe",
         "stk_ra": "stoker\nRA recipe", "stk_train_f32_tc": "stoker cache\ntrain f32",
         "stk_eval_f32_tc": "stoker cache\neval f32", "pil_decode": "PIL decode\n1 thr"}


def chart(summaries: Dict[str, Dict[str, Dict[str, Any]]], path: str) -> None:
    """Top row: images/s (median, min-max); bottom row: images per CPU second."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(summaries)
    bars_max = max(sum(k in summ for k in SHORT) for summ in summaries.values())
    fig, axes = plt.subplots(2, n, figsize=(max(7.0, 0.6 * bars_max) * n, 9), squeeze=False)
    colors = {"dl": "#8c8c8c", "stoker": "#d9541e", "tool": "#3b78b0", "stoker_tc": "#8f2d0a",
              "pil": "#c8c8c8"}
    for col, (ds_name, summ) in enumerate(summaries.items()):
        # The loop's recipe rows are left to RESULTS.md's Recipes table.
        keys = [k for k in SHORT if k in summ]
        for row, metric in enumerate(("median", "per_cpu")):
            ax = axes[row][col]
            vals = [summ[k][metric] for k in keys]
            kw: Dict[str, Any] = {}
            if metric == "median":
                kw = dict(yerr=[[summ[k]["median"] - summ[k]["min"] for k in keys],
                                [summ[k]["max"] - summ[k]["median"] for k in keys]], capsize=3)
            bars = ax.bar(range(len(keys)), vals, color=[colors[summ[k]["kind"]] for k in keys],
                          **kw)
            top = max(summ[k]["max"] for k in keys) if metric == "median" else max(vals)
            for b, k in zip(bars, keys):
                s = summ[k]
                ratio = s.get("ratio" if metric == "median" else "cpu_ratio")
                y = s["max"] if metric == "median" else s["per_cpu"]
                txt = f"{s[metric]:.0f}" + (f"\n{ratio:.2f}x" if ratio else "")
                ax.text(b.get_x() + b.get_width() / 2, y, txt, ha="center", va="bottom",
                        fontsize=8)
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels([SHORT[k] for k in keys], fontsize=7)
            ax.set_ylim(0, top * 1.25)
            ax.grid(axis="y", alpha=0.3)
            if metric == "median":
                ax.set_ylabel("images/s (median; bars: min-max)")
                ax.set_title(f"{ds_name}: wall clock, batch {BATCH}, {WORKERS} workers")
            else:
                ax.set_ylabel("images per CPU second")
                ax.set_title(f"{ds_name}: per CPU second (producers + consumer)")
    fig.suptitle("stoker vs torchvision DataLoader (grey: DataLoader, orange: stoker daemon, "
                 "dark red: the daemon with --transcode-cache, blue: stoker's single-thread "
                 "loop, no daemon, light grey: PIL's decode alone, 1 thread); ratios vs "
                 "DataLoader", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def decode_share(tool: Dict[str, Any]) -> float:
    return 100 * tool["decode_ms"] / max(tool["decode_ms"] + tool["augment_ms"], 1e-9)


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def against(value: float, goal: float) -> str:
    """A target of at least `goal`: met, or missed by how much."""
    return verdict(value >= goal) + ("" if value >= goal else
                                     f" by {(1 - value / goal) * 100:.0f}%")


def ratio_against(ratio: float, lo: float, hi: float, cpu_ratio: float, goal: float) -> str:
    """A ratio target, in images/s (with its paired min-max) and per CPU second."""
    return (f"{ratio:.2f}x [{lo:.2f}-{hi:.2f}] — {against(ratio, goal)}. Per CPU second: "
            f"{cpu_ratio:.2f}x ({'met' if cpu_ratio >= goal else 'missed'})")


def write_results(path: str, info: Dict[str, str], args: argparse.Namespace,
                  ds: Dict[str, Any], summaries: Dict[str, Dict[str, Dict[str, Any]]],
                  overhead: Dict[str, Any], mem: Dict[str, Any], elapsed_s: float,
                  params: Dict[str, Any], recipes: Optional[Dict[str, Dict[str, Any]]] = None,
                  opcost: Optional[Dict[str, Any]] = None,
                  raw: Optional[Dict[str, Any]] = None) -> None:
    small, large = summaries["ImageNet-like"], summaries["large photos"]
    recipes = recipes or {}
    loads = params.get("loads", {})
    L: List[str] = []
    a = L.append
    a("# stoker benchmark results")
    a("")
    a(f"Generated by `bench/run.sh{' --quick' if args.quick else ''}` on "
      f"{time.strftime('%Y-%m-%d %H:%M %Z')} in {elapsed_s / 60:.1f} min. "
      "Regenerated on every run; see bench/README.md for how to read it.")
    if args.quick:
        a("")
        a("**Quick (smoke) run: small datasets, few rounds; the figures are indicative only.**")
    a("")
    a("## Machine and versions")
    a("")
    a(f"- CPU: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM; kernel "
      f"{info['kernel']}; {info['os']}. Shared and noisy: every figure is a median with its "
      "min-max over the rounds. Load average (1, 5, 15 min) at the start / end of each "
      "throughput phase: " + "; ".join(
          f"{n} {loads[n]['start']} / {loads[n]['end']}" for n in loads) + ".")
    a(f"- stoker {info['stoker']} (stokerd {info['stokerd']}), Python {info['python']}, "
      f"torch {info['torch']} ({info['torch_threads']} intra-op threads in the main process), "
      f"torchvision {info['torchvision']}, PIL {info['PIL']} (JPEG codec "
      f"{info['pil_jpeg']}), numpy {info['numpy']}, libjpeg-turbo {info['libjpeg_turbo']} "
      "(Debian's libjpeg62-turbo, used by both PIL and stoker).")
    a("")
    a("## Datasets (bench/data/, made by bench/make_data.py)")
    a("")
    for key, title in (("imagenet_like", "ImageNet-like"), ("large", "large photos"),
                       ("large_baseline", "large photos, baseline files"),
                       ("large_progressive", "large photos, progressive files")):
        if key not in ds:
            continue
        st = ds[key]["stats"]
        codings = ", ".join(f"{n} {k}" for k, n in st.get("codings", {}).items())
        content = ", ".join(f"{n} {k}" for k, n in st.get("content", {}).items())
        a(f"- {title}: {st['files']} JPEGs, mean {st['mean_w']:.0f}x{st['mean_h']:.0f} px "
          f"({st['min_mp']:.2f}-{st['max_mp']:.1f} MP, mean {st['mean_mp']:.2f} MP), mean "
          f"{st['mean_kb']:.0f} KB, {st['total_mb']:.0f} MB in all; ImageFolder tree "
          f"(`{os.path.relpath(ds[key]['path'], REPO)}`)"
          + (f"; coded: {codings}; content: {content}; {st['exif_oriented']} with an EXIF "
             "orientation" if codings else "") + ".")
    a("- Manifests for the memory check: 1,000,000 and 100 entries cycling over 50 of the "
      "ImageNet-like files.")
    a("")
    a("## Throughput")
    a("")
    a(f"Batch {BATCH}; {WORKERS} workers on both sides (DataLoader `num_workers=2, "
      f"persistent_workers=True, prefetch_factor={DL_PREFETCH}`, a sampler that runs epochs "
      f"back to back; `stokerd --workers 2`, a ring of {RING_SLOTS} batches). Each "
      "measurement makes a fresh loader (DataLoader workers forked, or a stoker session "
      f"attached: untimed), consumes {params['warmup']} warm-up batches and then more until "
      "one `next()` has to wait for its batch (so that nothing prefetched during the warm-up "
      "is timed), times "
      f"{params['small_batches']} (ImageNet-like) or {params['large_batches']} (each half of "
      "the large photos: baseline files, progressive files) "
      "batches, and closes the loader (so that nothing idle prefetches while another config "
      f"runs). Rounds: {params['rounds_small']} (ImageNet-like), {params['rounds_large']} "
      "(large photos); the configs run interleaved, round-robin, in an order rotated each "
      "round. The consumer reads one element of the images and one label per batch, nothing "
      "else, on both sides. Ratio: of the medians; in brackets, the min-max of the same-round "
      "ratios. CPU cores: CPU seconds per wall second used by the producers (DataLoader "
      "workers, or stokerd + its workers) / by the consuming Python process. Images per "
      "CPU-s: images per CPU second of producers + consumer, the figure least disturbed by "
      "other load on a shared machine; per-CPU ratio: that figure over the DataLoader's, i.e. "
      "the wall-clock ratio both sides would show with the same cores fully theirs. Image-tool rows: `stoker-image-tool bench --threads 1` "
      f"({params['tool_s']:g} s / {params['tool_s_large']:g} s each, files preloaded in "
      "memory), no daemon; their ratio is against DataLoader with 2 workers. The 2-thread "
      "row (`--threads 2 --ring-mb 64`) decodes on both cores at once and writes round a "
      "64 MiB mapping per thread, as the daemon's workers write into its ring.")
    a("")
    rows = table_rows(summaries)
    a(md_table(rows, HEAD))
    a("")
    a("![throughput](results.png)")
    a("")
    a("## Daemon vs its single-process loop")
    a("")
    a("| dataset | daemon config | daemon images/s | 1-thread loop images/s | "
      "daemon / (loop x 2) [paired min-max] | per CPU-s: daemon / loop |")
    a("|---|---|---|---|---|---|")
    for ds_name, summ in summaries.items():
        for dk, tk in EFFICIENCY:
            d, t = summ[dk], summ[tk]
            a(f"| {ds_name} | {d['label']} | {d['median']:.0f} | {t['median']:.0f} | "
              f"{d['efficiency'] * 100:.0f}% [{d['efficiency_min'] * 100:.0f}-"
              f"{d['efficiency_max'] * 100:.0f}%] | {d['cpu_efficiency'] * 100:.0f}% |")
    a("")
    for ds_name, summ in summaries.items():
        t1, t2, d = summ["tool_train_f32"], summ["tool2_train_f32"], summ["stk_train_f32"]
        a(f"- {ds_name}, what 2 cores give: the loop with 2 threads writing into 64 MiB rings "
          f"makes {t2['median']:.0f} images/s (train f32), {t2['median'] / (2 * t1['median']) * 100:.0f}% "
          f"of the 1-thread loop x 2; the daemon makes {d['median'] / t2['median'] * 100:.0f}% "
          "of that.")
    for ds_name, summ in summaries.items():
        tr, ev = summ["tool_train_f32"], summ["tool_eval_f32"]
        a(f"- {ds_name}: the single-thread loop needs {1000 / tr['per_cpu']:.2f} CPU-ms per "
          f"image for train ({decode_share(tr):.0f}% of it decoding, by its own timers), "
          f"{1000 / ev['per_cpu']:.2f} for eval ({decode_share(ev):.0f}% decoding); the daemon "
          f"{1000 / summ['stk_train_f32']['per_cpu']:.2f} (train f32, workers + stokerd + "
          f"consumer); the DataLoader {1000 / summ['dl_train']['per_cpu']:.2f} (train, "
          "workers + consumer).")
    a("")
    if "large progressive" in summaries:
        write_coding(a, summaries, ds, raw or {}, params)
    if recipes:
        write_recipes(a, recipes, params, (raw or {}).get("epochs_small"))
    if opcost:
        write_opcost(a, opcost)
    a("## Consumer overhead per batch")
    a("")
    a("Time inside `next()` of a `stoker.Loader` iterator (batch 256, train, 224x224) when the "
      f"batch is already in the ring: before each burst the ring is let fill ({RING_SLOTS} "
      f"ready slots), then {RING_SLOTS - 1} batches are taken and held, so that no refill "
      "by the daemon competes with the consumer while it is timed:")
    a("")
    for dtype, o in overhead.items():
        a(f"- {dtype} {o['layout'].upper()}: median **{o['median_us']:.0f} µs** (min "
          f"{o['min_us']:.0f}, p90 {o['p90_us']:.0f}, max {o['max_us']:.0f}) over {o['n']} "
          "batches.")
    a("")
    a("## Memory")
    a("")
    dl, st = mem["dataloader"], mem["stoker"]
    mb = lambda kb: f"{kb / 1024:.0f} MB"  # noqa: E731
    a(f"PSS (/proc/PID/smaps_rollup) after {params['mem_batches']} batches of the ImageNet-like "
      "set, train, float32 NCHW, batch 64, 2 workers, each side in a fresh process:")
    a("")
    a("| | producers | consumer process | total |")
    a("|---|---|---|---|")
    a(f"| stoker | stokerd {mb(st['daemon_pss_kb'])} + workers "
      f"{' + '.join(mb(x) for x in st['workers_pss_kb'])} = "
      f"**{mb(st['daemon_total_pss_kb'])}** | {mb(st['consumer_pss_kb'])} | "
      f"{mb(st['total_pss_kb'])} |")
    a(f"| DataLoader | workers {' + '.join(mb(x) for x in dl['workers_pss_kb'])} = "
      f"{mb(sum(dl['workers_pss_kb']))} | {mb(dl['consumer_pss_kb'])} | "
      f"**{mb(dl['total_pss_kb'])}** |")
    a("")
    a(f"stoker's ring ({RING_SLOTS} slots of 64x3x224x224 float32, "
      f"{st['ring_bytes'] / 2**20:.0f} MB of shared memory) is mapped by the daemon's workers "
      "and by the consumer, so its pages are split between them in PSS: stoker's consumer "
      f"is {(st['consumer_pss_kb'] - dl['consumer_pss_kb']) / 1024:.0f} MB above the "
      "DataLoader's main process for that reason (and the gRPC client), while DataLoader "
      "batches live in its workers' shared memory until collected. Both consumers import "
      "torch.")
    a("")
    m1, m2 = mem["manifest_100"], mem["manifest_1m"]
    a("Worker RSS (/proc/PID/status VmRSS) with a session on a 100-entry and on a "
      "1,000,000-entry manifest (a fresh daemon with 2 workers for each, after "
      f"{params['mem_batches']} batches of uint8):")
    a("")
    a("| manifest | attach | worker RSS | stokerd RSS |")
    a("|---|---|---|---|")
    for m in (m1, m2):
        a(f"| {m['entries']:,} entries | {m['attach_s']:.2f} s | "
          f"{', '.join(f'{x / 1024:.1f} MB' for x in m['workers_rss_kb'])} | "
          f"{m['daemon_rss_kb'] / 1024:.1f} MB |")
    g = mem["worker_rss_growth_kb"]
    a(f"| growth | | {', '.join(f'{x / 1024:+.1f} MB' for x in g)} | "
      f"{mem['daemon_rss_growth_kb'] / 1024:+.1f} MB |")
    a("")
    a("## Targets")
    a("")
    tr_s, tr_l = small["stk_train_f32"], large["stk_train_f32"]
    eff = [(n, s["stk_train_f32"]["efficiency"]) for n, s in summaries.items()]
    eff_all = [(n, s[dk]["label"], s[dk]["efficiency"]) for n, s in summaries.items()
               for dk, _ in EFFICIENCY]
    ov = overhead["float32"]["median_us"]
    g_max = max(g) / 1024
    for ds_label, s, goal in (("ImageNet-like", tr_s, 4), ("large photos", tr_l, 8)):
        a(f"- Train ratio vs DataLoader >= {goal}x on {ds_label} (f32 NCHW): "
          + ratio_against(s["ratio"], s["ratio_min"], s["ratio_max"], s["cpu_ratio"], goal)
          + ".")
    a("- Daemon >= 90% of single-thread loop x 2 workers (wall clock): "
      + "; ".join(f"{n} {lab}: {e * 100:.0f}% ({verdict(e >= 0.9)})" for n, lab, e in eff_all)
      + ". Per CPU second (daemon, its workers and the consumer vs the loop): "
      + "; ".join(f"{n} {s[dk]['label']}: {s[dk]['cpu_efficiency'] * 100:.0f}%"
                  for n, s in summaries.items() for dk, _ in EFFICIENCY) + ".")
    for r in recipes.values():
        a(f"- Recipe {r['title']}: ratio vs DataLoader >= 4x on ImageNet-like: "
          + ratio_against(r["ratio"], r["ratio_min"], r["ratio_max"], r["cpu_ratio"], 4)
          + f". Its per-sample ops ({r['left_out']}) add <= 25% to the CPU per image "
          f"(stoker's loop): {fmt_added(r)} — {verdict(r['added'] <= 0.25)}.")
        if "tc_ratio" in r:
            a(f"- Recipe {r['title']}, with --transcode-cache (epoch 2 on): ratio vs DataLoader "
              ">= 4x on ImageNet-like: "
              + ratio_against(r["tc_ratio"], r["tc_ratio_min"], r["tc_ratio_max"],
                              r["tc_cpu_ratio"], 4) + ".")
    if "large progressive" in summaries:
        for line in coding_targets(summaries, ds):
            a(f"- {line}")
    a(f"- Consumer < 100 µs per batch of 256 (f32 NCHW): {ov:.0f} µs — {verdict(ov < 100)}.")
    a(f"- Worker RSS growth < 20 MB, 1M vs 100 entries: max {g_max:+.1f} MB — "
      f"{verdict(g_max < 20)}.")
    a(f"- Daemon PSS < DataLoader's (2 workers, same data): stokerd + workers "
      f"{mb(st['daemon_total_pss_kb'])} vs DataLoader main + workers {mb(dl['total_pss_kb'])} — "
      f"{verdict(st['daemon_total_pss_kb'] < dl['total_pss_kb'])}; counting the consumer too, "
      f"{mb(st['total_pss_kb'])} vs {mb(dl['total_pss_kb'])}; against DataLoader's workers "
      f"alone, {mb(st['daemon_total_pss_kb'])} vs {mb(sum(dl['workers_pss_kb']))}.")
    a("")
    a("## Notes")
    a("")
    for note in notes(summaries, overhead, mem, info, eff, recipes):
        a(f"- {note}")
    a("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def _ratio(s: Dict[str, Any], key: str) -> str:
    """`key`'s ratio vs DataLoader with its paired min-max, or n/a."""
    x = s.get(key)
    return (f"{x['ratio']:.2f} [{x['ratio_min']:.2f}-{x['ratio_max']:.2f}]"
            if x and "ratio" in x else "n/a")


def _rate(s: Dict[str, Any], key: str) -> str:
    x = s.get(key)
    return f"{x['median']:.1f}" if x else "n/a"


def loop_vs_pil(s: Dict[str, Any]) -> float:
    """PIL's full decode time per image over stoker's loop's (eval, 1 thread)."""
    return s["tool_eval_f32"]["median"] / s["pil_decode"]["median"]


def coding_targets(summaries: Dict[str, Any], ds: Dict[str, Any]) -> List[str]:
    """Issue 17's targets: the large set (>= 40% progressive), the progressive files alone."""
    out = []
    mix, prog = summaries["large photos"], summaries["large progressive"]
    share = ds["large"]["stats"].get("progressive", 0) / ds["large"]["stats"]["files"]
    for pipeline, goal in (("train", 3.5), ("eval", 6.0)):
        for key, what in ((f"stk_{pipeline}_f32", "without the transcode cache"),
                          (f"stk_{pipeline}_f32_tc", "with --transcode-cache, epoch 2 on")):
            if key not in mix:
                out.append(f"Large photos ({share * 100:.0f}% progressive), {pipeline} >= "
                           f"{goal:g}x DataLoader, {what}: not measured (stokerd has no "
                           "--transcode-cache).")
                continue
            r = mix[key]["ratio"]
            out.append(f"Large photos ({share * 100:.0f}% progressive), {pipeline} f32 >= "
                       f"{goal:g}x DataLoader, {what}: {r:.2f}x — {against(r, goal)} "
                       f"(per CPU second {mix[key]['cpu_ratio']:.2f}x).")
    r = loop_vs_pil(prog)
    out.append(f"Progressive files alone, eval, stoker's loop (1 thread) >= 5x faster than PIL's "
               f"full decode per image: {r:.2f}x ({1000 / prog['tool_eval_f32']['median']:.0f} "
               f"vs {1000 / prog['pil_decode']['median']:.0f} ms) — {against(r, 5)}.")
    return out


def epoch_costs(e: Dict[str, Any], digits: int, why_epoch1: str) -> str:
    """One set's epoch times from first_epochs(): without a cache, then the
    cache's first (`why_epoch1` says what it does) and second epochs, with
    their change against the first."""
    n0, c1, c2 = (e[k]["seconds"] for k in ("no_cache", "tc_epoch1", "tc_epoch2"))
    return (f"without a cache {n0:.{digits}f} s; with the cache, epoch 1 {c1:.{digits}f} s "
            f"({(c1 / n0 - 1) * 100:+.0f}%{why_epoch1}), epoch 2 {c2:.{digits}f} s "
            f"({(c2 / n0 - 1) * 100:+.0f}%)")


def write_coding(a: Callable[[str], None], summaries: Dict[str, Any], ds: Dict[str, Any],
                 raw: Dict[str, Any], params: Dict[str, Any]) -> None:
    """RESULTS.md's section on baseline vs progressive large photos (issue 17)."""
    a("## Large photos: baseline vs progressive files")
    a("")
    nb = ds["large_baseline"]["stats"]["files"]
    npg = ds["large_progressive"]["stats"]["files"]
    tc = raw.get("transcode_cache")
    a(f"The large set's {nb} baseline and {npg} progressive files are measured apart, each "
      "set in the same rotated round-robin as above (the rows `large baseline` and `large "
      "progressive` of the throughput table); the `large photos` rows are computed from "
      "them, round by round: per image the times and the CPU add, so the whole set makes "
      "1 / (share_b / rate_b + share_p / rate_p) images/s. Both sides see the same files "
      "and the same transforms; stoker's sessions here keep the epoch's last partial batch "
      "(a set is about one batch per epoch). "
      + ("Transcode cache: a second `stokerd --workers 2 --transcode-cache DIR` (an empty "
         "DIR each run); one untimed epoch of each set goes through it before its rounds, so "
         "the `--transcode-cache` rows are epoch 2 on, where every progressive file has its "
         "baseline copy." if tc else
         "This stokerd has no `--transcode-cache`: the cache rows are missing."))
    a("")
    a("| set | DataLoader train | stoker train (ratio) | stoker train, transcode cache (ratio) "
      "| DataLoader eval | stoker eval (ratio) | stoker eval, transcode cache (ratio) |")
    a("|---|---|---|---|---|---|---|")
    for name in ("large baseline", "large progressive", "large photos"):
        s = summaries[name]
        a(f"| {name}{' (computed)' if name == 'large photos' else ''} | "
          f"{_rate(s, 'dl_train')} | {_rate(s, 'stk_train_f32')} ({_ratio(s, 'stk_train_f32')}) "
          f"| {_rate(s, 'stk_train_f32_tc')} ({_ratio(s, 'stk_train_f32_tc')}) | "
          f"{_rate(s, 'dl_eval')} | {_rate(s, 'stk_eval_f32')} ({_ratio(s, 'stk_eval_f32')}) | "
          f"{_rate(s, 'stk_eval_f32_tc')} ({_ratio(s, 'stk_eval_f32_tc')}) |")
    a("")
    a("Images/s, medians over the rounds; ratios vs the DataLoader on the same set, with the "
      "same-round min-max.")
    a("")
    a("| set | mean MP | stoker's loop, eval, ms per image (decode share) | loop, train | "
      "PIL full decode, ms per image | PIL decode / loop eval | DataLoader CPU-ms per image, "
      "train / eval |")
    a("|---|---|---|---|---|---|---|")
    for name, key in (("large baseline", "large_baseline"),
                      ("large progressive", "large_progressive")):
        s = summaries[name]
        ev, tr, pil = s["tool_eval_f32"], s["tool_train_f32"], s["pil_decode"]
        a(f"| {name} | {ds[key]['stats']['mean_mp']:.1f} | {1000 / ev['median']:.1f} "
          f"({decode_share(ev):.0f}%) | {1000 / tr['median']:.1f} ({decode_share(tr):.0f}%) | "
          f"{1000 / pil['median']:.1f} | {loop_vs_pil(s):.2f}x | "
          f"{1000 / s['dl_train']['per_cpu']:.0f} / {1000 / s['dl_eval']['per_cpu']:.0f} |")
    a("")
    a(f"The loop: `stoker-image-tool bench --threads 1` ({params['tool_s_large']:g} s a run, "
      "files in memory, 224x224 float32 NCHW); PIL: `Image.open(BytesIO(data)).load()` "
      "in one thread, files in memory (the decode each DataLoader worker does before "
      "`convert` and the transforms), the same seconds. Each round both loops read the same "
      "list of the set's files, rotated to start elsewhere each round (a run does not get "
      "through a set of large photos).")
    a("")
    epochs = raw.get("epochs") or {}
    for key, e in epochs.items():
        a(f"- {key.replace('_', ' ')}, one eval epoch (batch 16, one session, "
          f"{e['tc_epoch1']['images']} images): "
          + epoch_costs(e, 1, ": the workers write the copies" if "progressive" in key else
                        ": nothing to copy") + ".")
    tcs = (raw.get("tc_status_end") or {}).get("transcode_cache")
    if isinstance(tcs, dict):
        g = lambda k: float(tcs.get(k, 0) or 0)  # noqa: E731  (uint64s come as strings)
        a(f"- The cache at the end of the run: {g('entries'):.0f} copies, "
          f"{g('bytes') / 2**20:.0f} MiB; {g('hits'):.0f} hits, {g('misses'):.0f} misses "
          f"(hit rate {g('hit_rate') * 100:.0f}%), {g('writes'):.0f} copies written in "
          f"{g('transcode_seconds'):.1f} s of the workers' time, {g('bad_entries'):.0f} bad "
          f"entries, {g('write_failures') + g('writes_refused'):.0f} writes failed or refused.")
    elif raw.get("tc_status_end"):
        a(f"- The cache daemon's status at the end: `{json.dumps(raw['tc_status_end'])}`.")
    rows = []
    for name in ("large baseline", "large progressive"):
        key = "runs_" + name.replace(" ", "_")
        for cfg in ("tool_train_f32", "tool_eval_f32"):  # the loop's own count, same form
            runs = (raw.get(key) or {}).get(cfg) or []
            tp = runs[-1].get("paths") if runs else None
            if tp:
                rows.append(f"| {name} | {cfg} | " + "; ".join(
                    f"{k} {int(v.get('images', 0))} ({float(v.get('decode_ms', 0)):.1f} ms)"
                    for k, v in tp.items() if int(v.get("images", 0) or 0)) + " |")
        for cfg in ("stk_train_f32", "stk_eval_f32", "stk_train_f32_tc", "stk_eval_f32_tc"):
            runs = (raw.get(key) or {}).get(cfg) or []
            paths = runs[-1].get("session", {}).get("decode_paths") if runs else None
            if paths:
                rows.append(f"| {name} | {cfg} | " + "; ".join(
                    f"{p.get('path')} {int(p.get('samples', 0))} "
                    f"({float(p.get('mean_decode_ms', 0)):.1f} ms)"
                    for p in paths if int(p.get("samples", 0) or 0)) + " |")
    if rows:
        a("")
        a("Decode paths (the loop's own counts, and the daemon's status per session; each "
          "config's last round): samples and mean decode time per sample.")
        a("")
        a("| set | config | path samples (mean decode ms) |")
        a("|---|---|---|")
        for r in rows:
            a(r)
    a("")
    write_perf(a, raw.get("perf") or {})
    write_restart(a, raw.get("restart"))


def write_perf(a: Callable[[str], None], perf: Dict[str, Any]) -> None:
    if not perf:
        return
    a("### Where the time goes: perf profiles of the loop")
    a("")
    a("`perf record -F 999` of `stoker-image-tool bench --threads 1` (files in memory, 224x224 "
      "float32), one run per row. Debian's libjpeg is stripped of its static functions: "
      "their samples are put to the source module they lie in (the exported function that "
      "follows them in the library names it; past the last one lie the SIMD kernels). The "
      "kernel's share includes the loop's start-up (reading the files into memory: "
      "`_copy_to_iter` and page faults) and, on progressive files, the page faults of "
      "libjpeg's whole-image coefficient buffer (2 bytes per coefficient, ~27 MB at 9 MP "
      "4:2:0), allocated and zeroed afresh for every image.")
    a("")
    for key, p in perf.items():
        if p.get("error"):
            a(f"- {key}: {p['error']}.")
            continue
        tops = "; ".join(f"{t['what']} {t['share']:.0f}%" for t in p["top"][:8] if t["share"] >= 1)
        a(f"- {key.replace('_', ' ')} ({p['images_per_s']:.1f} images/s, decode "
          f"{p['decode_ms']:.1f} + augment {p['augment_ms']:.1f} ms per image): libjpeg "
          f"{p['libjpeg']:.0f}% of the samples (Huffman decoding {p['huffman']:.0f}%), stoker "
          f"{p['stoker']:.0f}%, kernel {p['kernel']:.0f}%. Top: {tops}.")
    a("")


def write_restart(a: Callable[[str], None], r: Optional[Dict[str, Any]]) -> None:
    if not r:
        return
    a("### Restart markers and what skipping rows and columns saves")
    a("")
    a(f"{r['files']} of the large baseline files (mean {r['mean_mp']:.1f} MP) re-coded by "
      "`jpegtran -optimize` without restart markers, with `-restart 1` (a marker every MCU "
      "row) and with `-restart 4B` (a marker every 4 MCUs, as hardware encoders place them); "
      "the same coefficients. stoker's loop, `--exact` (no DCT scaling), decode time per "
      "image by its own timers (medians); the last column counts the train crops that took "
      "the `restart_window` path:")
    a("")
    a("| file | full decode, ms | train crop (RandomResizedCrop), ms | crop / full | "
      "crops on restart_window |")
    a("|---|---|---|---|---|")
    seeked = r.get("seeked", {})
    for sub, title in (("plain", "no restart markers"), ("rst", "restart marker every MCU row"),
                       ("rst4b", "restart marker every 4 MCUs")):
        if f"{sub}_full" not in r:
            continue
        f, c = r[f"{sub}_full"], r[f"{sub}_crop"]
        n, of = seeked.get(sub, 0), seeked.get(f"{sub}_of", 0)
        # A --quick run's short turns may time no whole decode of a large photo.
        share = f"{c / f * 100:.0f}%" if f > 0 else "n/a"
        a(f"| {title} | {f:.1f} | {c:.1f} | {share} | "
          f"{100 * n / of if of else 0:.0f}% |")
    a("")
    a("What libjpeg-turbo 2.1.5 does (jdapistd.c, jdcoefct.c): `jpeg_skip_scanlines` on a "
      "single-scan (baseline) file still Huffman-decodes every MCU of the skipped iMCU rows "
      "(`decode_mcu(cinfo, NULL)`, coefficients discarded) and leaves out only their "
      "dequantization, IDCT, upsampling and color conversion; rows after the crop's last one "
      "are not read at all (stoker stops there). `jpeg_crop_scanline` still entropy-decodes "
      "every MCU of each row it reads and runs the IDCT only on the crop's columns. Neither "
      "uses restart markers to jump. stoker does (`JpegDecoder::Window`, "
      "server/image/decode/jpeg_restart.h): on a file with restart markers it finds each "
      "interval by its marker, without Huffman decoding, and decodes a cut copy holding only "
      "the intervals from one MCU row above the crop down and, when the interval divides an "
      "MCU row, only those from one MCU column beside it, bit-equal to the whole file inside "
      "the crop. With a marker every MCU row only the rows above the crop are left out; with "
      "one every 4 MCUs the columns beside it too. On progressive (multi-scan) files every "
      "scan of the whole image is entropy-decoded in `jpeg_start_decompress` into the "
      "coefficient buffer, before any row is skipped or cropped: skipping saves only the "
      "IDCT and what follows (stoker's answers there are the DC scans at 1/8 and the "
      "transcode cache).")
    a("")


def write_opcost(a: Callable[[str], None], opcost: Dict[str, Any]) -> None:
    """RESULTS.md's op-cost table (a run that measured it; older results.json have none)."""
    a("## Op costs (us per 224x224 image, stoker-image-tool opcost)")
    a("")
    a(f"`stoker-image-tool opcost --input {opcost['file']} --size 224 --seconds "
      f"{opcost['seconds_per_op']:g}`, run once after the throughput rounds with nothing else "
      "of the benchmark running: for each op, the steps [resize to 224x224 (antialias)] and "
      "the same + that op's steps with fixed typical parameters, run alternately on one "
      "ImageNet-like file; the cost is the median over the iterations of the op's augment "
      "time less the baseline's median (decoding excluded: it is not augment time). Output "
      "uint8 NHWC, float32 NCHW for the erase rows (a box of a third of the image, as "
      "RandomErasing runs on the recipes' float tensor). One process, one thread, on a shared "
      "machine: the small figures are within the noise of a few µs.")
    a("")
    a("| op | µs per image | iterations | baseline µs | output |")
    a("|---|---|---|---|---|")
    for d in opcost.get("ops", []):
        a(f"| {d['op']} | {float(d['us']):.1f} | {int(d['iterations'])} | "
          f"{float(d.get('baseline_us', 0)):.0f} | {d.get('output', '')} |")
    a("")


def write_recipes(a: Callable[[str], None], recipes: Dict[str, Dict[str, Any]],
                  params: Dict[str, Any], raw_epochs: Optional[Dict[str, Any]] = None) -> None:
    """RESULTS.md's Recipes section (a run that measured them)."""
    a("## Recipes")
    a("")
    a("torchvision's training recipes on the ImageNet-like set, in the same round-robin as the "
      "configs above (the `dl_v2`, `stk_v2`, `dl_ra`, `stk_ra` and image-tool recipe rows of "
      "the throughput table). Each side is given the very same `T.Compose` object: "
      "`ImageFolder(transform=...)` + DataLoader (2 workers, batch 64) and "
      "`stoker.Loader(transform=...)` (batch 64), which reads it into stoker's ops. "
      "v2: `RandomResizedCrop(176, BILINEAR), RandomHorizontalFlip(), "
      "TrivialAugmentWide(interpolation=BILINEAR), PILToTensor(), "
      "ConvertImageDtype(torch.float), Normalize(mean, std), RandomErasing(p=0.1)` "
      "(torchvision's reference recipe); rand-m9: `RandomResizedCrop(224), "
      "RandomHorizontalFlip(), RandAugment(num_ops=2, magnitude=9), ToTensor(), "
      "Normalize(mean, std)`. CPU per image: CPU-ms per image of stokerd + its workers + the "
      "consumer (the daemon), and of `stoker-image-tool bench --threads 1` (the loop, files in "
      f"memory, {params['tool_s']:g} s per run) on the op list stoker's mapping reads from the "
      "Compose (`--keywords`), with it and without the policy ops (the same crop, flip and "
      "float32 output): added CPU is the median of the same-round ratios less 1 [min-max].")
    a("")
    kws = params.get("recipe_keywords") or {}
    for pipeline in (p for p in kws if "-" not in p):
        left_out = [n for op in kws[pipeline]["ops"] for n in op if n in RECIPE_OPS]
        a(f"- `{pipeline}`, as stoker's mapping reads the Compose (the loop's `--keywords`; "
          f"its baseline leaves out {' and '.join(left_out)}): `{json.dumps(kws[pipeline])}`")
    if kws:
        a("")
    a("| recipe | DataLoader images/s | stoker images/s | ratio [paired min-max] | "
      "per-CPU ratio | stoker CPU-ms per image (daemon) | loop CPU-ms per image without / "
      "with the policy ops | ops' added CPU [min-max] |")
    a("|---|---|---|---|---|---|---|---|")
    for r in recipes.values():
        a(f"| {r['title']} | {r['dl']:.0f} | {r['stoker']:.0f} | {r['ratio']:.2f} "
          f"[{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | {r['cpu_ratio']:.2f} | "
          f"{r['stoker_cpu_ms']:.2f} | {r['loop_base_cpu_ms']:.2f} / {r['loop_cpu_ms']:.2f} | "
          f"{fmt_added(r)} |")
    a("")
    cached = [r for r in recipes.values() if "tc_ratio" in r]
    if cached:
        a("With `--transcode-cache` (the `stk_v2_tc` and `stk_ra_tc` rows: the second "
          "daemon, epoch 2 on, where the set's progressive files are decoded from their "
          "lossless baseline copies, the same pixels):")
        a("")
        a("| recipe | DataLoader images/s | stoker images/s, cache | ratio [paired min-max] | "
          "per-CPU ratio | stoker CPU-ms per image (daemon) |")
        a("|---|---|---|---|---|---|")
        for r in cached:
            a(f"| {r['title']} | {r['dl']:.0f} | {r['tc']:.0f} | {r['tc_ratio']:.2f} "
              f"[{r['tc_ratio_min']:.2f}-{r['tc_ratio_max']:.2f}] | {r['tc_cpu_ratio']:.2f} | "
              f"{r['tc_cpu_ms']:.2f} |")
        a("")
    if raw_epochs:
        a(f"What the cache costs on this set, one eval epoch each (batch 16, "
          f"{raw_epochs['tc_epoch1']['images']} images): "
          + epoch_costs(raw_epochs, 2, ": the workers write the copies of the progressive "
                        "files") + ".")
        a("")
    for r in recipes.values():
        a(f"- {r['title']}: the DataLoader needs {r['dl_cpu_ms']:.2f} CPU-ms per image "
          f"(workers + consumer), stoker's daemon {r['stoker_cpu_ms']:.2f}. In the loop, "
          f"the ops the baseline leaves out ({r['left_out']}) cost "
          f"{r['loop_cpu_ms'] - r['loop_base_cpu_ms']:.2f} CPU-ms per image (by the loop's "
          f"own timers, its augment time goes from {r['loop_base_augment_ms']:.2f} to "
          f"{r['loop_augment_ms']:.2f} ms per image, decoding unchanged).")
    a("")


def fmt_added(r: Dict[str, Any]) -> str:
    return (f"{r['added'] * 100:+.0f}% [{r['added_min'] * 100:+.0f}%, "
            f"{r['added_max'] * 100:+.0f}%]")


def notes(summaries, overhead, mem, info, eff, recipes=None) -> List[str]:
    """Observations computed from this run's numbers (so that they stay true when rerun)."""
    out = []
    for r in (recipes or {}).values():
        out.append(
            f"Recipe {r['title']}: {r['ratio']:.2f}x in images/s, {r['cpu_ratio']:.2f}x per CPU "
            f"second. With the same cores on both sides the ratio is the DataLoader's CPU per "
            f"image over stoker's: {r['dl_cpu_ms']:.2f} / {r['loop_cpu_ms']:.2f} ms = "
            f"{r['dl_cpu_ms'] / r['loop_cpu_ms']:.1f}x with the loop's, "
            f"{r['dl_cpu_ms'] / r['stoker_cpu_ms']:.1f}x with the daemon's. Decoding, the same "
            f"libjpeg-turbo on both sides, is {r['loop_decode_share']:.0f}% of the loop's "
            "time per image by its own timers (with the policy ops), and bounds the ratio "
            "however fast the ops are."
            + (f" With --transcode-cache (epoch 2 on), where the set's progressive files "
               f"(the costliest to decode) come from their baseline copies, stoker's daemon "
               f"needs {r['tc_cpu_ms']:.2f} CPU-ms per image: {r['tc_ratio']:.2f}x in "
               f"images/s." if "tc_ratio" in r else ""))
    small, large = summaries["ImageNet-like"], summaries["large photos"]
    for name, s in summaries.items():
        d, st = s["dl_train"], s["stk_train_f32"]
        if abs(st["ratio"] - st["cpu_ratio"]) > 0.25 * st["cpu_ratio"]:
            out.append(
                f"{name}, wall clock vs CPU: the train ratio is {st['ratio']:.2f}x in images/s "
                f"but {st['cpu_ratio']:.2f}x per CPU second, because during their turns "
                f"stoker's producers got {st['producer_cores']:.2f} cores and the "
                f"DataLoader's workers {d['producer_cores']:.2f} of the {info['cores']} "
                "(the machine was shared; see the load averages). On a machine of its own each "
                f"side would have both cores: expect a ratio near {st['cpu_ratio']:.1f}x "
                "there, not the wall-clock one.")
    for name, s in summaries.items():
        d, t, st = s["dl_train"], s["tool_train_f32"], s["stk_train_f32"]
        out.append(
            f"{name}, where the time goes (train, CPU-ms per image): DataLoader "
            f"{1000 / d['per_cpu']:.1f}; stoker's loop {1000 / t['per_cpu']:.1f} "
            f"({decode_share(t):.0f}% of it in the JPEG decoder); the daemon "
            f"{1000 / st['per_cpu']:.1f} (its workers, stokerd and the consumer). Both sides "
            "decode with the same libjpeg-turbo, so the ratio is bounded by what stoker saves "
            "besides decoding (PIL's resize, ToTensor, Normalize, collate, pickling through "
            "shared memory) and by what it avoids decoding (rows and columns outside the "
            "crop, DCT scaling): at most "
            f"{t['per_cpu'] / d['per_cpu']:.1f}x with the loop's cost per image, "
            f"{st['cpu_ratio']:.1f}x with the daemon's.")
    st_train = small["stk_train_f32"]
    out.append(
        f"Daemon overhead over its loop (per CPU second): train f32 "
        f"{small['stk_train_f32']['cpu_efficiency'] * 100:.0f}% / u8 "
        f"{small['stk_train_u8']['cpu_efficiency'] * 100:.0f}% of the loop's images per "
        f"CPU-s on ImageNet-like, {large['stk_train_f32']['cpu_efficiency'] * 100:.0f}% / "
        f"{large['stk_train_u8']['cpu_efficiency'] * 100:.0f}% on large photos. A daemon "
        "worker reads each file (the loop has them in memory: ~0.05 ms), gets each task "
        "and returns each result over a socket, shares the cores with stokerd and the "
        "consumer, and writes into a ring much larger than the caches (the 1-thread loop "
        "writes into one buffer that stays in cache; non-temporal stores were tried and did "
        "not help here). The 2-thread loop above, which writes beyond the caches too, is the "
        "fairer ceiling. Three causes found with perf were fixed: a page fault per 4 KiB of "
        "each slot (workers now map rings with MAP_POPULATE), stokerd waking every waiting "
        "thread on each result (a third of its CPU), and readahead waking all 16 of its "
        "threads on each dispatched sample and re-reading files already cached (0.16 cores "
        "on a warm dataset, now 0.04). In wall-clock terms, "
        f"the {info['cores']} cores are also shared with the consumer, stokerd and the rest "
        f"of the machine: stoker's producers got {st_train['producer_cores']:.2f} cores, the "
        "single-thread loop "
        f"{small['tool_train_f32']['producer_cores']:.2f} during its turn.")
    dl_l, tl = large["dl_train"], large["tool_train_f32"]
    out.append(
        f"Large photos: stoker decodes only the crop's rows and columns and uses libjpeg's "
        f"DCT scaling when the crop is much larger than the output ({1000 / tl['per_cpu']:.0f} "
        f"CPU-ms per image in its loop); torchvision decodes every pixel "
        f"with PIL (no `draft()`) and then crops and resizes ({1000 / dl_l['per_cpu']:.0f} "
        "CPU-ms per image). What remains for stoker is mostly entropy (Huffman) decoding, "
        "which DCT scaling does not shorten and which must run through every row above the "
        f"crop's last one. Eval: {large['stk_eval_f32']['ratio']:.1f}x "
        f"({large['stk_eval_f32']['cpu_ratio']:.1f}x per CPU-s).")
    u8, f32 = small["stk_train_u8"], small["stk_train_f32"]
    out.append(
        f"uint8 NHWC vs float32 NCHW (ImageNet-like train, daemon): {u8['median']:.0f} vs "
        f"{f32['median']:.0f} images/s, {u8['per_cpu']:.0f} vs {f32['per_cpu']:.0f} images "
        "per CPU-s (float32 writes 4x the bytes into the ring and normalizes).")
    o = overhead["float32"]
    out.append(
        f"Consumer overhead: median {o['median_us']:.0f} µs, p90 {o['p90_us']:.0f} µs per "
        "batch of 256 float32 (zero copy: the tensor is a view of the ring slot; `next()` "
        "is the native call plus the Loader's Python bookkeeping and `torch.from_numpy`). "
        "The tail is scheduling noise on a busy 2-core machine.")
    g = mem["worker_rss_growth_kb"]
    out.append(
        f"Manifest of 1M vs 100 entries: worker RSS {', '.join(f'{x / 1024:+.1f}' for x in g)} "
        f"MB, stokerd's own RSS {mem['daemon_rss_growth_kb'] / 1024:+.1f} MB (it holds the "
        f"index), attach {mem['manifest_1m']['attach_s']:.2f} s vs "
        f"{mem['manifest_100']['attach_s']:.2f} s.")
    return out
