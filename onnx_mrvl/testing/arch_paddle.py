"""PaddleOCR pieces the way paddle2onnx writes them, with seeded random weights.

``svtr_rec(seed, opset, qkv)``: a PP-OCRv3/v4/v5-style recognizer tail: a conv stem (HardSwish: the
HardSwish op from opset 14, ``HardSigmoid * x`` below, as paddle2onnx writes it), a 1x1 conv with
Swish (``Sigmoid * x``), ``flatten(2)`` as paddle2onnx's ``Shape -> Slice -> Concat -> Reshape`` chain,
``transpose([0, 2, 1])``, one SVTR global-mixing block (decomposed LayerNorm, fused qkv ``MatMul + Add
-> Reshape [0, -1, 3, H, d] -> Transpose [2, 0, 3, 1, 4]`` indexed by ``Slice(axis 0) -> Squeeze``
(``qkv="slice"``, paddle2onnx) or ``Split(axis 0) -> Squeeze`` (``qkv="split"``, torch.onnx's
``unbind``), ``q * scale``, softmax attention, ``Transpose [0, 2, 1, 3] -> Reshape [0, -1, C]``,
projection, residual; LayerNorm + Swish MLP + residual), then the CTC head (``MatMul + Add ->
Softmax``). Input ``x [1, 3, 16, 64]``, output ``[1, 64, classes]``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _B:
    def __init__(self, seed: int, opset: int):
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base):
        self.k += 1
        return f"{base}.{self.k}"

    def const(self, arr, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def node(self, op, ins, **attrs):
        n = self.name(op)
        self.nodes.append(helper.make_node(op, list(ins), [n + ".out"], name=n, **attrs))
        return n + ".out"

    def nodes_n(self, op, ins, k, **attrs):
        n = self.name(op)
        outs = [f"{n}.out{i}" for i in range(k)]
        self.nodes.append(helper.make_node(op, list(ins), outs, name=n, **attrs))
        return outs

    def w(self, shape, fan_in):
        return self.const((self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), "w")

    def squeeze(self, x, axes):
        if self.opset >= 13:
            return self.node("Squeeze", [x, self.const(np.array(axes, np.int64))])
        return self.node("Squeeze", [x], axes=list(axes))

    def conv(self, x, cin, cout, k, s):
        b = self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b")
        return self.node("Conv", [x, self.w((cout, cin, k, k), cin * k * k), b], kernel_shape=[k, k],
                         strides=[s, s], pads=[k // 2] * 4, dilations=[1, 1], group=1)

    def hardswish(self, x):
        if self.opset >= 14:
            return self.node("HardSwish", [x])
        return self.node("Mul", [x, self.node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])

    def swish(self, x):
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def layernorm(self, x, d):
        mean = self.node("ReduceMean", [x], axes=[-1])
        c = self.node("Sub", [x, mean])
        var = self.node("ReduceMean", [self.node("Pow", [c, self.const(np.float32(2.0))])], axes=[-1])
        std = self.node("Sqrt", [self.node("Add", [var, self.const(np.float32(1e-5))])])
        y = self.node("Div", [c, std])
        g = self.const((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), "ln_g")
        b = self.const((0.1 * self.rng.standard_normal(d)).astype(np.float32), "ln_b")
        return self.node("Add", [self.node("Mul", [y, g]), b])

    def linear(self, x, k, n):
        b = self.const((self.rng.standard_normal(n) * 0.05).astype(np.float32), "b")
        return self.node("Add", [self.node("MatMul", [x, self.w((k, n), k)]), b])


def svtr_rec(seed: int = 0, opset: int = 11, qkv: str = "slice", dim: int = 48, heads: int = 4,
             classes: int = 97) -> onnx.ModelProto:
    """paddle2onnx's PP-OCR recognizer tail with one SVTR block (see the module docstring)."""
    if qkv not in ("slice", "split"):
        raise ValueError(f"qkv must be 'slice' or 'split', not {qkv!r}")
    b = _B(seed, opset)
    x = b.hardswish(b.conv("x", 3, 16, 3, 2))
    x = b.hardswish(b.conv(x, 16, 32, 3, 2))                       # [1, 32, 4, 16]
    x = b.swish(b.conv(x, 32, dim, 1, 1))                          # [1, dim, 4, 16]
    # flatten(2): Shape -> Slice [0:2] -> Concat [.., -1] -> Reshape
    shp = b.node("Shape", [x])
    head = b.node("Slice", [shp, b.const(np.array([0], np.int64)), b.const(np.array([2], np.int64)),
                            b.const(np.array([0], np.int64))])
    x = b.node("Reshape", [x, b.node("Concat", [head, b.const(np.array([-1], np.int64))], axis=0)])
    z = b.node("Transpose", [x], perm=[0, 2, 1])                   # [1, 64, dim]
    d = dim // heads
    h = b.linear(b.layernorm(z, dim), dim, 3 * dim)
    h = b.node("Reshape", [h, b.const(np.array([0, -1, 3, heads, d], np.int64))])
    t = b.node("Transpose", [h], perm=[2, 0, 3, 1, 4])              # [3, 1, H, T, d]
    if qkv == "slice":
        parts = [b.node("Slice", [t, b.const(np.array([i], np.int64)), b.const(np.array([i + 1], np.int64)),
                                  b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))])
                 for i in range(3)]
    elif opset >= 13:
        parts = b.nodes_n("Split", [t, b.const(np.array([1, 1, 1], np.int64))], 3, axis=0)
    else:
        parts = b.nodes_n("Split", [t], 3, axis=0, split=[1, 1, 1])
    q, k, v = (b.squeeze(p, [0]) for p in parts)
    q = b.node("Mul", [q, b.const(np.array([d ** -0.5], np.float32))])
    att = b.node("Softmax", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])], axis=3)
    o = b.node("Transpose", [b.node("MatMul", [att, v])], perm=[0, 2, 1, 3])
    o = b.linear(b.node("Reshape", [o, b.const(np.array([0, -1, dim], np.int64))]), dim, dim)
    z = b.node("Add", [z, o])
    m = b.linear(b.swish(b.linear(b.layernorm(z, dim), dim, 2 * dim)), 2 * dim, dim)
    z = b.node("Add", [z, m])
    y = b.node("Softmax", [b.linear(z, dim, classes)], axis=2)
    b.nodes.append(helper.make_node("Identity", [y], ["y"], name="out"))
    graph = helper.make_graph(b.nodes, f"svtr_rec_{qkv}_o{opset}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, classes])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model
