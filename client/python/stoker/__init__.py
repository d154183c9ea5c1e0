"""stoker: JPEG batches decoded and augmented by a stokerd daemon, read from shared memory.

    import stoker
    with stoker.Loader("imagenet/train", socket="/run/stoker/stoker.sock",
                       batch_size=256) as loader:
        for epoch in range(90):
            for images, labels in loader:   # one epoch per iteration, like DataLoader
                ...

The images of a batch are a view of a ring slot in shared memory (no copy);
the slot goes back to the daemon when the tensor is garbage-collected. See
`Loader` for the details, `Client` for the daemon's status and health.

Multi-view transforms (SimCLR, MoCo, BYOL, DINO): `MultiView`, or the
recipes' own transform objects, given as ``Loader(transform=...)``.

Batch transforms (`stoker.batch`), for ``Loader(batch_transform=...)``:
`MixUp`, `CutMix` and `RandomChoice` of them, torchvision's reference
recipes' mixup / cutmix with soft labels, drawn reproducibly per batch.

Errors (all subclasses of `StokerError`, itself a `RuntimeError`):

* `DaemonUnavailableError`: stokerd cannot be reached, died or is shutting down.
* `InvalidRequestError` (also a `ValueError`): bad options, a missing or empty
  dataset, a path outside the daemon's data root.
* `SampleError`: a sample failed under ``failure_policy='error'`` (names the file).
* `RingExhaustedError`: every ring slot is held by batches you still reference.
* `StokerTimeoutError` (also a `TimeoutError`): nothing within ``timeout_ms``.
* `ResourceExhaustedError`: the daemon is out of sessions or shared memory.
* `DataLossError`: inconsistent ring contents.
* `CudaUnavailableError`: ``Loader(device='cuda')`` where CUDA is unavailable
  (stoker built without it, torch without it, no driver, no GPU); pass
  ``cpu_fallback=True`` to get CPU tensors instead.
* `ConcurrentIterationError`: a second iteration of one Loader started from
  another thread while one is live, or a superseded iterator advanced.
* `ForkedLoaderError`: a Loader used in a child forked from its process.
* `EndOfData`: the low-level ``Session.next`` after the last batch (the Loader
  turns it into `StopIteration`).
"""

from ._native import (
    CudaUnavailableError,
    DaemonUnavailableError,
    DataLossError,
    EndOfData,
    InvalidRequestError,
    ResourceExhaustedError,
    RingExhaustedError,
    SampleError,
    Session,
    StokerError,
    StokerTimeoutError,
)
from ._native import cuda_status
from ._transforms import MultiView
from .batch import CutMix, MixUp, RandomChoice
from .client import Client, resolve_socket
from .loader import BatchView, ConcurrentIterationError, DatasetView, ForkedLoaderError, Loader

__version__ = "0.1.0"

__all__ = [
    "BatchView",
    "Client",
    "ConcurrentIterationError",
    "CutMix",
    "CudaUnavailableError",
    "DaemonUnavailableError",
    "DataLossError",
    "DatasetView",
    "EndOfData",
    "ForkedLoaderError",
    "InvalidRequestError",
    "Loader",
    "MixUp",
    "MultiView",
    "RandomChoice",
    "ResourceExhaustedError",
    "RingExhaustedError",
    "SampleError",
    "Session",
    "StokerError",
    "StokerTimeoutError",
    "cuda_status",
    "resolve_socket",
]
