"""GPU check, torch half: the client's copy path (cuda::RingCopier, through
tests/gpu_check_capi.cc and ctypes) driven the way stoker.Loader drives it:
torch's current stream, output and scratch from torch's caching allocator.

  1. stream semantics: on every visible GPU, with a long kernel queued ahead
     on the stream, copy+normalize a batch from a ring-like shm mapping into
     a torch tensor on that GPU, then read it with torch on the same stream
     without any synchronize: it must equal torch's own ToTensor+Normalize,
     and the slot must still be held (deferred) when the lease ends.
  2. feed ceiling: images/s of copy+normalize (uint8 NHWC 256x224x224 ->
     float16 NCHW) into fresh torch tensors, with a dummy model step on the
     same stream; no JPEG decode involved.

Prints RESULT|name|value|target|status lines. Usage: gpu_check_torch.py LIB.
"""

import ctypes
import mmap
import os
import sys
import time

import gpu_check_report
from gpu_check_report import result

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    result("torch interop", e, "-", "SKIP")
    sys.exit(0)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def main():
    if not torch.cuda.is_available():
        result("torch interop", f"torch {torch.__version__}: torch.cuda.is_available() is False",
               "-", "SKIP")
        return 0
    lib = ctypes.CDLL(sys.argv[1])
    lib.stoker_gc_new.restype = ctypes.c_void_p
    lib.stoker_gc_new.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int]
    lib.stoker_gc_free.argtypes = [ctypes.c_void_p]
    f3 = ctypes.c_float * 3
    lib.stoker_gc_copy.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32,
        ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, ctypes.c_int, f3, f3, ctypes.c_void_p,
        ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64,
        ctypes.c_char_p, ctypes.c_int]
    lib.stoker_gc_end_lease.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.stoker_gc_reap.argtypes = [ctypes.c_void_p]
    lib.stoker_gc_reap.restype = ctypes.c_uint32
    lib.stoker_gc_mode.argtypes = [ctypes.c_void_p]
    mean, std = f3(*MEAN), f3(*STD)

    n, h, w, slots = 256, 224, 224, 4
    slot_bytes = n * h * w * 3
    data_offset = 4096
    path = f"/dev/shm/stoker-gpucheck-py-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, data_offset + slot_bytes * slots)
        mm = mmap.mmap(fd, data_offset + slot_bytes * slots, mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
        os.unlink(path)
    ring = np.frombuffer(mm, dtype=np.uint8)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    copier = lib.stoker_gc_new(base, len(mm), slots, 1)
    err = ctypes.create_string_buffer(512)

    def slot_view(s):
        off = data_offset + s * slot_bytes
        return ring[off:off + slot_bytes].reshape(n, h, w, 3)

    def copy(s, out, scratch, stream, device, dtype=2, nchw=1):
        rc = lib.stoker_gc_copy(copier, s, base + data_offset + s * slot_bytes, slot_bytes, n, h,
                                w, dtype, nchw, mean, std, stream.cuda_stream, device,
                                out.data_ptr(), out.numel() * out.element_size(),
                                scratch.data_ptr(), scratch.numel(), err, len(err))
        if rc != 0:
            raise RuntimeError(err.value.decode())

    # 1. Stream semantics, on every GPU, from a thread whose current device is 0.
    rng = np.random.default_rng()
    count = torch.cuda.device_count()
    ok_devices, deferred = 0, 0
    torch.cuda.set_device(0)
    for d in range(count):
        s = d % slots
        src = slot_view(s)
        src[...] = rng.integers(0, 256, src.shape, dtype=np.uint8)
        x = torch.from_numpy(src.copy()).float() / 255
        want = ((x - torch.tensor(MEAN)) / torch.tensor(STD)).permute(0, 3, 1, 2).half()
        dev = torch.device("cuda", d)
        stream = torch.cuda.Stream(device=dev)
        with torch.cuda.stream(stream):
            with torch.cuda.device(d):
                torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued ahead
            out = torch.empty((n, 3, h, w), dtype=torch.float16, device=dev)
            scratch = torch.empty(slot_bytes, dtype=torch.uint8, device=dev)
            copy(s, out, scratch, stream, d)
            del scratch
            deferred += lib.stoker_gc_end_lease(copier, s)
            got = out.cpu()  # on `stream`, after the copy: no explicit synchronize
        if out.device == dev and torch.equal(got, want):
            ok_devices += 1
        else:
            print(f"device {d}: wrong data (device {out.device})", file=sys.stderr)
    torch.cuda.synchronize()
    while lib.stoker_gc_reap(copier):
        time.sleep(0.001)
    mode = {1: "registered", 2: "staging"}.get(lib.stoker_gc_mode(copier), "none")
    result("torch stream semantics (no sync), per device",
           f"{ok_devices}/{count} devices exact, {deferred}/{count} releases deferred, {mode}",
           "all exact, deferred", "PASS" if ok_devices == count and deferred == count else "FAIL")

    # 2. Feed ceiling: copy + normalize into torch tensors + a dummy step.
    dev = torch.device("cuda", 0)
    for s in range(slots):
        slot_view(s)[...] = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    conv = torch.nn.Conv2d(3, 16, 3, stride=4).to(dev).half()
    stream = torch.cuda.current_stream(dev)
    batches = 40

    def run(k):
        for i in range(k):
            s = i % slots
            out = torch.empty((n, 3, h, w), dtype=torch.float16, device=dev)
            scratch = torch.empty(slot_bytes, dtype=torch.uint8, device=dev)
            copy(s, out, scratch, stream, 0)
            del scratch
            lib.stoker_gc_end_lease(copier, s)
            lib.stoker_gc_reap(copier)
            conv(out).float().mean()  # the dummy model step

    run(4)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(batches)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    result("GPU feed ceiling: copy+normalize into torch + dummy step",
           f"{batches * n / dt:,.0f} images/s ({dt / batches * 1e3:.2f} ms/batch)",
           "> CPU decode rate", "INFO")
    lib.stoker_gc_free(copier)
    return 1 if gpu_check_report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
