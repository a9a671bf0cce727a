"""Turn one program layer (docs/program.md) into a prepared closure ``f(*inputs) -> (y, finite)``.

Everything that can be checked or laid out ahead of a run happens here, once: the layer_name is
known, the params and weights it needs are present and consistent, kernels are laid out for the
sgemm. Errors name the layer and its original ONNX nodes (``CompileError`` for a malformed layer,
``ArtifactError`` for a weight the binary does not hold).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ArtifactError, CompileError
from . import int8, int8_in
from .int8_concat import build_concat as build_int8_concat
from .int8_lookup import build_lookup
from . import recurrent
from .activations import ACTIVATIONS
from .fc import FC
from .kernels import Conv2D
from .matmul import BatchMatMul
from .gather import build_gather_elements
from .layers_transformer import build_layernorm, build_softmax
from .lrn import build_lrn
from .int8_transformer import build_int8_batch_matmul, build_requantize, int8_out_binary, int8_out_quant
from .pooling import avgpool, global_avgpool_layer, global_maxpool2d, maxpool2d
from .tensor_ops import concat, layout_transform, make_binary, reshape, resize_nearest, slice_channels
from .resize_linear import LINEAR_MODES, resize_bilinear

LayerFn = Callable[..., Tuple[np.ndarray, bool]]


class LayerSpec:
    """The view of one layer dict the builders need, with errors that name the layer."""

    def __init__(self, layer: Mapping, weights: Mapping[str, np.ndarray]):
        self.layer = layer
        self.name = str(layer.get("name", f"layer_{layer.get('index', '?')}"))
        self.layer_name = str(layer.get("layer_name", ""))
        self.origin = [str(o) for o in (layer.get("origin") or [])]
        self.params = dict(layer.get("params") or {})
        self.weight_names = dict(layer.get("weights") or {})
        self._weights = weights

    def error(self, msg: str, hint: Optional[str] = None, cls=CompileError):
        return cls(f"{self.layer_name} layer: {msg}", node=self.name, origin=self.origin,
                   hint=hint or "recompile the region; the program does not follow docs/program.md")

    def param(self, key: str, default=None, *, required: bool = False, length: Optional[int] = None):
        if key not in self.params or self.params[key] is None:
            if required:
                raise self.error(f"missing param {key!r}")
            return default
        value = self.params[key]
        if length is not None:
            try:
                value = [int(v) for v in value]
            except (TypeError, ValueError):
                raise self.error(f"param {key!r} must be a list of {length} integers, got {value!r}") from None
            if len(value) != length:
                raise self.error(f"param {key!r} must have {length} values, got {value}")
        return value

    def weight(self, role: str, *, required: bool = False, stored: bool = False) -> Optional[np.ndarray]:
        """The weight of ``role`` as float32 (fp16 values); ``stored=True``: as stored in the binary
        (float16 for an fp16 layer), for kernels that lay it out themselves without a float32 copy."""
        wname = self.weight_names.get(role)
        if wname is None:
            if required:
                raise self.error(f"missing weight {role!r}")
            return None
        if wname not in self._weights:
            raise self.error(f"weight {wname!r} ({role}) is not in the binary", cls=ArtifactError,
                             hint="the binary is incomplete or does not match its meta; rebuild it")
        if stored and hasattr(self._weights, "stored"):
            return self._weights.stored(wname)
        return self._weights[wname]

    def activation(self) -> Dict:
        act = str(self.params.get("activation") or "none").lower()
        if act not in ACTIVATIONS:
            raise self.error(f"unknown activation {act!r} (known: {', '.join(ACTIVATIONS)})")
        slope = self.weight("slope", required=(act == "prelu"))
        return {"activation": act, "activation_params": dict(self.params.get("activation_params") or {}),
                "slope": slope}


def _check_inputs(spec: LayerSpec, n_inputs: int, allowed: Sequence[int]) -> None:
    if n_inputs not in allowed:
        raise spec.error(f"takes {' or '.join(map(str, allowed))} input(s), the program gives {n_inputs}")


def _is_int8(spec: LayerSpec) -> bool:
    return str(spec.params.get("precision", "fp16")).lower() == "int8"


def _is_int8_in(spec: LayerSpec) -> bool:
    """int8 input and weights, fp16 output (Conv2D / FC, sim/int8_in.py)."""
    return str(spec.params.get("precision", "fp16")).lower() == "int8_in"


def _conv(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    kernel = spec.weight("kernel", required=True, stored=True)
    if _is_int8(spec) or _is_int8_in(spec):
        if kernel.ndim != 4:
            raise spec.error(f"kernel must be OHWI (4-D), got shape {list(kernel.shape)}")
        return (int8_in if _is_int8_in(spec) else int8).build("Conv2D", spec)
    if kernel.ndim != 4:
        raise spec.error(f"kernel must be OHWI (4-D), got shape {list(kernel.shape)}")
    ks = spec.param("kernel_size", length=2)
    if ks is not None and list(kernel.shape[1:3]) != ks:
        raise spec.error(f"kernel_size {ks} does not match the kernel shape {list(kernel.shape)}")
    ch = spec.param("channels")
    if ch is not None and int(ch) != kernel.shape[0]:
        raise spec.error(f"channels {ch} does not match the kernel shape {list(kernel.shape)}")
    try:
        conv = Conv2D(kernel, bias=spec.weight("bias"), scale=spec.weight("scale"),
                      shift=spec.weight("shift"),
                      strides=spec.param("strides", [1, 1], length=2),
                      padding=spec.param("padding", [0, 0, 0, 0], length=4),
                      dilation=spec.param("dilation", [1, 1], length=2),
                      groups=int(spec.param("groups", 1)), **spec.activation())
    except ValueError as exc:
        raise spec.error(str(exc)) from None
    return conv.apply


def _fc(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    kernel = spec.weight("kernel", required=True, stored=True)
    if kernel.ndim != 2:
        raise spec.error(f"kernel must be [O, K], got shape {list(kernel.shape)}")
    if _is_int8(spec) or _is_int8_in(spec):
        return (int8_in if _is_int8_in(spec) else int8).build("FC", spec)
    return FC(kernel, bias=spec.weight("bias"), **spec.activation()).apply


def _pool_geometry(spec: LayerSpec) -> Dict:
    return {"kernel_size": spec.param("kernel_size", required=True, length=2),
            "strides": spec.param("strides", [1, 1], length=2),
            "padding": spec.param("padding", [0, 0, 0, 0], length=4),
            "ceil_mode": int(spec.param("ceil_mode", 0)),
            "dilation": spec.param("dilation", [1, 1], length=2)}


def _maxpool(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    geo = _pool_geometry(spec)
    if _is_int8(spec):
        return int8.build_pool("Maxpool2D", spec, geo)
    return lambda x: (maxpool2d(x, **geo), True)


def _avgpool_layer(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    geo = _pool_geometry(spec)
    geo["count_include_pad"] = int(spec.param("count_include_pad", 0))
    if _is_int8(spec):
        return int8.build_pool("Avgpool2D", spec, geo)
    return lambda x: avgpool(x, **geo)


def _global_avg(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    if _is_int8(spec):
        return int8.build_pool("GlobalAvgpool2D", spec)
    return global_avgpool_layer


def _global_max(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    if _is_int8(spec):
        return int8.build_pool("GlobalMaxpool2D", spec)
    return lambda x: (global_maxpool2d(x), True)


def _binary(op: str):
    def build(spec: LayerSpec, n_inputs: int) -> LayerFn:
        _check_inputs(spec, n_inputs, (1, 2))
        if _is_int8(spec):
            if op != "add":
                raise spec.error("no int8 Mul2D (int8: Sum2D)")
            return int8.build_add(spec, n_inputs)
        operand = spec.weight("operand", required=(n_inputs == 1))
        if spec.params.get("divide"):   # A / B, fp32 only (an fp32 chain's Div: qdq_f32chain.py)
            if op != "mul" or n_inputs != 2 or spec.params.get("precision") != "fp32":
                raise spec.error("divide: a Mul2D of two tensors with precision fp32")
            return int8_out_binary("div", None, spec.activation(), None)
        if spec.params.get("precision") == "fp32":   # an fp32 chain's layer: fp32 values out (qdq_f32chain.py)
            return int8_out_binary(op, operand, spec.activation(), None)
        out_q = int8_out_quant(spec)
        if out_q is not None:   # a float Mul2D writing int8 codes (int8_transformer.py)
            requant = spec.params.get("requant")   # a Mul2D onnxruntime runs as QLinearMul (in2_*: its constant's codes)
            qlinear = (requant, int8_out_quant(spec, "in2")) if requant else None
            try:
                return int8_out_binary(op, operand, spec.activation(), out_q, int8_out_quant(spec, "in"), qlinear)
            except ValueError as exc:
                raise spec.error(f"int8_out layer: {exc}") from None
        return make_binary(op, operand, **spec.activation())
    return build


def _concat(spec: LayerSpec, n_inputs: int) -> LayerFn:
    if n_inputs < 1:
        raise spec.error("needs at least one input")
    axis = int(spec.param("axis", required=True))
    if _is_int8(spec):
        return build_int8_concat(spec, n_inputs)
    positions = [int(p) for p in spec.param("const_positions") or []]
    if positions:   # constant operands (fp16 weights) at their positions among the inputs
        consts = [(p, spec.weight(f"const{p}", required=True)) for p in sorted(positions)]

        def run(*xs, out=None):
            xs = list(xs)
            for p, c in consts:
                xs.insert(p, c)
            return concat(xs, axis, out), True
    else:
        def run(*xs, out=None):
            return concat(xs, axis, out), True
    run.writes_into = True          # the static plan hands it the output's buffer (``out``)
    return run


def _slice2d(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    try:
        axis, start, end = (int(spec.param(k, required=True)) for k in ("axis", "start", "end"))
    except (TypeError, ValueError):
        raise spec.error(f"axis, start and end must be integers, got {spec.params}") from None
    if not 0 < axis < 4 or not 0 <= start < end:
        raise spec.error(f"axis {axis} / range [{start}, {end}) is not a non-empty slice of a non-batch axis")

    def run(x, out=None):
        if x.ndim != 4 or end > x.shape[axis]:
            raise ValueError(f"slice [{start}, {end}) of axis {axis} does not fit an input of shape {list(x.shape)}")
        return slice_channels(x, axis, start, end, out), True
    run.writes_into = True
    return run


def _reshape(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    shape = [int(d) for d in spec.param("shape", required=True)]
    return lambda x: (reshape(x, shape), True)


def _resize(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    mode = str(spec.param("mode", "nearest")).lower()
    if mode == "linear":
        sizes = [int(d) for d in spec.param("sizes", required=True)]
        ctm = str(spec.param("coordinate_mode", "half_pixel"))
        given = spec.param("scales", None)
        if ctm not in LINEAR_MODES or len(sizes) != 2:
            raise spec.error(f"linear resize to {sizes} with coordinate mode {ctm!r} is not supported")
        if _is_int8(spec):
            return int8.build_pool("Resize", spec, {"mode": "linear", "sizes": sizes, "coordinate_mode": ctm,
                                                    "linear_scales": given})
        return lambda x: resize_bilinear(x, sizes, ctm, given)
    if mode != "nearest":
        raise spec.error(f"only modes 'nearest' and 'linear' are supported, got {mode!r}")
    scales = spec.param("scales", required=True)
    if len(scales) != 2 or any(float(s) != int(float(s)) or float(s) < 1 for s in scales):
        raise spec.error(f"scales must be two integers >= 1, got {scales}")
    sc = [int(float(s)) for s in scales]
    if _is_int8(spec):
        return int8.build_pool("Resize", spec, {"scales": sc})

    def run(x, out=None):
        return resize_nearest(x, sc, out), True
    run.writes_into = True
    return run


def _layout(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (1,))
    src = str(spec.param("src_layout", required=True)).upper()
    dst = str(spec.param("dst_layout", required=True)).upper()
    if src != dst and {src, dst} != {"NCHW", "NHWC"}:
        raise spec.error(f"supports NCHW<->NHWC only, got {src}->{dst}")
    return lambda x: (layout_transform(x, src, dst), True)


def _batch_matmul(spec: LayerSpec, n_inputs: int) -> LayerFn:
    _check_inputs(spec, n_inputs, (2,))
    perms = {}
    for key in ("a_perm", "b_perm", "out_perm"):
        p = spec.param(key)
        if p is not None:
            try:
                perms[key] = [int(v) for v in p]
            except (TypeError, ValueError):
                raise spec.error(f"param {key!r} must be a list of integers, got {p!r}") from None
    if _is_int8(spec):   # QLinearMatMul's integer semantics (int8_transformer.py)
        return build_int8_batch_matmul(spec, int(spec.param("transpose_b", 0)), float(spec.param("alpha", 1.0)), perms)
    return BatchMatMul(int(spec.param("transpose_b", 0)), float(spec.param("alpha", 1.0)), **perms).apply


BUILDERS: Dict[str, Callable[[LayerSpec, int], LayerFn]] = {
    "Conv2D": _conv,
    "FC": _fc,
    "Maxpool2D": _maxpool,
    "Avgpool2D": _avgpool_layer,
    "GlobalAvgpool2D": _global_avg,
    "GlobalMaxpool2D": _global_max,
    "Sum2D": _binary("add"),
    "Mul2D": _binary("mul"),
    "Concat": _concat,
    "Slice2D": _slice2d,
    "Reshape": _reshape,
    "Flatten": _reshape,
    "Squeeze": _reshape,
    "Resize": _resize,
    "layout_transform": _layout,
    "BatchMatMul": _batch_matmul,
    "LayerNorm": build_layernorm,
    "Lookup": build_lookup,
    "Softmax": build_softmax,
    "Requantize": build_requantize,
    "LRN": build_lrn,
    "GatherElements": build_gather_elements,
    **{cell: recurrent.build for cell in recurrent.GATES},   # LSTM / GRU / RNN (recurrent.py)
}
_BY_LOWER = {k.lower(): k for k in BUILDERS}


def build_layer(layer: Mapping, weights: Mapping[str, np.ndarray]) -> Tuple[LayerSpec, LayerFn]:
    """Validate one layer and return (its spec, its prepared closure)."""
    spec = LayerSpec(layer, weights)
    key = _BY_LOWER.get(spec.layer_name.lower())
    if key is None:
        raise CompileError(f"unknown layer_name {spec.layer_name!r}", node=spec.name, origin=spec.origin,
                           hint=f"the simulator runs {', '.join(sorted(BUILDERS))}; "
                                f"keep this node on the CPU or recompile")
    n_inputs = len(layer.get("inputs") or [])
    return spec, BUILDERS[key](spec, n_inputs)


def layer_list(meta: Mapping) -> List[Mapping]:
    layers = meta.get("layers")
    if not isinstance(layers, list):
        raise CompileError("program meta has no 'layers' list", node=str(meta.get("name", "?")),
                           hint="rebuild the binary with the compile step")
    return layers
