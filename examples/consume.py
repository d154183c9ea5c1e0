#!/usr/bin/python3
"""Feeds a training loop from a running stokerd and prints its throughput.

    PYTHONPATH=build/python /usr/bin/python3 examples/consume.py \
        --socket /tmp/stoker.sock --dataset demo --epochs 2

The dataset path is relative to the daemon's --data-root.
"""
import argparse
import time

import torch  # noqa: F401  (a trainer has it loaded before its first batch)

import stoker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=["uint8", "float32", "float16"])
    a = ap.parse_args()

    # What DataLoader with RandomResizedCrop(224) + RandomHorizontalFlip() +
    # ToTensor() + Normalize(ImageNet) would yield: float32 NCHW, normalized.
    with stoker.Loader(a.dataset, socket=a.socket, batch_size=a.batch_size,
                       pipeline="train", size=224, dtype=a.dtype, epochs=a.epochs,
                       seed=0) as loader:
        print(f"attached: {loader.info['dataset_size']} images in "
              f"{len(loader.class_names)} classes, {len(loader)} batches per epoch")
        total_images, total_seconds = 0, 0.0
        for epoch in range(a.epochs):
            t0 = time.perf_counter()
            images_seen = 0
            for images, labels in loader:
                images_seen += labels.shape[0]  # a real trainer would step here
            dt = time.perf_counter() - t0
            total_images += images_seen
            total_seconds += dt
            print(f"epoch {epoch}: {images_seen} images in {dt:.2f} s: "
                  f"{images_seen / dt:.0f} images/s; last batch {tuple(images.shape)} "
                  f"{images.dtype}")
        print(f"throughput: {total_images / total_seconds:.0f} images/s "
              f"({total_images} images, {a.epochs} epochs, batch {a.batch_size}, "
              f"{a.dtype})")


if __name__ == "__main__":
    main()
