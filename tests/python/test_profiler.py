"""The trainer's side of the data-stall picture: a Loader's waits for batches
show in a PyTorch profiler trace as the range "stoker.wait"."""

import os

from conftest import make_dataset


def test_waits_are_stoker_wait_ranges_in_a_profiler_trace(stoker, daemon, tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile

    make_dataset(os.path.join(daemon.data_root, "imgs"), classes=2, per_class=8, seed=3)
    with stoker.Loader("imgs", socket=daemon.socket, batch_size=4, size=32, epochs=1) as ld:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            batches = sum(1 for _ in ld)
    assert batches == 4
    waits = [e for e in prof.events() if e.name == "stoker.wait"]
    assert len(waits) == batches
    # Outside a profiler nothing is recorded (and nothing costs).
    assert not torch.autograd._profiler_enabled()
