"""Compile a Nodes-JSON + Constants-JSON pair (ours or TVM's) into a model binary.

Reads the JSON pair alone. Produces the layer program in execution order, the tensor table,
fp16 weights in the layout each layer reads (OHWI / OI; FC weights permuted for an NHWC flatten),
an on-chip memory plan for ``num_tiles`` tiles of ``ocm_size`` bytes, and the arch parameters;
``artifact.pack`` turns that into bytes.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..errors import CompileError
from ..target import ArchProfile
from .memory import plan_memory

LAYER_NAMES = {  # JSON layer_name -> program layer_name
    "Conv2D": "Conv2D", "FC": "FC", "Maxpool2D": "Maxpool2D", "Avgpool2D": "Avgpool2D",
    "GlobalAvgpool2D": "GlobalAvgpool2D", "GlobalMaxpool2D": "GlobalMaxpool2D", "Sum2D": "Sum2D",
    "Mul2D": "Mul2D", "Concat": "Concat", "reshape": "Reshape", "nn.batch_flatten": "Flatten",
    "squeeze": "Squeeze", "Resize": "Resize", "layout_transform": "layout_transform",
    "Reshape": "Reshape", "Flatten": "Flatten", "Squeeze": "Squeeze",
}
ACTIVATIONS = ("none", "relu", "clamp", "leaky_relu", "prelu", "sigmoid", "tanh", "hard_sigmoid",
               "hard_swish", "silu")


@dataclasses.dataclass
class CompileOptions:
    num_tiles: int = 4
    ocm_size: int = 0x100000
    quantize: str = "float16"
    batch: Optional[int] = None
    arch: Optional[ArchProfile] = None

    def arch_dict(self) -> dict:
        arch = self.arch or ArchProfile()
        d = {f.name: getattr(arch, f.name) for f in dataclasses.fields(arch)}
        d.update(num_tiles=int(self.num_tiles), ocm_size=int(self.ocm_size))
        return d


# ------------------------------------------------------------------ attribute access (TVM style)
def _unwrap(v):
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    if isinstance(v, list) and len(v) == 1 and not isinstance(v[0], list):
        return v[0]
    return v


def _num(x):
    if isinstance(x, (int, float)):
        return x
    s = str(x)
    try:
        return int(s)
    except ValueError:
        return float(s)


class _Attrs:
    def __init__(self, node: dict, index: int):
        self.raw = node.get("attrs") or {}
        self.name = node.get("name", f"node {index}")
        self.origin = [str(o) for o in (_unwrap(self.raw.get("origin_nodes", [[]])) or [])] \
            if isinstance(_unwrap(self.raw.get("origin_nodes", [[]])), list) else \
            [str(_unwrap(self.raw.get("origin_nodes")))]

    def has(self, key):
        return key in self.raw

    def str(self, key, default=None):
        if key not in self.raw:
            if default is None:
                self.fail(f"missing attribute '{key}'")
            return default
        v = _unwrap(self.raw[key])
        return str(v)

    def ints(self, key, default=None, n=None):
        if key not in self.raw:
            if default is None:
                self.fail(f"missing attribute '{key}'")
            return list(default)
        v = _unwrap(self.raw[key])
        v = v if isinstance(v, list) else [v]
        try:
            out = [int(_num(x)) for x in v]
        except (TypeError, ValueError):
            self.fail(f"attribute '{key}' is not a list of integers: {self.raw[key]!r}")
        if n is not None and len(out) != n:
            self.fail(f"attribute '{key}' has {len(out)} values, expected {n}")
        return out

    def int(self, key, default=None):
        return self.ints(key, None if default is None else [default], 1)[0]

    def float(self, key, default=None):
        if key not in self.raw:
            if default is None:
                self.fail(f"missing attribute '{key}'")
            return float(default)
        try:
            return float(_num(_unwrap(self.raw[key])))
        except (TypeError, ValueError):
            self.fail(f"attribute '{key}' is not a number: {self.raw[key]!r}")

    def fail(self, msg):
        raise CompileError(msg, node=self.name, origin=self.origin,
                           hint="the Nodes-JSON must follow docs/json-format.md")


# ------------------------------------------------------------------ constants
def decode_const(consts: dict, name: str, a: _Attrs) -> np.ndarray:
    if name not in consts:
        a.fail(f"constant '{name}' is not in the Constants-JSON")
    c = consts[name]
    try:
        raw = base64.b64decode(c["data_base64"], validate=True)
        shape = [int(d) for d in c["shape"]]
        dtype = np.dtype(c.get("dtype", "float32")).newbyteorder("<")
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        a.fail(f"constant '{name}' is malformed ({exc})")
    if dtype.kind != "f":
        a.fail(f"constant '{name}' has dtype {c.get('dtype')} (float32 expected)")
    n = int(np.prod(shape, dtype=np.int64))
    if n * dtype.itemsize != len(raw):
        a.fail(f"constant '{name}' has {len(raw)} bytes but shape {shape} needs {n * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(np.float32)


def _squeeze_lead(arr: np.ndarray, rank: int) -> np.ndarray:
    while arr.ndim > rank and arr.shape[0] == 1:
        arr = arr[0]
    return arr


def to_fp16(arr: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(arr, dtype=np.float32).astype(np.float16)


# ------------------------------------------------------------------ layers
class _Builder:
    def __init__(self, consts: dict):
        self.consts = consts
        self.weights: Dict[str, np.ndarray] = {}
        self.wmeta: List[dict] = []

    def weight(self, name: str, arr: np.ndarray, layout: str, fp16: bool) -> str:
        data = to_fp16(arr) if fp16 else np.ascontiguousarray(arr, dtype=np.float32)
        if not np.all(np.isfinite(data)):
            raise CompileError(f"weight '{name}' has values that are not finite in "
                               f"{'fp16' if fp16 else 'fp32'}", hint="keep this layer on the CPU")
        self.weights[name] = data
        self.wmeta.append({"name": name, "shape": list(data.shape), "dtype": str(data.dtype), "layout": layout})
        return name


def _activation(a: _Attrs, b: _Builder, lname: str, channels: int, params: dict, weights: dict) -> None:
    act = a.str("activation_type", "none")
    if act not in ACTIVATIONS:
        a.fail(f"unknown activation_type '{act}'")
    params["activation"] = act
    ap = {}
    if act == "clamp":
        ap = {"min": a.float("activation_min"), "max": a.float("activation_max")}
    elif act == "leaky_relu":
        ap = {"alpha": a.float("activation_alpha")}
    elif act == "hard_sigmoid":
        ap = {"alpha": a.float("activation_alpha", 0.2), "beta": a.float("activation_beta", 0.5)}
    elif act == "prelu":
        slope = decode_const(b.consts, a.str("slope_const_name"), a).reshape(-1)
        if slope.size not in (1, channels):
            a.fail(f"prelu slope has {slope.size} values for {channels} channels")
        weights["slope"] = b.weight(f"{lname}.slope", slope, "C", fp16=False)
    params["activation_params"] = ap


def _conv(a, b, lname, in_shapes, params, weights):
    w = _squeeze_lead(decode_const(b.consts, a.str("kernel_const_name"), a), 4)
    if w.ndim != 4:
        a.fail(f"conv kernel has shape {list(w.shape)} (OHWI expected)")
    layout = a.str("kernel_layout", "OHWI")
    if layout == "OIHW":
        w = w.transpose(0, 2, 3, 1)
    elif layout != "OHWI":
        a.fail(f"kernel_layout '{layout}' is not supported (OHWI or OIHW)")
    o, kh, kw, ig = w.shape
    groups = a.int("groups", 1)
    cin = in_shapes[0][3]
    if ig * groups != cin or o % groups:
        a.fail(f"kernel {list(w.shape)} with groups={groups} does not fit {cin} input channels")
    params.update(strides=a.ints("strides", [1, 1], 2), padding=a.ints("padding", [0, 0, 0, 0], 4),
                  dilation=a.ints("dilation", [1, 1], 2), groups=groups, kernel_size=[kh, kw], channels=o)
    weights["kernel"] = b.weight(f"{lname}.kernel", w, "OHWI", fp16=True)
    bias = None
    if a.has("bias_const_name"):
        bias = decode_const(b.consts, a.str("bias_const_name"), a).reshape(-1)
        if bias.size != o:
            a.fail(f"bias has {bias.size} values for {o} output channels")
    if a.has("gamma_const_name"):  # TVM-style batch norm: y = (x - mean) / sqrt(var + eps) * gamma + beta
        g_ = decode_const(b.consts, a.str("gamma_const_name"), a).reshape(-1)
        be = decode_const(b.consts, a.str("beta_const_name"), a).reshape(-1)
        mu = decode_const(b.consts, a.str("mean_const_name"), a).reshape(-1)
        var = decode_const(b.consts, a.str("var_const_name"), a).reshape(-1)
        scale = g_ / np.sqrt(var + a.float("epsilon", 1e-5))
        weights["scale"] = b.weight(f"{lname}.scale", scale, "O", fp16=False)
        weights["shift"] = b.weight(f"{lname}.shift", be - mu * scale, "O", fp16=False)
    if bias is not None:
        weights["bias"] = b.weight(f"{lname}.bias", bias, "O", fp16=False)
    _activation(a, b, lname, o, params, weights)
    n, h, wd, _ = in_shapes[0]
    pt, pl, pb, pr = params["padding"]
    (sh, sw), (dh, dw) = params["strides"], params["dilation"]
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return [n, ho, wo, o], n * ho * wo * o * kh * kw * ig


def _fc(a, b, lname, in_shapes, params, weights):
    w = _squeeze_lead(decode_const(b.consts, a.str("kernel_const_name"), a), 2)
    if w.ndim != 2:
        a.fail(f"FC kernel has shape {list(w.shape)} (OI expected)")
    o, k = w.shape
    if a.str("weights_need_transform", "no") == "yes":
        fs = a.ints("flatten_shape") if a.has("flatten_shape") else a.ints("data_layout_shape")
        if len(fs) != 4 or int(np.prod(fs[1:])) != k:
            a.fail(f"weights_need_transform needs the NHWC shape flattened (got {fs} for K={k})")
        _, h, wd, c = fs
        w = w.reshape(o, c, h, wd).transpose(0, 2, 3, 1).reshape(o, k)
    if in_shapes[0][-1] != k:
        a.fail(f"FC kernel {list(w.shape)} does not fit an input of shape {in_shapes[0]}")
    weights["kernel"] = b.weight(f"{lname}.kernel", w, "OI", fp16=True)
    if a.has("bias_const_name"):
        bias = decode_const(b.consts, a.str("bias_const_name"), a).reshape(-1)
        if bias.size != o:
            a.fail(f"bias has {bias.size} values for {o} outputs")
        weights["bias"] = b.weight(f"{lname}.bias", bias, "O", fp16=False)
    _activation(a, b, lname, o, params, weights)
    return [in_shapes[0][0], o], in_shapes[0][0] * o * k


def _pool_out(size, k, s, p0, p1, d, ceil):
    span = size + p0 + p1 - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + p0:
        out -= 1
    return out


def _pool(a, b, lname, in_shapes, params, weights, avg):
    k = a.ints("pool_size") if a.has("pool_size") else a.ints("kernel_layout_shape")
    params.update(kernel_size=k, strides=a.ints("strides", [1, 1], 2), padding=a.ints("padding", [0, 0, 0, 0], 4),
                  ceil_mode=a.int("ceil_mode", 0))
    if avg:
        params["count_include_pad"] = a.int("count_include_pad", 0)
    else:
        params["dilation"] = a.ints("dilation", [1, 1], 2)
    d = params.get("dilation", [1, 1])
    n, h, w, c = in_shapes[0]
    p = params["padding"]
    ho = _pool_out(h, k[0], params["strides"][0], p[0], p[2], d[0], params["ceil_mode"])
    wo = _pool_out(w, k[1], params["strides"][1], p[1], p[3], d[1], params["ceil_mode"])
    return [n, ho, wo, c], 0


def _eltwise(a, b, lname, in_shapes, params, weights):
    out = list(in_shapes[0])
    if len(in_shapes) == 1:
        if not a.has("input_const_name"):
            a.fail("one input and no input_const_name")
        c = decode_const(b.consts, a.str("input_const_name"), a)
        if a.has("input_const_shape"):
            c = c.reshape(a.ints("input_const_shape"))
        c = _squeeze_lead(c, len(out)) if c.ndim > len(out) else c
        try:
            np.broadcast_shapes(c.shape, tuple(out))
        except ValueError:
            a.fail(f"constant of shape {list(c.shape)} does not broadcast to {out}")
        weights["operand"] = b.weight(f"{lname}.operand", c, "ND", fp16=True)
    else:
        try:
            out = list(np.broadcast_shapes(*[tuple(s) for s in in_shapes]))
        except ValueError:
            a.fail(f"input shapes {in_shapes} do not broadcast")
    _activation(a, b, lname, out[-1] if len(out) == 4 else (out[1] if len(out) > 1 else 1), params, weights)
    return out, 0


def compile_layer(index: int, node: dict, b: _Builder, in_shapes: List[List[int]]):
    a = _Attrs(node, index)
    lname_json = a.str("layer_name")
    layer_name = LAYER_NAMES.get(lname_json)
    if layer_name is None:
        a.fail(f"unknown layer_name '{lname_json}' (known: {', '.join(sorted(set(LAYER_NAMES)))})")
    lname = node.get("name", f"layer_{index}")
    params, weights = {}, {}
    if layer_name == "Conv2D":
        out, macs = _conv(a, b, lname, in_shapes, params, weights)
    elif layer_name == "FC":
        out, macs = _fc(a, b, lname, in_shapes, params, weights)
    elif layer_name in ("Maxpool2D", "Avgpool2D"):
        out, macs = _pool(a, b, lname, in_shapes, params, weights, layer_name == "Avgpool2D")
    elif layer_name in ("GlobalAvgpool2D", "GlobalMaxpool2D"):
        n, _, _, c = in_shapes[0]
        out, macs = [n, 1, 1, c], 0
    elif layer_name in ("Sum2D", "Mul2D"):
        out, macs = _eltwise(a, b, lname, in_shapes, params, weights)
    elif layer_name == "Concat":
        axis = a.int("axis")
        out = list(in_shapes[0])
        if any(len(s) != len(out) for s in in_shapes):
            a.fail(f"concat of tensors of different ranks {in_shapes}")
        out[axis] = sum(s[axis] for s in in_shapes)
        params["axis"], macs = axis, 0
    elif layer_name in ("Reshape", "Flatten", "Squeeze"):
        out = a.ints("newshape") if a.has("newshape") else a.ints("out_layout_shape")
        if out and out[0] != in_shapes[0][0]:  # batch changed by --batch
            out = [in_shapes[0][0]] + out[1:]
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1]))
            out = [int(np.prod(in_shapes[0])) // max(known, 1) if d == -1 else d for d in out]
        if int(np.prod(out)) != int(np.prod(in_shapes[0])):
            a.fail(f"cannot reshape {in_shapes[0]} to {out}")
        params["shape"], macs = out, 0
    elif layer_name == "Resize":
        s = a.ints("scales", n=2)
        n, h, w, c = in_shapes[0]
        out, macs = [n, h * s[0], w * s[1], c], 0
        params.update(scales=s, mode="nearest")
    else:  # layout_transform
        src, dst = a.str("src_layout"), a.str("dst_layout")
        perms = {("NCHW", "NHWC"): (0, 2, 3, 1), ("NHWC", "NCHW"): (0, 3, 1, 2)}
        if (src, dst) not in perms:
            a.fail(f"layout_transform {src}->{dst} is not supported")
        out = [in_shapes[0][i] for i in perms[(src, dst)]]
        params.update(src_layout=src, dst_layout=dst)
        macs = 0
    if a.has("out_layout_shape"):
        declared = a.ints("out_layout_shape")
        if declared and declared[1:] != out[1:]:
            a.fail(f"out_layout_shape {declared} disagrees with the computed output shape {out}")
    return {"name": lname, "layer_name": layer_name, "params": params, "weights": weights,
            "origin": a.origin, "macs": int(macs)}, out


def build_program(nodes_json: dict, consts_json: dict, options: Optional[CompileOptions] = None
                  ) -> Tuple[dict, Dict[str, np.ndarray]]:
    """The program (meta, weights) for a JSON pair; see docs/program.md."""
    options = options or CompileOptions()
    if options.quantize not in ("float16", "fp16"):
        raise CompileError(f"quantize={options.quantize!r} is not supported", hint="use float16")
    if not isinstance(nodes_json, dict) or not isinstance(nodes_json.get("nodes"), list):
        raise CompileError("the Nodes-JSON has no 'nodes' list")
    if not isinstance(consts_json, dict):
        raise CompileError("the Constants-JSON is not an object")
    b = _Builder(consts_json)
    tensors, layers, inputs = [], [], []
    node_tensor: Dict[int, int] = {}
    for idx, node in enumerate(nodes_json["nodes"]):
        if not isinstance(node, dict):
            raise CompileError(f"node {idx} is not an object")
        if node.get("op") == "input":
            a = _Attrs(node, idx)
            shape = a.ints("shape")
            if options.batch:
                shape = [options.batch] + shape[1:]
            layout = a.str("data_layout", "NCHW")
            tid = len(tensors)
            tensors.append({"id": tid, "name": str(node.get("name", f"input_{idx}")), "shape": shape,
                            "layout": layout})
            inputs.append({"name": tensors[tid]["name"], "tensor": tid, "shape": shape, "layout": layout})
            node_tensor[idx] = tid
            continue
        ins = []
        for ref in node.get("inputs", []):
            try:
                src = int(ref[0])
            except (TypeError, ValueError, IndexError):
                raise CompileError(f"malformed input reference {ref!r}", node=node.get("name", str(idx)))
            if src not in node_tensor:
                raise CompileError(f"input refers to node {src}, which is not defined before it",
                                   node=node.get("name", str(idx)))
            ins.append(node_tensor[src])
        if not ins:
            raise CompileError("layer has no inputs", node=node.get("name", str(idx)))
        layer, out_shape = compile_layer(idx, node, b, [tensors[t]["shape"] for t in ins])
        tid = len(tensors)
        layout = "NHWC" if len(out_shape) == 4 and layer["layer_name"] != "layout_transform" else \
            (layer["params"].get("dst_layout") or {2: "NC"}.get(len(out_shape), "ND"))
        if layer["layer_name"] in ("Reshape", "Flatten", "Squeeze") and len(out_shape) == 4:
            layout = "ND"
        tensors.append({"id": tid, "name": layer["name"], "shape": out_shape, "layout": layout})
        layer.update(index=len(layers), inputs=ins, outputs=[tid])
        layers.append(layer)
        node_tensor[idx] = tid
    outputs = []
    for k, head in enumerate(nodes_json.get("heads", [])):
        src = int(head[0])
        if src not in node_tensor:
            raise CompileError(f"head {k} refers to unknown node {src}")
        t = tensors[node_tensor[src]]
        outputs.append({"name": t["name"], "tensor": t["id"], "shape": t["shape"], "layout": t["layout"]})
    if not layers or not outputs:
        raise CompileError("the Nodes-JSON has no layers or no outputs (heads)")
    for t in tensors:
        t["nbytes"] = int(np.prod(t["shape"], dtype=np.int64)) * 2
    arch = options.arch_dict()
    memory = plan_memory(tensors, layers, inputs, outputs, b.weights, arch)
    meta = {"format": "onnx_mrvl.program", "program_version": 1,
            "name": str(nodes_json.get("subgraph_name", "mrvl_subgraph")),
            "batch_size": int(options.batch or nodes_json.get("batch_size", inputs[0]["shape"][0] if inputs else 1)),
            "quantize": "float16", "arch": arch, "inputs": inputs, "outputs": outputs, "tensors": tensors,
            "weights": b.wmeta, "layers": layers, "memory_plan": memory}
    return meta, b.weights


def compile_json(nodes_json: dict, consts_json: dict, options: Optional[CompileOptions] = None) -> bytes:
    """The model binary for a JSON pair."""
    from ..artifact import pack
    meta, weights = build_program(nodes_json, consts_json, options)
    return pack(meta, weights)
