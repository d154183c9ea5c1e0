"""CT-like volumes that look real, for the volume tests and bench/volumes.py:
a body cross-section (soft tissue around 40 HU, fat around -100 HU, air
-1000 HU outside), a spine and ribs (bone, 300-1200 HU), an organ blob (the
label: 1 inside, 0 outside), scanner noise, slices along z; stored as CT
scanners and the Medical Segmentation Decathlon store them: int16 in
Hounsfield units, or uint16 with scl_inter -1024, gzip'd, with a
sform/qform affine of anisotropic spacing (0.7-0.9 mm in-plane, 1.5-5 mm
between slices).
"""

from __future__ import annotations

import numpy as np


def ct_volume(shape, rng, spacing=(0.78, 0.78, 2.5)):
    """(hu int16 array of `shape` (x, y, z), label uint8 array, affine)."""
    nx, ny, nz = shape
    x = (np.arange(nx) - nx / 2)[:, None, None] / (nx / 2)
    y = (np.arange(ny) - ny / 2)[None, :, None] / (ny / 2)
    z = (np.arange(nz) - nz / 2)[None, None, :] / max(nz / 2, 1)
    body = (x / 0.85) ** 2 + (y / 0.65) ** 2 <= 1.0
    fat = body & ((x / 0.8) ** 2 + (y / 0.6) ** 2 > 1.0 - 0.15)
    hu = np.full(shape, -1000.0)
    hu = np.where(body, 40.0, hu)
    hu = np.where(fat, -100.0, hu)
    spine = ((x - 0.0) ** 2 + (y + 0.45) ** 2 <= 0.012) & body
    hu = np.where(spine, 700.0 + 400 * np.cos(6 * np.pi * z), hu)
    ribs = body & (np.abs(np.hypot(x / 0.8, y / 0.6) - 0.9) < 0.02) & (np.cos(40 * np.arctan2(y, x)) > 0.3)
    hu = np.where(ribs, 400.0, hu)
    organ = ((x + 0.35) / 0.22) ** 2 + ((y - 0.05) / 0.16) ** 2 + (z / 0.6) ** 2 <= 1.0
    hu = np.where(organ, 55.0 + 10 * np.sin(20 * x) * np.cos(17 * y), hu)
    hu = hu + rng.normal(0.0, 12.0, size=shape)
    hu = np.clip(np.rint(hu), -1024, 3071).astype(np.int16)
    affine = np.diag([-spacing[0], -spacing[1], spacing[2], 1.0])
    affine[:3, 3] = [nx * spacing[0] / 2, ny * spacing[1] / 2, -nz * spacing[2] / 2]
    return hu, organ.astype(np.uint8), affine
