"""Float CNNs with the convs an int8 import takes as multi-pass layers (onnx_mrvl/int8_conv_passes.py):
grouped convs that are not depthwise (ResNeXt / RegNet), a ViT patch embedding (16x16 stride 16),
an audio front end (1x64 stride 16, 2-D and 1-D), kernels above ``max_kernel`` with padding and a
stride above ``max_stride`` whose begin padding is no multiple of it, a large depthwise kernel, and convs that share their
input (onnxruntime runs those in float with S8 activations). Seeded weights; quantized by the tests
with ``int8_zoo.quantize_static_qdq``."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from .models import GraphBuilder

F32 = TensorProto.FLOAT


def _conv(g: GraphBuilder, x: str, cin: int, cout: int, k, name: str, stride=None, pads=None,
          group: int = 1, dilation=None) -> str:
    k = tuple(k)
    stride, pads = stride or (1,) * len(k), pads or (0,) * (2 * len(k))
    w = g.const(f"{name}.weight", g.he((cout, cin // group, *k), cin // group * int(np.prod(k))))
    b = g.const(f"{name}.bias", (g.rng.standard_normal(cout) * 0.1).astype(np.float32))
    attrs = dict(kernel_shape=list(k), strides=list(stride), pads=list(pads), group=group)
    if dilation:
        attrs["dilations"] = list(dilation)
    return g.node("Conv", [x, w, b], name, **attrs)


def grouped_cnn(seed: int = 0) -> onnx.ModelProto:
    """[1,16,12,12]: 3x3 group 4, 1x1 group 8, 3x3 stride 2 group 2 (each with ReLU but the last)."""
    g = GraphBuilder(seed, 13)
    x = g.relu(_conv(g, "input", 16, 32, (3, 3), "g4", pads=(1, 1, 1, 1), group=4), "r1")
    x = g.relu(_conv(g, x, 32, 32, (1, 1), "g8", group=8), "r2")
    _conv(g, x, 32, 16, (3, 3), "g2", stride=(2, 2), pads=(1, 1, 1, 1), group=2)
    g.nodes[-1].output[0] = "output"
    return g.model("grouped_cnn", [("input", F32, [1, 16, 12, 12])], [("output", F32, [1, 16, 6, 6])])


def patch_embed(seed: int = 0) -> onnx.ModelProto:
    """[1,3,64,64]: ViT patch Conv 16x16 stride 16, ReLU, 1x1 conv."""
    g = GraphBuilder(seed, 13)
    x = g.relu(_conv(g, "input", 3, 32, (16, 16), "patch", stride=(16, 16)), "r1")
    _conv(g, x, 32, 16, (1, 1), "proj")
    g.nodes[-1].output[0] = "output"
    return g.model("patch_embed", [("input", F32, [1, 3, 64, 64])], [("output", F32, [1, 16, 4, 4])])


def wave_front(seed: int = 0, one_d: bool = False) -> onnx.ModelProto:
    """[1,1,1,4000]: Conv 1x64 stride 16, ReLU, Conv 1x3 pads 1 (or [1,1,4000], Conv1d 64 stride 16
    pads 24, ReLU, Conv1d 3 pads 1)."""
    g = GraphBuilder(seed, 13)
    if one_d:
        # pads 24 > max_pad: 2 blocks of 16 after the space-to-depth (8 leading zero taps)
        x = g.relu(_conv(g, "input", 1, 16, (64,), "front", stride=(16,), pads=(24, 24)), "r1")
        _conv(g, x, 16, 8, (3,), "conv1", pads=(1, 1))
        shapes = ([1, 1, 4000], [1, 8, 250])
    else:
        x = g.relu(_conv(g, "input", 1, 16, (1, 64), "front", stride=(1, 16)), "r1")
        _conv(g, x, 16, 8, (1, 3), "conv1", pads=(0, 1, 0, 1))
        shapes = ([1, 1, 1, 4000], [1, 8, 1, 247])
    g.nodes[-1].output[0] = "output"
    return g.model("wave_front", [("input", F32, shapes[0])], [("output", F32, shapes[1])])


def big_kernels(seed: int = 0) -> onnx.ModelProto:
    """[1,8,40,20]: Conv 9x9 pads 4 (2x2 passes), ReLU, Conv 11x3 stride (10, 1) pads (3, 1, 3, 1)
    (space-to-depth by 10 rows with 7 leading zero taps), Conv 3x8 dilation (1, 2) group 2."""
    g = GraphBuilder(seed, 13)
    x = g.relu(_conv(g, "input", 8, 16, (9, 9), "k9", pads=(4, 4, 4, 4)), "r1")
    x = g.relu(_conv(g, x, 16, 16, (11, 3), "k11s10", stride=(10, 1), pads=(3, 1, 3, 1)), "r2")
    _conv(g, x, 16, 8, (3, 8), "k3x8", pads=(1, 7, 1, 7), group=2, dilation=(1, 2))
    g.nodes[-1].output[0] = "output"
    return g.model("big_kernels", [("input", F32, [1, 8, 40, 20])], [("output", F32, [1, 8, 4, 20])])


def aspp(seed: int = 0) -> onnx.ModelProto:
    """DeepLabV3's ASPP on a [1, 16, 24, 24] map: 3x3 convs at dilation 12 (pads 12) and (24, 6)
    (pads (24, 6)) beside a 1x1 conv, Concat, 1x1 head: dilations beyond ``max_dilation`` (8), one
    tap per pass along such an axis."""
    g = GraphBuilder(seed, 13)
    x = g.relu(_conv(g, "input", 8, 16, (3, 3), "stem", pads=(1, 1, 1, 1)), "stem_relu")
    a = g.relu(_conv(g, x, 16, 8, (3, 3), "rate12", pads=(12, 12, 12, 12), dilation=(12, 12)), "ra")
    b = g.relu(_conv(g, x, 16, 8, (3, 3), "rate24x6", pads=(24, 6, 24, 6), dilation=(24, 6)), "rb")
    c = g.relu(_conv(g, x, 16, 8, (1, 1), "pw"), "rc")
    _conv(g, g.node("Concat", [a, b, c], "cat", axis=1), 24, 8, (1, 1), "head")
    g.nodes[-1].output[0] = "output"
    return g.model("aspp", [("input", F32, [1, 8, 24, 24])], [("output", F32, [1, 8, 24, 24])])


def shared_input(seed: int = 0) -> onnx.ModelProto:
    """A stem conv whose output three convs read (9x9, 3x3 group 4, 1x1), Concat, 1x1 conv: with S8
    activations onnxruntime runs the three readers in float (their input DQ is shared)."""
    g = GraphBuilder(seed, 13)
    x = g.relu(_conv(g, "input", 3, 16, (3, 3), "stem", pads=(1, 1, 1, 1)), "stem_relu")
    a = _conv(g, x, 16, 8, (9, 9), "k9", pads=(4, 4, 4, 4))
    b = g.relu(_conv(g, x, 16, 16, (3, 3), "g4", pads=(1, 1, 1, 1), group=4), "g4_relu")
    c = _conv(g, x, 16, 8, (1, 1), "pw")
    _conv(g, g.node("Concat", [a, b, c], "cat", axis=1), 32, 8, (1, 1), "head")
    g.nodes[-1].output[0] = "output"
    return g.model("shared_input", [("input", F32, [1, 3, 20, 20])], [("output", F32, [1, 8, 20, 20])])


def depthwise_large(seed: int = 0) -> onnx.ModelProto:
    """[1,16,20,20]: depthwise 11x11 pads 5 (RepLKNet-style; 2x2 passes), ReLU, 1x1 conv."""
    g = GraphBuilder(seed, 13)
    x = g.relu(_conv(g, "input", 16, 16, (11, 11), "dw11", pads=(5, 5, 5, 5), group=16), "r1")
    _conv(g, x, 16, 8, (1, 1), "pw")
    g.nodes[-1].output[0] = "output"
    return g.model("depthwise_large", [("input", F32, [1, 16, 20, 20])], [("output", F32, [1, 8, 20, 20])])


ALL = {"grouped_cnn": grouped_cnn, "patch_embed": patch_embed, "wave_front": wave_front,
       "wave_front_1d": lambda seed=0: wave_front(seed, one_d=True), "big_kernels": big_kernels,
       "depthwise_large": depthwise_large, "shared_input": shared_input, "aspp": aspp}
