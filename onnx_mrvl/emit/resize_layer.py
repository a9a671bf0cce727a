"""The bilinear ``Resize`` layer (method ``linear``) of the compile step."""
from __future__ import annotations

from .json_attrs import NodeAttrs, unwrap

LINEAR_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def resize_linear(a: NodeAttrs, in_shape, params: dict):
    """Bilinear Resize of NHWC to ``size`` [oh, ow]; ``scales`` (floats) when the model gave scales.
    Cost: 4 MACs per output value (two taps along H, two along W; an assumption of the perf model)."""
    if len(in_shape) != 4:
        a.fail(f"linear Resize needs a 4-D NHWC input, got {in_shape}")
    oh, ow = a.ints("size", n=2)
    ctm = a.str("coordinate_transformation_mode", "half_pixel")
    if ctm not in LINEAR_MODES or min(oh, ow) < 1:
        a.fail(f"linear Resize to {[oh, ow]} with coordinate mode {ctm!r} is not supported")
    scales = None
    if a.has("scales"):
        raw = unwrap_list(a.raw["scales"])
        try:
            scales = [float(v) for v in raw]
        except (TypeError, ValueError):
            a.fail(f"attribute 'scales' is not a list of numbers: {a.raw['scales']!r}")
        if len(scales) != 2 or min(scales) <= 0:
            a.fail(f"linear Resize scales {scales} are not two positive numbers")
    n, _, _, c = in_shape
    params.update(mode="linear", sizes=[oh, ow], coordinate_mode=ctm, scales=scales)
    return [n, oh, ow, c], 4 * n * oh * ow * c


def unwrap_list(v):
    v = unwrap(v)
    return v if isinstance(v, list) else [v]
