"""Reads the recipes' own image classes by what they do to an image.

Self-supervised recipes write some of their augmentations as small classes
of their own rather than torchvision transforms: DINO's ``utils.GaussianBlur(p,
radius_min, radius_max)`` and ``utils.Solarization(p)``, MoCo's
``loader.GaussianBlur(sigma)`` and ``loader.Solarize()``. Their names say
nothing (``GaussianBlur`` is also torchvision's, with other arithmetic), so
each object is called once, twice in fact, on a stand-in image while the
``random`` module's ``random()`` and ``uniform()`` (and ``torch.rand``,
numpy's ``random.rand`` / ``random.random`` / ``random.uniform``) hand out
stand-in draws, and what it did is read back:

* ``img.filter(ImageFilter.GaussianBlur(r))`` with ``r`` one ``uniform(a, b)``
  draw (or a number) -> ``ImageFilterGaussianBlur {radius: [a, b]}``;
* ``ImageOps.solarize(img, t)`` (``img.point`` with solarize's table) ->
  ``RandomSolarize {threshold: t}``;
* either behind one comparison of one ``random()`` draw with a number: the
  object is called once with that draw behaving as 0 and once as just under
  1; the op made in one call and not in the other gives its probability
  (``p`` when made for small draws, ``1 - p`` for large ones).

Anything else (another image method, a draw used in arithmetic, two gates, a
result that is not the image the op made) reads as nothing, and the Loader
refuses the object by name as it refuses any transform it cannot run. The
stand-in draws are NaN to arithmetic, so a value computed from one cannot
pass for a constant.

The patching lasts for the two calls; a thread drawing from ``random`` at
that moment in the same process gets a stand-in draw. Loader construction is
where this runs, before any worker exists.
"""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

#: The ops a recipe class is read into (the op table's "recipe_class" rows,
#: and RandomSolarize).
MAKES = ("ImageFilterGaussianBlur", "RandomSolarize")

#: The draws of a probe call behave as this value in comparisons.
_SMALL, _LARGE = 0.0, 1.0 - 2.0 ** -53


class _Trace:
    def __init__(self, draw_value: float) -> None:
        self.draw_value = draw_value
        self.events: List[Tuple[Any, ...]] = []


class _Draw(float):
    """A stand-in draw: NaN to arithmetic; its comparisons with numbers are
    answered as `trace.draw_value` would be, and recorded."""

    def __new__(cls, trace: _Trace, kind: str, args: Tuple[float, ...] = ()) -> "_Draw":
        d = super().__new__(cls, math.nan)
        d.trace, d.kind, d.args = trace, kind, args
        return d

    def _compare(self, other: Any, op: Callable[[float, float], bool]) -> bool:
        if isinstance(other, _Draw) or not isinstance(other, (int, float)):
            self.trace.events.append(("bad draw",))
            return False
        self.trace.events.append(("gate", self.kind, float(other)))
        return op(self.trace.draw_value, float(other))

    def __lt__(self, other: Any) -> bool:
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other: Any) -> bool:
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other: Any) -> bool:
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other: Any) -> bool:
        return self._compare(other, lambda a, b: a >= b)

    def __bool__(self) -> bool:
        self.trace.events.append(("bad draw",))
        return True

    __hash__ = float.__hash__


class _ProbeImage:
    """Stands for the PIL image a recipe class is called on."""

    mode = "RGB"
    size = (64, 48)
    width, height = size

    def __init__(self, trace: _Trace) -> None:
        self._trace = trace

    def filter(self, f: Any) -> "_ProbeImage":  # noqa: A003 (PIL's name)
        out = _ProbeImage(self._trace)
        self._trace.events.append(("filter", f, out))
        return out

    def point(self, lut: Any, *args: Any) -> "_ProbeImage":
        out = _ProbeImage(self._trace)
        self._trace.events.append(("point", lut, args, out))
        return out


@contextlib.contextmanager
def _draws(trace: _Trace) -> Iterator[None]:
    """random / torch / numpy draws replaced by stand-ins for the block."""
    saved: List[Tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, fn: Callable[..., Any]) -> None:
        if owner is not None and hasattr(owner, name):
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, fn)

    unit = lambda *a, **k: _Draw(trace, "unit")  # noqa: E731
    uniform = lambda a=0.0, b=1.0, *rest, **k: _Draw(trace, "uniform", (a, b))  # noqa: E731
    patch(sys.modules.get("random"), "random", unit)
    patch(sys.modules.get("random"), "uniform", uniform)
    patch(sys.modules.get("torch"), "rand", unit)
    np_random = getattr(sys.modules.get("numpy"), "random", None)
    for name in ("rand", "random"):
        patch(np_random, name, unit)
    patch(np_random, "uniform", uniform)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _call(transform: Any, draw_value: float) -> Optional[Tuple[List[Tuple[Any, ...]], Any]]:
    trace = _Trace(draw_value)
    image = _ProbeImage(trace)
    try:
        with _draws(trace):
            out = transform(image)
    except Exception:  # pylint: disable=broad-except
        return None
    return trace.events, (image if out is image else out)


def _solarize_threshold(lut: Any) -> Optional[int]:
    """t when `lut` is ImageOps.solarize(threshold=t)'s table (256 values,
    or the same 256 for each of R, G, B)."""
    try:
        values = [int(v) for v in lut]
    except (TypeError, ValueError):
        return None
    if len(values) == 768 and values[:256] == values[256:512] == values[512:]:
        values = values[:256]
    if len(values) != 256:
        return None
    for t in range(257):
        if values == [i if i < t else 255 - i for i in range(256)]:
            return t
    return None


def _op(events: List[Tuple[Any, ...]], out: Any) -> Optional[Tuple[Dict[str, Any], Optional[float]]]:
    """The op one call made, with its gate's threshold (None: no gate);
    ({}, threshold) when the call made none."""
    gates = [e for e in events if e[0] == "gate"]
    if any(e[0] == "bad draw" for e in events) or len(gates) > 1:
        return None
    if gates and gates[0][1] != "unit":
        return None  # a uniform draw compared: not a gate
    gate = gates[0][2] if gates else None
    made = [e for e in events if e[0] in ("filter", "point")]
    if not made:
        return ({}, gate) if isinstance(out, _ProbeImage) else None
    if len(made) != 1 or made[0][-1] is not out:
        return None
    kind = made[0][0]
    if kind == "filter":
        f = made[0][1]
        if type(f).__name__ != "GaussianBlur" or type(f).__module__ != "PIL.ImageFilter":
            return None
        r = getattr(f, "radius", None)
        if isinstance(r, _Draw):
            if r.kind != "uniform" or len(r.args) != 2:
                return None
            lo, hi = (float(v) for v in r.args)
            radius = [min(lo, hi), max(lo, hi)]  # uniform(a, b) with b < a draws from [b, a]
        elif isinstance(r, (int, float)) and math.isfinite(r):
            radius = [float(r)]
        else:
            return None
        return {"ImageFilterGaussianBlur": {"radius": radius}}, gate
    if made[0][2]:
        return None  # point(lut, mode): not solarize
    t = _solarize_threshold(made[0][1])
    if t is None:
        return None
    return {"RandomSolarize": {"threshold": float(t)}}, gate


def read(transform: Any) -> Optional[Dict[str, Dict[str, Any]]]:
    """The op `transform` (a recipe's own class, called on a PIL image) is,
    as ``{name: params}`` with its ``p``; None when it is not one of the
    shapes above."""
    if not callable(transform) or isinstance(transform, type):
        return None
    small = _call(transform, _SMALL)
    large = _call(transform, _LARGE)
    if small is None or large is None:
        return None
    a, b = _op(*small), _op(*large)
    if a is None or b is None:
        return None
    (op_a, gate_a), (op_b, gate_b) = a, b
    if gate_a != gate_b or (op_a and op_b and op_a != op_b) or not (op_a or op_b):
        return None
    op = op_a or op_b
    if gate_a is None or (op_a and op_b):
        p = 1.0
    else:
        p = min(max(gate_a if op_a else 1.0 - gate_a, 0.0), 1.0)
    ((name, params),) = op.items()
    return {name: {**params, "p": p}}
