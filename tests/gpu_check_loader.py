"""GPU check, Python half: stoker.Loader(device='cuda') against a running
stokerd, run by scripts/gpu-check.sh with the module it built for the
device's own Python.

  1. feed rate: images/s of Loader(device='cuda', dtype='float16') with a
     stand-in model step, against the same daemon's CPU-only rate (the same
     Loader, device=None, no model); target >= 90% (decode-bound).
  2. device normalize vs the daemon's: the same seeded batches, float32, on
     the GPU (uint8 copied, normalized by the client's kernel) and on the CPU
     (normalized by the daemon).
  3. any-size images padded on the device (pad_to_multiple) vs the CPU.
  4. MixUp and CutMix on CUDA tensors vs the same draws on the CPU tensors,
     float32 and float16, NCHW and NHWC: bit-equal; and a Loader with
     batch_transform= on CUDA vs on the CPU, same seed: the same mixes.

Prints RESULT|name|value|target|status lines; exit 1 if a check failed.
Usage: gpu_check_loader.py SOCKET DATASET BATCH [--stand-in] [--seconds S]
  --stand-in: CPU tensors for 'cuda' (a dry run of this script's logic on a
  machine without a GPU: tests/python/test_gpu_check_script.py; its rates
  mean nothing). --seconds: each rate's timed window (default 8).
"""

import argparse
import hashlib  # noqa: F401  (before stoker: ssl and hashlib load this Python's own
import ssl  # noqa: F401      libcrypto, not the bundle's Debian one)
import sys
import time

import torch

import gpu_check_report
import stoker
from gpu_check_report import result


def forever(loader):
    """The loader's batches, epoch after epoch (each iter() is one epoch)."""
    while True:
        yield from loader


def rate(socket, dataset, batch, device, seconds, model=None):
    """images/s over `seconds` after a warm-up of 5 batches."""
    with stoker.Loader(dataset, socket=socket, batch_size=batch, device=device,
                       dtype="float16", epochs=None, timeout_ms=60000) as loader:
        it = forever(loader)
        for _ in range(5):
            x, _ = next(it)
            if model is not None:
                model(x).float().mean()
        if device is not None:
            torch.cuda.synchronize()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            x, _ = next(it)
            if model is not None:
                model(x).float().mean()
            n += x.shape[0]
        if device is not None:
            torch.cuda.synchronize()
        mode = loader.device_status["mode"] if device is not None else "cpu"
        return n / (time.perf_counter() - t0), mode


def max_diff(on_device, on_cpu):
    """The largest absolute difference between a device batch and a CPU one."""
    return float((on_device.cpu() - on_cpu).abs().max())


def pairs(socket, dataset, device, n, **kw):
    """Yields the first n batches of a seeded epoch on `device` and on the CPU
    (the CPU's are views of the ring: compare them before the next)."""
    kw = dict(socket=socket, epochs=1, seed=3, **kw)
    with stoker.Loader(dataset, device=device, **kw) as g, stoker.Loader(dataset, **kw) as c:
        for k, ((xg, yg), (xc, yc)) in enumerate(zip(g, c)):
            yield xg, yg, xc, yc, g.last_image_sizes == c.last_image_sizes
            if k + 1 == n:
                return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("dataset")
    ap.add_argument("batch", type=int)
    ap.add_argument("--stand-in", action="store_true")
    ap.add_argument("--seconds", type=float, default=8)
    args = ap.parse_args()
    socket, dataset, batch, stand_in = args.socket, args.dataset, args.batch, args.stand_in
    if not stand_in and not torch.cuda.is_available():
        result("Loader(device='cuda')", "torch.cuda.is_available() is False", "-", "SKIP")
        return 0
    device = "cpu" if stand_in else "cuda"
    loader_device = None if stand_in else "cuda"
    result("Python module", f"torch {torch.__version__}, {stoker.cuda_status()}", "-", "INFO")

    # 1. Feed rate against the CPU-only rate of the same daemon.
    model = torch.nn.Conv2d(3, 16, 3, stride=4).to(device)
    model = model.half() if not stand_in else model.float()
    step = model if not stand_in else (lambda x: model(x.float()))
    cpu, _ = rate(socket, dataset, batch, None, args.seconds)
    gpu, mode = rate(socket, dataset, batch, loader_device, args.seconds, step)
    share = 100 * gpu / cpu
    result(f"Loader(device='cuda') fp16 + model step, batch {batch}",
           f"{gpu:,.0f} images/s = {share:.0f}% of CPU-only ({cpu:,.0f}/s); {mode}",
           ">= 90% (decode-bound)", "PASS" if share >= 90 else "FAIL")

    # 2. The device's normalize against the daemon's.
    worst, same = 0.0, True
    for xg, yg, xc, yc, _ in pairs(socket, dataset, loader_device, 6, batch_size=32,
                                   dtype="float32"):
        same &= xg.device.type == device and bool(torch.equal(yg.cpu(), yc))
        worst = max(worst, max_diff(xg, xc))
    result("Loader float32 on the device vs normalized by the daemon",
           f"6 batches of 32, max diff {worst:.2e}", "<= 1e-6, same labels",
           "PASS" if same and worst <= 1e-6 else "FAIL")

    # 3. Images of their own sizes, padded on the device.
    ops = [{"RandomShortestSize": {"min_size": [96, 128, 160], "max_size": 200}}]
    worst, same, k = 0.0, True, 0
    for xg, _, xc, _, sizes_equal in pairs(socket, dataset, loader_device, 10, batch_size=8,
                                           ops=ops, dtype="float32", pad_to_multiple=32):
        same &= xg.shape == xc.shape and sizes_equal
        worst = max(worst, max_diff(xg, xc))
        k += 1
    result("any-size batches padded on the device vs CPU",
           f"{k} batches, max diff {worst:.2e}", "<= 1e-6, same shapes",
           "PASS" if same and worst <= 1e-6 and k == 10 else "FAIL")

    # 4. MixUp / CutMix: the same draws applied on the device and on the CPU.
    g = torch.Generator().manual_seed(11)
    bad = []
    for name, t in (("MixUp", stoker.MixUp(alpha=0.2, num_classes=10)),
                    ("CutMix", stoker.CutMix(alpha=1.0, num_classes=10))):
        for dtype in (torch.float32, torch.float16):
            for layout in ("nchw", "nhwc"):
                for _ in range(4):
                    shape = (16, 3, 64, 48) if layout == "nchw" else (16, 64, 48, 3)
                    x = torch.randn(shape, generator=g).to(dtype)
                    y = torch.randint(0, 10, (16,), generator=g)
                    mix = t.draw(g, 64, 48)
                    xc, yc = t.apply(x.clone(), y.clone(), mix, layout)
                    xd, yd = t.apply(x.to(device), y.to(device), mix, layout)
                    if not (torch.equal(xd.cpu(), xc) and torch.equal(yd.cpu(), yc)):
                        bad.append(f"{name} {dtype} {layout} {mix}")
    result("MixUp/CutMix on CUDA tensors vs CPU (same draws)",
           f"{32 - len(bad)}/32 bit-equal" + (f"; first bad: {bad[0]}" if bad else ""),
           "all equal", "FAIL" if bad else "PASS")

    mix = stoker.RandomChoice([stoker.MixUp(alpha=0.2, num_classes=4),
                               stoker.CutMix(alpha=1.0, num_classes=4)])
    worst, same, k = 0.0, True, 0
    for xg, yg, xc, yc, _ in pairs(socket, dataset, loader_device, 6, batch_size=16,
                                   dtype="float32", batch_transform=mix):
        same &= xg.device.type == device and yg.shape == (16, 4)
        # The soft labels carry lambda: equal draws give equal labels.
        same &= bool(torch.equal(yg.cpu(), yc))
        worst = max(worst, max_diff(xg, xc))
        k += 1
    result("Loader(batch_transform=RandomChoice(MixUp, CutMix)) CUDA vs CPU",
           f"{k} batches, same soft labels: {same}, max image diff {worst:.2e}",
           "same labels, <= 1e-6", "PASS" if same and worst <= 1e-6 and k else "FAIL")
    return 1 if gpu_check_report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
