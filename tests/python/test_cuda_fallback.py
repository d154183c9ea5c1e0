"""Loader(device=...) where CUDA is unavailable, and the normalize reference.

Everywhere: importing never fails; device='cuda' raises CudaUnavailableError
(a StokerError) at attach/iteration, not at construction; cpu_fallback=True
yields CPU tensors equal to the daemon's float pipeline; the native
device-copy call fails with the clear error and keeps no ring slot; the CPU
reference of the GPU normalize equals torch's ToTensor+Normalize formula,
bfloat16 included. On a machine with a GPU the error tests skip and
test_cuda_tensors_* run instead (scripts/gpu-check.sh covers the rest).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings

import numpy as np
import pytest

from conftest import make_dataset

torch = pytest.importorskip("torch")

HAVE_CUDA = torch.cuda.is_available()
needs_no_cuda = pytest.mark.skipif(HAVE_CUDA, reason="a CUDA device is present")
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device")

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module")
def served(module_daemon_factory):
    top = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    root = os.path.join(top, "data")
    make_dataset(os.path.join(root, "ds"), classes=2, per_class=6, sizes=(48, 120), seed=11)
    yield module_daemon_factory(workers=2, data_root=root)
    shutil.rmtree(top, ignore_errors=True)


def loader_for(stoker, daemon, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("timeout_ms", 30000)
    kw.setdefault("pipeline", "eval")
    kw.setdefault("size", 32)
    kw.setdefault("shuffle", False)
    kw.setdefault("epochs", 1)
    return stoker.Loader("ds", socket=daemon.socket, **kw)


def torch_normalize(u8_nhwc: np.ndarray, dtype: str, layout: str) -> torch.Tensor:
    """torchvision's ToTensor + Normalize, in float32, then cast (round to nearest even)."""
    x = torch.from_numpy(u8_nhwc).float() / 255
    x = (x - torch.tensor(MEAN)) / torch.tensor(STD)
    if layout == "nchw":
        x = x.permute(0, 3, 1, 2).contiguous()
    return x.to(TORCH_DTYPES[dtype])


# ---------------------------------------------------------------------------
# Import, status, the clear error


def test_import_and_cuda_status_never_raise(stoker):
    st = stoker.cuda_status()
    assert set(st) == {"built_with_cuda", "device_count", "error"}
    assert isinstance(st["built_with_cuda"], bool)
    if st["device_count"] == 0:
        assert st["error"], st
        want = "no CUDA device" if st["built_with_cuda"] else "built without CUDA"
        assert want in st["error"]
    assert issubclass(stoker.CudaUnavailableError, stoker.StokerError)


@needs_no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1", 0])
def test_device_cuda_raises_a_clear_error_at_iteration(stoker, served, device):
    loader = loader_for(stoker, served, device=device, dtype="float16")  # constructing is fine
    with loader:
        with pytest.raises(stoker.CudaUnavailableError) as e:
            next(iter(loader))
        msg = str(e.value)
        assert "needs CUDA" in msg and "cpu_fallback=True" in msg, msg
        assert e.value.code == "FAILED_PRECONDITION"
        assert isinstance(e.value, stoker.StokerError)
        with pytest.raises(stoker.CudaUnavailableError):
            loader.attach()
        assert loader.device_status is None  # never attached


@needs_no_cuda
def test_torch_device_object_is_accepted(stoker, served):
    with loader_for(stoker, served, device=torch.device("cuda")) as loader:
        with pytest.raises(stoker.CudaUnavailableError):
            loader.attach()


def test_bad_device_values_are_invalid_requests(stoker, served):
    for bad in ("gpu", "cuda:x", "cuda:-1", -1, True, 1.5):
        with pytest.raises(stoker.InvalidRequestError):
            loader_for(stoker, served, device=bad)


# ---------------------------------------------------------------------------
# cpu_fallback


@needs_no_cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "channels_last"])
def test_cpu_fallback_yields_the_daemons_float_pipeline(stoker, served, dtype, layout):
    # The reference: the plain CPU loader, float32 (bfloat16 is its cast).
    ref_layout = "nhwc" if layout == "channels_last" else layout
    with loader_for(stoker, served, dtype="float32" if dtype == "bfloat16" else dtype,
                    layout=ref_layout) as ref:
        want = [(i.clone(), l.clone()) for i, l in ref]
    with pytest.warns(RuntimeWarning, match="cpu_fallback"):
        loader = loader_for(stoker, served, device="cuda", cpu_fallback=True, dtype=dtype,
                            layout=layout)
        loader.attach()
    with loader, warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not per batch
        got = list(loader)
        assert loader.info["dtype"] == ("float32" if dtype == "bfloat16" else dtype)
        assert loader.device_status["mode"] == "none"
    assert len(got) == len(want) == 3
    for (gi, gl), (wi, wl) in zip(got, want):
        assert gi.device.type == "cpu" and gl.device.type == "cpu"
        assert gi.dtype == TORCH_DTYPES[dtype]
        assert torch.equal(gl, wl)
        if dtype == "bfloat16":
            wi = wi.to(torch.bfloat16)
        if layout == "channels_last":
            assert gi.shape == (wi.shape[0], 3, 32, 32)
            assert gi.is_contiguous(memory_format=torch.channels_last)
            wi = wi.permute(0, 3, 1, 2)
        assert torch.equal(gi, wi)


# ---------------------------------------------------------------------------
# The native device-copy call


@needs_no_cuda
def test_native_copy_to_device_fails_clearly_and_keeps_no_slot(stoker, served):
    from stoker import _native
    session = stoker.Client(served.socket).attach("ds", pipeline={"pipeline": "eval", "size": 32},
                                                  batch_size=2, ring_slots=2, epochs=1,
                                                  shuffle=False)
    try:
        assert session.device_status["mode"] == "none"
        n = 0
        while True:
            try:
                raw = session.next(30000)
            except stoker.EndOfData:
                break
            images = raw[0]["image"][0]
            with pytest.raises(stoker.CudaUnavailableError, match="no CUDA device|without CUDA"):
                _native.copy_to_device(images, 0, 0x1000, 1 << 20)
            with pytest.raises(stoker.CudaUnavailableError):
                _native.copy_to_device(images, 0, 0x1000, 1 << 20, dtype="bfloat16",
                                       layout="nhwc")
            # Not one of our leases: refused before any CUDA call.
            with pytest.raises(stoker.InvalidRequestError):
                _native.copy_to_device(images.copy(), 0, 0x1000, 1 << 20)
            del raw, images  # the slot goes back now: nothing is in flight
            n += 1
        assert n == 6  # 12 samples / 2, through a 2-slot ring
        st = session.device_status
        assert st["copies"] == 0 and st["deferred_slots"] == 0
    finally:
        session.detach()


# ---------------------------------------------------------------------------
# The CPU reference of the GPU normalize


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_normalize_reference_is_torchvision_normalize(stoker, dtype, layout):
    from stoker import _native
    rng = np.random.default_rng()
    u8 = rng.integers(0, 256, (3, 17, 23, 3), dtype=np.uint8)
    u8[0, 0, 0] = (0, 255, 128)
    ref = _native.normalize_reference(u8, dtype, layout)
    want = torch_normalize(u8, dtype, layout)
    assert ref.shape == tuple(want.shape)
    if dtype == "bfloat16":
        assert ref.dtype == np.uint16
        want_bits = want.view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(ref, want_bits)
    else:
        assert np.array_equal(ref, want.numpy())
    # Other mean/std are honoured.
    ref2 = _native.normalize_reference(u8, "float32", layout, mean=(0.5, 0.5, 0.5),
                                       std=(0.25, 0.5, 2.0))
    x = (torch.from_numpy(u8).float() / 255 - 0.5) / torch.tensor([0.25, 0.5, 2.0])
    if layout == "nchw":
        x = x.permute(0, 3, 1, 2)
    assert np.array_equal(ref2, x.contiguous().numpy())


# ---------------------------------------------------------------------------
# With a GPU (skipped here)


@needs_cuda
@pytest.mark.parametrize("dtype", ["uint8", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "channels_last"])
def test_cuda_tensors_match_the_reference(stoker, served, dtype, layout):
    with loader_for(stoker, served, dtype="uint8") as ref:
        want = [i.clone() for i, _ in ref]  # uint8 NHWC
    dev = torch.device("cuda", torch.cuda.device_count() - 1)
    with loader_for(stoker, served, device=dev, dtype=dtype, layout=layout) as loader:
        got = [(i, l) for i, l in loader]
        assert loader.device_status["copies"] == len(got)
        assert loader.device_status["mode"] in ("registered", "staging")
    for (gi, gl), wi in zip(got, want):
        assert gi.device == dev and gl.device == dev
        if dtype == "uint8":
            w = wi if layout != "nchw" else None
            if layout == "nchw":
                assert gi.shape == (wi.shape[0], 3, 32, 32)
                continue  # served NCHW by the daemon, copied as is
            if layout == "channels_last":
                w = wi.permute(0, 3, 1, 2)
            assert torch.equal(gi.cpu(), w)
            continue
        ref = torch_normalize(wi.numpy(), dtype, "nchw" if layout == "nchw" else "nhwc")
        if layout == "channels_last":
            ref = ref.permute(0, 3, 1, 2)
            assert gi.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(gi.cpu(), ref)
