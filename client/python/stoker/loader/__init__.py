"""`stoker.Loader`: a torch DataLoader look-alike fed by a stokerd daemon.

The package, one concept a module; `Loader` is the facade users see:
  _loader.py    Loader: its arguments, attach, state_dict, close, properties
  _pipeline.py  its keywords (or a transform) as the request the daemon runs
  _epochs.py    iteration: epochs, their iterators, the waits for batches
  _batches.py   a batch's fields as the tensors it yields, on CPU or a GPU
  _views.py     BatchView and DatasetView
  _options.py   what the arguments mean before an attach (defaults, devices,
                DataLoader's samplers and keywords, folder datasets)
  _torch.py     torch, imported on first use
"""

from ._loader import Loader
from ._options import ATTACH_DEFAULTS, ConcurrentIterationError, ForkedLoaderError, Images
from ._torch import _torch_module
from ._views import BatchView, DatasetView

__all__ = ["ATTACH_DEFAULTS", "BatchView", "ConcurrentIterationError", "DatasetView",
           "ForkedLoaderError", "Images", "Loader"]
