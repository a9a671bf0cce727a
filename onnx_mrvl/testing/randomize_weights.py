"""Seeded random weights for the ONNX model-zoo architectures shipped in the onnx wheel.

The ``light_*.onnx`` models under ``onnx/backend/test/data/light`` keep the real architectures
but fill every weight with one constant (through ConstantOfShape), so every class gets the same
score. ``randomize_weights`` replaces every float weight (initializers, IR-3 initializers listed
as inputs, and ConstantOfShape fills of a constant shape) with seeded random values scaled to
keep activations O(1) through deep nets: He scaling by fan-in for Conv/Gemm/MatMul weights,
BatchNorm scale and variance ~ U(0.5, 1.5), means and biases ~ N(0, 0.1).

CLI: ``python -m onnx_mrvl.testing.randomize_weights MODEL.onnx -o OUT.onnx --seed 0``
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_mrvl.feeds import random_feeds

ZOO = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512")
PASS_THROUGH = ("Unsqueeze", "Reshape", "Identity", "Cast", "Squeeze", "Flatten", "Transpose")
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


def zoo_model_paths() -> Dict[str, str]:
    """{architecture name: path} of the nine light model-zoo files in the onnx wheel."""
    base = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    out = {}
    for name in ZOO:
        path = os.path.join(base, f"light_{name}.onnx")
        if os.path.exists(path):
            out[name] = path
    return out


def _ends_branch(node, consumers) -> bool:
    """True when a BatchNormalization output is summed with another branch (residual)."""
    return any(c.op_type in ("Sum", "Add") for c, _ in consumers.get(node.output[0], []))


def _role(name: str, consumers, shape) -> tuple:
    """(kind, fan_in) of a weight from the first real consumer it reaches."""
    seen = 0
    frontier = [name]
    while frontier and seen < 8:
        seen += 1
        cur = frontier.pop(0)
        for node, idx in consumers.get(cur, []):
            op = node.op_type
            if op in PASS_THROUGH and idx == 0:
                frontier.extend(node.output)
                continue
            if op in ("Conv", "ConvTranspose") and idx == 1:
                return "he", int(np.prod(shape[1:])) if len(shape) > 1 else 1
            if op == "Gemm" and idx == 1 and len(shape) == 2:
                trans = any(a.name == "transB" and a.i for a in node.attribute)
                return "he", int(shape[1] if trans else shape[0])
            if op == "MatMul" and idx == 1 and len(shape) >= 2:
                return "he", int(shape[-2])
            if op == "BatchNormalization":
                if idx == 1 and _ends_branch(node, consumers):
                    return "damped", 0
                return ("uniform", 0) if idx in (1, 4) else ("small", 0)
            if op in ("Mul", "Div"):
                return "uniform", 0
            return "small", 0
    return "small", 0


def _copy(t: onnx.TensorProto) -> onnx.TensorProto:
    c = onnx.TensorProto()
    c.CopyFrom(t)
    return c


def _sample(rng, kind, fan_in, shape, dtype) -> np.ndarray:
    if kind == "he":  # He-uniform: U(-a, a) with the He variance 2 / fan_in (fast to draw)
        a = np.float32(np.sqrt(6.0 / max(fan_in, 1)))
        v = rng.random(shape, dtype=np.float32)
        v *= 2 * a
        v -= a
    elif kind == "damped":  # residual branch ends: keep the sum's variance from doubling
        v = rng.uniform(0.1, 0.3, size=shape).astype(np.float32)
    elif kind == "uniform":
        v = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    else:
        v = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
    return v.astype(dtype, copy=False)


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` whose float weights are seeded random values (see module doc)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in g.initializer}
    consumers: Dict[str, list] = {}
    for node in g.node:
        for k, i in enumerate(node.input):
            consumers.setdefault(i, []).append((node, k))
    # ConstantOfShape fills of a constant shape become (random) initializers
    fills = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            value = next((helper.get_attribute_value(a) for a in node.attribute
                          if a.name == "value"), None)
            dtype = value.data_type if value is not None else onnx.TensorProto.FLOAT
            if dtype in FLOATS:
                shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
                fills.append((node, shape, dtype))
    drop = {id(n) for n, _, _ in fills}
    kept = [n for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(kept)
    input_names = {vi.name for vi in g.input}
    new = []
    for t in g.initializer:
        if t.data_type in FLOATS:
            shape = tuple(int(d) for d in t.dims)
            kind, fan = _role(t.name, consumers, shape)
            arr = _sample(rng, kind, fan, shape, helper.tensor_dtype_to_np_dtype(t.data_type))
            new.append((t.name, arr))
        else:
            new.append(t)  # non-float initializers (shapes, indices) unchanged
    for node, shape, dtype in fills:
        name = node.output[0]
        kind, fan = _role(name, consumers, shape)
        arr = _sample(rng, kind, fan, shape, helper.tensor_dtype_to_np_dtype(dtype))
        new.append((name, arr))
        if m.ir_version < 4 and name not in input_names:  # IR 3: initializers are inputs too
            g.input.append(helper.make_tensor_value_info(name, dtype, list(shape)))
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    new = [t for t in new if (t[0] if isinstance(t, tuple) else t.name) in used]
    keep_names = {t[0] if isinstance(t, tuple) else t.name for t in new}
    inputs = [vi for vi in g.input if vi.name not in inits or vi.name in keep_names]
    del g.input[:]
    g.input.extend(inputs)
    kept = [t if isinstance(t, tuple) else _copy(t) for t in new]
    del g.initializer[:]
    for t in kept:  # written in place: no second copy of hundreds of MB
        if isinstance(t, tuple):
            name, arr = t
            dst = g.initializer.add()
            dst.name = name
            dst.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
            dst.dims.extend(arr.shape)
            dst.raw_data = arr.tobytes()
        else:
            g.initializer.append(t)
    return m


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """Seeded standard-normal values for every true graph input (symbolic dims -> 1)."""
    return random_feeds(model, seed)


def load_zoo(name: str, seed: int = 0) -> onnx.ModelProto:
    """The named zoo architecture with seeded random weights."""
    paths = zoo_model_paths()
    if name not in paths:
        raise KeyError(f"unknown zoo model {name!r}; known: {sorted(paths)}")
    return randomize_weights(onnx.load(paths[name]), seed)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="input .onnx (or a zoo name: " + ", ".join(ZOO) + ")")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    src = zoo_model_paths().get(args.model, args.model)
    out = randomize_weights(onnx.load(src), args.seed)
    onnx.save(out, args.output)
    print(f"wrote {args.output} ({len(out.graph.initializer)} initializers, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
