"""wav2vec2 / HuBERT-style speech encoders as torch.onnx writes them, seeded random weights:
the raw-waveform Conv1d feature extractor (no bias), GroupNorm after the first conv (wav2vec2-base's
``feat_extract_norm="group"``: one group per channel) in the TorchScript exporter's form
(``Reshape [0, G, -1] -> InstanceNormalization(ones, zeros) -> Reshape(Shape(x)) -> Mul(gamma) ->
Add(beta)``) or as the opset-21 ``GroupNormalization`` op, GELU (Erf form), then the feature
projection (LayerNorm, Linear) and post-LN transformer layers (wav2vec2-base order).

    python -m onnx_mrvl.testing.arch_wav2vec      # region count
"""
from __future__ import annotations

import math
import sys
from typing import Dict, Sequence

import numpy as np
import onnx

from .arch_speech import mha_block as _mha, speech_model as _strict_model
from .arch_transformer import Net, gelu, layernorm

F32 = onnx.TensorProto.FLOAT


def _model(n: Net, name: str, inputs, outputs: Dict[str, str]) -> onnx.ModelProto:
    """arch_speech's model; with the opset-21 GroupNormalization (a function op that onnx's strict
    shape inference does not expand) shapes are inferred without strict mode, IR 10."""
    if not any(x.op_type == "GroupNormalization" for x in n.nodes):
        return _strict_model(n, name, inputs, outputs)
    rename = {t: out for out, t in outputs.items()}
    for node in n.nodes:
        node.output[:] = [rename.get(o, o) for o in node.output]
        node.input[:] = [rename.get(x, x) for x in node.input]
    g = onnx.helper.make_graph(n.nodes, name, [onnx.helper.make_tensor_value_info(x, e, s) for x, e, s in inputs],
                               [onnx.helper.make_tensor_value_info(o, F32, None) for o in outputs], n.inits)
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", n.opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def _conv1d(n: Net, x: str, cin: int, cout: int, k: int, stride: int, name: str) -> str:
    w = (n.rng.standard_normal((cout, cin, k)) * math.sqrt(2.0 / (cin * k))).astype(np.float32)
    return n.op("Conv", [x, n.const(w, f"{name}_w")], name, kernel_shape=[k], strides=[stride], pads=[0, 0],
                dilations=[1], group=1)


def group_norm(n: Net, x: str, C: int, groups: int, form: str = "torch") -> str:
    """GroupNorm of [N, C, L] with ``groups`` groups: "torch" (TorchScript exporter, opset <= 17:
    InstanceNormalization on [N, G, C/G * L]), "op" (opset-21 GroupNormalization, per-channel affine)."""
    gamma = (1.0 + 0.1 * n.rng.standard_normal(C)).astype(np.float32)
    beta = (0.1 * n.rng.standard_normal(C)).astype(np.float32)
    if form == "op":
        return n.op("GroupNormalization", [x, n.const(gamma, "gn_scale"), n.const(beta, "gn_bias")], "group_norm",
                    num_groups=groups, epsilon=1e-5)
    r = n.op("Reshape", [x, n.const(np.array([0, groups, -1], np.int64), "gn_shape")], "gn_reshape")
    r = n.op("InstanceNormalization", [r, n.const(np.ones(groups, np.float32), "gn_ones"),
                                       n.const(np.zeros(groups, np.float32), "gn_zeros")], "gn_instnorm", epsilon=1e-5)
    r = n.op("Reshape", [r, n.op("Shape", [x], "gn_in_shape")], "gn_reshape_back")
    r = n.op("Mul", [r, n.const(gamma.reshape(C, 1), "gn_gamma")], "gn_mul")
    return n.op("Add", [r, n.const(beta.reshape(C, 1), "gn_beta")], "gn_add")


def frontend(seed: int = 0, samples: int = 800, C: int = 32, norm: str = "torch",
             convs: Sequence = ((10, 5), (3, 2), (3, 2), (2, 2))) -> onnx.ModelProto:
    """The feature extractor alone: input_values [1, samples] -> Unsqueeze -> conv stack (GroupNorm
    after the first) -> extract_features [1, C, T']."""
    n = Net(seed, 21 if norm == "op" else 17)
    x = n.op("Unsqueeze", ["input_values", n.const(np.array([1], np.int64), "axes")], "unsqueeze")
    cin = 1
    for i, (k, s) in enumerate(convs):
        x = _conv1d(n, x, cin, C, k, s, f"conv{i}")
        if i == 0:
            x = group_norm(n, x, C, C, norm)
        x = gelu(n, x, "erf")
        cin = C
    return _model(n, "wav2vec2_frontend", [("input_values", F32, [1, samples])], {"extract_features": x})


def wav2vec2_encoder(seed: int = 0, samples: int = 800, C: int = 32, D: int = 32, H: int = 4, layers: int = 1,
                     norm: str = "torch", ln: str = "op") -> onnx.ModelProto:
    """Feature extractor -> Transpose -> LayerNorm -> feature projection -> LayerNorm -> post-LN
    transformer layers -> last_hidden_state [1, T', D] (the grouped positional conv left out)."""
    n = Net(seed, 21 if norm == "op" else 17)
    x = n.op("Unsqueeze", ["input_values", n.const(np.array([1], np.int64), "axes")], "unsqueeze")
    cin, L = 1, samples
    for i, (k, s) in enumerate(((10, 5), (3, 2), (3, 2), (2, 2))):
        x = _conv1d(n, x, cin, C, k, s, f"conv{i}")
        L = (L - k) // s + 1
        if i == 0:
            x = group_norm(n, x, C, C, norm)
        x = gelu(n, x, "erf")
        cin = C
    x = n.op("Transpose", [x], "transpose", perm=[0, 2, 1])
    x = layernorm(n, x, [1, L, C], ln)
    x = n.linear(x, C, D, "feature_projection")
    x = layernorm(n, x, [1, L, D], ln)
    for _ in range(layers):
        a = _mha(n, x, L, D, H)
        x = layernorm(n, n.op("Add", [x, a], "attn_residual"), [1, L, D], ln)
        h = gelu(n, n.linear(x, D, 4 * D, "intermediate"), "erf")
        x = layernorm(n, n.op("Add", [x, n.linear(h, 4 * D, D, "output")], "ffn_residual"), [1, L, D], ln)
    return _model(n, "wav2vec2_encoder", [("input_values", F32, [1, samples])], {"last_hidden_state": x})


def all_models() -> Dict[str, object]:
    return {"wav2vec2_frontend": frontend, "wav2vec2_frontend_gn_op": lambda: frontend(norm="op"),
            "wav2vec2_encoder": wav2vec2_encoder}


def main(argv: Sequence[str] = None) -> int:
    from .arch_transformer import region_count
    for name, build in all_models().items():
        print(name, region_count(build()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
