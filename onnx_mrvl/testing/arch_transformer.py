"""Transformer-style graphs the way exporters write them, with seeded random weights (no downloads):
layer norms (opset-17 op, PyTorch's decomposition, tf2onnx's Keras decomposition, ConvNeXt's
channels-first form), GELU (Erf in PyTorch / HF orderings, tanh approximation, opset-20 op),
Softmax on any axis, and a post-LN encoder block built from them.

    python -m onnx_mrvl.testing.arch_transformer [--save DIR]    # region counts of every model (convert, default target)
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

F32 = onnx.TensorProto.FLOAT


class Net:
    """A small graph under construction: ``op`` adds a node and returns its output name."""

    def __init__(self, seed: int = 0, opset: int = 13):
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.k = 0

    def const(self, value, name: str = "c") -> str:
        self.k += 1
        arr = np.asarray(value)
        arr = arr.astype(np.float32) if arr.dtype == np.float64 else arr
        n = f"{name}_{self.k}"
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def op(self, op_type: str, inputs: Sequence[str], name: str = "", **attrs) -> str:
        self.k += 1
        name = f"{name or op_type.lower()}_{self.k}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [f"{name}_out"], name=name, **attrs))
        return f"{name}_out"

    def mean(self, x: str, axis: int) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", [x, self.const(np.array([axis], np.int64), "axes")], "mean", keepdims=1)
        return self.op("ReduceMean", [x], "mean", axes=[axis], keepdims=1)

    def linear(self, x: str, k: int, n: int, name: str = "fc") -> str:
        w = (self.rng.standard_normal((k, n)) * math.sqrt(1.0 / k)).astype(np.float32)
        y = self.op("MatMul", [x, self.const(w, f"{name}_w")], f"{name}_matmul")
        return self.op("Add", [y, self.const(self.rng.standard_normal(n) * 0.05, f"{name}_b")], f"{name}_bias")

    def model(self, name: str, inputs: List[Tuple[str, List[int]]], output: str = "output") -> onnx.ModelProto:
        """The model whose output (named ``output``) is the last node's."""
        self.nodes[-1].output[0] = output
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output, F32, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8 if self.opset <= 17 else 9 if self.opset <= 20 else 10
        return m


# ------------------------------------------------------------------ layer norms
def layernorm(n: Net, x: str, shape: Sequence[int], form: str = "op", axis: int = -1, affine: bool = True) -> str:
    """Layer norm of ``x`` over ``axis`` in exporter form: "op" (LayerNormalization, opset 17),
    "torch" (legacy exporter), "torch2sub" (x - mean written twice), "torch_rsqrt" ((x - mean) *
    torch.rsqrt(var + eps)), "tf" (tf2onnx Keras 2),
    "keras3" (tf2onnx Keras 3: -mean * inv + beta)."""
    rank = len(shape)
    a = axis % rank
    d = shape[a]
    bshape = [d] + [1] * (rank - 1 - a)
    gamma = n.rng.uniform(0.8, 1.2, d).astype(np.float32)
    beta = (n.rng.standard_normal(d) * 0.1).astype(np.float32)
    eps = n.const(np.array(1e-5, np.float32), "eps")
    if form == "op":
        return n.op("LayerNormalization", [x, n.const(gamma, "ln_g"), n.const(beta, "ln_b")], "ln",
                    axis=-1, epsilon=1e-5)
    m = n.mean(x, a)
    if form in ("torch", "torch2sub", "torch_rsqrt"):
        d1 = n.op("Sub", [x, m], "ln_sub")
        d2 = n.op("Sub", [x, m], "ln_sub") if form == "torch2sub" else d1
        v = n.mean(n.op("Pow", [d1, n.const(np.array(2.0, np.float32), "two")], "ln_pow"), a)
        s = n.op("Sqrt", [n.op("Add", [v, eps], "ln_eps")], "ln_sqrt")
        if form == "torch_rsqrt":     # (x - m) * torch.rsqrt(v + eps): Div(1, Sqrt)
            y = n.op("Mul", [d2, n.op("Div", [n.const(np.array(1.0, np.float32), "one"), s], "ln_rsqrt")], "ln_mul")
        else:
            y = n.op("Div", [d2, s], "ln_div")
        if affine:
            y = n.op("Mul", [n.const(gamma.reshape(bshape), "ln_g"), y], "ln_gamma")
            y = n.op("Add", [y, n.const(beta.reshape(bshape), "ln_b")], "ln_beta")
        return y
    if form in ("tf", "keras3"):
        dd = n.op("Sub", [x, m], "ln_sqdiff_sub")
        v = n.mean(n.op("Mul", [dd, dd], "ln_sqdiff_mul"), a)
        inv = n.op("Reciprocal", [n.op("Sqrt", [n.op("Add", [v, eps], "ln_eps")], "ln_sqrt")], "ln_rsqrt")
        if affine:
            inv = n.op("Mul", [inv, n.const(gamma.reshape(bshape), "ln_g")], "ln_gamma")
        xa = n.op("Mul", [x, inv], "ln_mul_x")
        if form == "keras3":
            res = n.op("Mul", [n.op("Neg", [m], "ln_neg_mean"), inv], "ln_res")
            if affine:
                res = n.op("Add", [res, n.const(beta.reshape(bshape), "ln_b")], "ln_res_beta")
            return n.op("Add", [xa, res], "ln_out")
        mb = n.op("Mul", [m, inv], "ln_mul_mean")
        c = n.op("Sub", [n.const(beta.reshape(bshape), "ln_b"), mb], "ln_sub_beta") if affine else \
            n.op("Neg", [mb], "ln_neg")
        return n.op("Add", [xa, c], "ln_out")
    raise ValueError(form)


def layernorm_block(form: str = "keras3", affine: bool = True, T: int = 16, D: int = 32, opset: int = 13,
                    seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D] -> Linear -> layer norm (``layernorm`` form, last axis) -> Linear -> [1, T, D]:
    a layer norm between the int8 layers of a QDQ export."""
    n = Net(seed, opset)
    h = layernorm(n, n.linear("x", D, D, "in_proj"), [1, T, D], form, affine=affine)
    n.linear(h, D, D, "out_proj")
    return n.model(f"layernorm_{form}", [("x", [1, T, D])])


def token_mean_head(T: int = 32, D: int = 32, classes: int = 10, opset: int = 13, seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D] -> Linear -> mean over the tokens (Keras GlobalAveragePooling1D: ReduceMean
    axis 1, keepdims 0) -> Linear [1, classes]: an encoder's pooled head."""
    n = Net(seed, opset)
    h = n.linear("x", D, D, "proj")
    m = n.op("ReduceMean", [h], "token_mean", axes=[1], keepdims=0) if opset < 18 else \
        n.op("ReduceMean", [h, n.const(np.array([1], np.int64), "axes")], "token_mean", keepdims=0)
    n.linear(m, D, classes, "head")
    return n.model("token_mean_head", [("x", [1, T, D])])


# ------------------------------------------------------------------ activations
def gelu(n: Net, x: str, form: str = "erf") -> str:
    """GELU: "erf" (PyTorch: Div, Erf, Add, Mul x, Mul 0.5), "erf_hf" (x * 0.5 first), "erf_tf"
    (Mul by 1/sqrt2, 0.5 * x last), "tanh" (Pow 3 form), "tanh_mul" (x*x*x), "op" / "op_tanh"
    (opset-20 Gelu)."""
    half, one = n.const(np.array(0.5, np.float32), "half"), n.const(np.array(1.0, np.float32), "one")
    if form in ("op", "op_tanh"):
        return n.op("Gelu", [x], "gelu", approximate="tanh" if form == "op_tanh" else "none")
    if form.startswith("erf"):
        if form == "erf_tf":
            s = n.op("Mul", [x, n.const(np.array(1 / math.sqrt(2), np.float32), "isqrt2")], "gelu_scale")
        else:
            s = n.op("Div", [x, n.const(np.array(math.sqrt(2), np.float32), "sqrt2")], "gelu_div")
        a = n.op("Add", [n.op("Erf", [s], "gelu_erf"), one], "gelu_add")
        if form == "erf":
            return n.op("Mul", [n.op("Mul", [x, a], "gelu_mul"), half], "gelu_half")
        if form == "erf_hf":
            return n.op("Mul", [n.op("Mul", [x, half], "gelu_xhalf"), a], "gelu_mul")
        return n.op("Mul", [n.op("Mul", [half, x], "gelu_halfx"), a], "gelu_mul")
    if form in ("tanh", "tanh_mul"):
        if form == "tanh":
            c = n.op("Pow", [x, n.const(np.array(3.0, np.float32), "three")], "gelu_pow")
        else:
            c = n.op("Mul", [n.op("Mul", [x, x], "gelu_sq"), x], "gelu_cube")
        c = n.op("Mul", [c, n.const(np.array(0.044715, np.float32), "k")], "gelu_k")
        u = n.op("Mul", [n.op("Add", [x, c], "gelu_inner"), n.const(np.array(math.sqrt(2 / math.pi), np.float32), "c")],
                 "gelu_c")
        a = n.op("Add", [n.op("Tanh", [u], "gelu_tanh"), one], "gelu_add")
        return n.op("Mul", [half, n.op("Mul", [x, a], "gelu_mul")], "gelu_half")
    raise ValueError(form)


def activation(n: Net, x: str, kind: str) -> str:
    """One standalone activation of ``kind`` as exporters write it."""
    if kind == "sigmoid":
        return n.op("Sigmoid", [x])
    if kind == "silu":
        return n.op("Mul", [x, n.op("Sigmoid", [x])], "silu")
    if kind == "tanh":
        return n.op("Tanh", [x])
    if kind == "elu":
        return n.op("Elu", [x], alpha=0.7)
    if kind == "leaky_relu":
        return n.op("LeakyRelu", [x], alpha=0.1)
    if kind == "prelu":          # torch.nn.PReLU(): one slope
        return n.op("PRelu", [x, n.const(np.array([0.2], np.float32), "slope")])
    if kind == "mish":
        return n.op("Mul", [x, n.op("Tanh", [n.op("Softplus", [x])])], "mish")
    if kind == "mish_op":
        return n.op("Mish", [x])
    if kind.startswith("gelu"):
        return gelu(n, x, kind[5:] or "erf")
    raise ValueError(kind)


# ------------------------------------------------------------------ models
def _encoder_layer(n: Net, x: str, ln: str, gelu_form: str, T: int, D: int, H: int) -> str:
    """One pre-LN encoder layer on [1, T, D] (the attention core as exporters write it)."""
    h = layernorm(n, x, [1, T, D], ln)
    heads = []
    for p in ("q", "k", "v"):
        t = n.linear(h, D, D, p)
        t = n.op("Reshape", [t, n.const(np.array([1, T, H, D // H], np.int64), "shape")], f"{p}_heads")
        heads.append(n.op("Transpose", [t], f"{p}_t", perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]))
    s = n.op("MatMul", heads[:2], "qk")
    s = n.op("Div", [s, n.const(np.array(math.sqrt(D // H), np.float32), "scale")], "qk_scale")
    s = n.op("Softmax", [s], "attn_softmax", axis=-1)
    o = n.op("MatMul", [s, heads[2]], "av")
    o = n.op("Reshape", [n.op("Transpose", [o], "av_t", perm=[0, 2, 1, 3]),
                         n.const(np.array([1, T, D], np.int64), "shape")], "merge_heads")
    x = n.op("Add", [x, n.linear(o, D, D, "proj")], "res1")
    h = layernorm(n, x, [1, T, D], ln)
    h = gelu(n, n.linear(h, D, 4 * D, "ffn1"), gelu_form)
    return n.op("Add", [x, n.linear(h, 4 * D, D, "ffn2")], "res2")


def encoder_block(seed: int = 0, ln: str = "torch", gelu_form: str = "erf", T: int = 16, D: int = 32,
                  H: int = 4, opset: int = None) -> onnx.ModelProto:
    """Pre-LN encoder layer on [1, T, D]: LayerNorm -> FC q/k/v -> heads -> QK^T / sqrt(d) ->
    Softmax -> AV -> FC -> residual Add -> LayerNorm -> FC -> GELU -> FC -> residual Add -> LayerNorm."""
    opset = opset or (20 if gelu_form.startswith("op") else 17 if ln == "op" else 13)
    n = Net(seed, opset)
    x = _encoder_layer(n, "input", ln, gelu_form, T, D, H)
    layernorm(n, x, [1, T, D], ln)
    return n.model("encoder_block", [("input", [1, T, D])], "output")


def encoder_stack(seed: int = 0, layers: int = 2, T: int = 16, D: int = 32, H: int = 4,
                  vocab: int = 0) -> onnx.ModelProto:
    """``layers`` pre-LN encoder layers on [1, T, D] and a final LayerNorm (BERT-base sized:
    layers=12, T=128, D=768, H=12, vocab=30522); ``vocab`` > 0 puts a word-embedding Gather
    ([vocab, D] table, int64 token ids [1, T] in) in front, as exporters leave it."""
    n = Net(seed, 13)
    x = "input"
    if vocab:
        table = (n.rng.standard_normal((vocab, D), dtype=np.float32) * np.float32(0.02))
        x = n.op("Gather", [n.const(table, "word_embeddings"), "input"], "embed", axis=0)
    for _ in range(layers):
        x = _encoder_layer(n, x, "torch", "erf", T, D, H)
    layernorm(n, x, [1, T, D], "torch")
    m = n.model("encoder_stack", [("input", [1, T] if vocab else [1, T, D])], "output")
    if vocab:
        m.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT64
    return m


def vit_like(seed: int = 0, ln: str = "torch", layers: int = 2, D: int = 32, H: int = 4, patch: int = 4,
             size: int = 16, classes: int = 10) -> onnx.ModelProto:
    """ViT-style classifier: patch Conv -> Reshape/Transpose to tokens -> class token Concat ->
    position Add -> ``layers`` encoder layers -> LayerNorm -> class token -> FC head -> Softmax."""
    n = Net(seed, 17 if ln == "op" else 13)
    P = (size // patch) ** 2
    T = P + 1
    w = (n.rng.standard_normal((D, 3, patch, patch)) * math.sqrt(1 / (3 * patch * patch))).astype(np.float32)
    x = n.op("Conv", ["input", n.const(w, "patch_w")], "patch_embed", kernel_shape=[patch, patch],
             strides=[patch, patch])
    x = n.op("Transpose", [n.op("Reshape", [x, n.const(np.array([1, D, P], np.int64), "shape")], "flatten")],
             "tokens", perm=[0, 2, 1])
    x = n.op("Concat", [n.const(n.rng.standard_normal((1, 1, D)) * 0.02, "cls"), x], "cat_cls", axis=1)
    x = n.op("Add", [x, n.const(n.rng.standard_normal((1, T, D)) * 0.02, "pos")], "pos_embed")
    for _ in range(layers):
        x = _encoder_layer(n, x, ln, "erf", T, D, H)
    x = layernorm(n, x, [1, T, D], ln)
    x = n.op("Reshape", [n.op("Slice", [x, n.const(np.array([0], np.int64), "s"), n.const(np.array([1], np.int64), "e"),
                                        n.const(np.array([1], np.int64), "a")], "cls_token"),
                         n.const(np.array([1, D], np.int64), "shape")], "cls_flat")
    n.op("Softmax", [n.linear(x, D, classes, "head")], "probs", axis=-1)
    return n.model("vit_like", [("input", [1, 3, size, size])], "output")


def convnext_block(seed: int = 0, form: str = "torch", C: int = 16, HW: int = 8, blocks: int = 1) -> onnx.ModelProto:
    """ConvNeXt-style block on NCHW: depthwise 7x7 -> channels-first LayerNorm (axis 1) -> 1x1 conv
    4C -> GELU -> 1x1 conv C -> residual Add; ``blocks`` of them in a row (a ConvNeXt stage)."""
    n = Net(seed, 17 if form == "op" else 13)
    x = "input"
    for _ in range(blocks):
        x = _convnext(n, x, form, C, HW)
    return n.model("convnext_block", [("input", [1, C, HW, HW])], "output")


def _convnext(n: Net, x: str, form: str, C: int, HW: int) -> str:
    w = (n.rng.standard_normal((C, 1, 7, 7)) * 0.1).astype(np.float32)
    y = n.op("Conv", [x, n.const(w, "dw")], "dwconv", group=C, kernel_shape=[7, 7], pads=[3, 3, 3, 3])
    if form == "op":   # the opset-17 export of a channels-first LN: Transpose -> LayerNormalization -> back
        y = n.op("Transpose", [y], "to_nhwc", perm=[0, 2, 3, 1])
        y = layernorm(n, y, [1, HW, HW, C], "op")
        y = n.op("Transpose", [y], "to_nchw", perm=[0, 3, 1, 2])
    else:
        y = layernorm(n, y, [1, C, HW, HW], form, axis=1)
    w1 = (n.rng.standard_normal((4 * C, C, 1, 1)) * math.sqrt(1 / C)).astype(np.float32)
    y = n.op("Conv", [y, n.const(w1, "pw1")], "pwconv1", kernel_shape=[1, 1])
    y = gelu(n, y, "erf")
    w2 = (n.rng.standard_normal((C, 4 * C, 1, 1)) * math.sqrt(1 / (4 * C))).astype(np.float32)
    y = n.op("Conv", [y, n.const(w2, "pw2")], "pwconv2", kernel_shape=[1, 1])
    return n.op("Add", [x, y], "residual")


def all_models() -> Dict[str, Callable[[], onnx.ModelProto]]:
    out = {f"encoder_{ln}_{gf}": (lambda ln=ln, gf=gf: encoder_block(0, ln, gf))
           for ln, gf in (("torch", "erf"), ("tf", "erf_tf"), ("op", "erf_hf"), ("torch", "tanh"),
                          ("op", "op"))}
    out.update({f"convnext_{f}": (lambda f=f: convnext_block(0, f)) for f in ("torch", "tf", "keras3", "op")})
    out.update({f"vit_like_{f}": (lambda f=f: vit_like(0, f)) for f in ("torch", "op")})
    return out


def region_count(model: onnx.ModelProto) -> Tuple[int, int]:
    """(regions, CPU nodes) of ``onnx_mrvl.convert(model)`` (default target, strict)."""
    import onnx_mrvl
    res = onnx_mrvl.convert(model)
    cpu = [x for x in res.model.graph.node if not x.op_type.startswith("Subgraph")]
    return len(res.subgraphs), len(cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="write each model to DIR/<name>.onnx")
    args = ap.parse_args(argv)
    for name, build in all_models().items():
        m = build()
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            onnx.save(m, os.path.join(args.save, f"{name}.onnx"))
        regions, cpu = region_count(m)
        print(f"{name:28s} regions {regions:3d}  CPU nodes {cpu:3d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
