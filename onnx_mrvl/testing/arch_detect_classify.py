"""Detection and classification architectures written the way real exporters write them
(torch.onnx, Ultralytics YOLO, timm, tf2onnx), small inputs and seeded random weights.

Every builder is ``name(seed=0) -> onnx.ModelProto``: static batch 1, float32 NCHW input ``"input"``,
shapes inferred (strict), runs in onnxruntime. ``ALL`` maps names to builders. (Over the usual
~400 lines: a catalog of independent builders.)
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from .models import GraphBuilder

F32 = TensorProto.FLOAT


class B(GraphBuilder):
    """GraphBuilder with the exporter idioms used below (auto-numbered names)."""

    def __init__(self, seed=0, opset=13):
        super().__init__(seed, opset)
        self.k = 0

    def n(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def op(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs):
        return self.node(op, inputs, self.n(op.lower()), n_out=n_out, **attrs)

    def c(self, value) -> str:
        return self.const(self.n("const"), np.asarray(value))

    def i64(self, *v) -> str:
        return self.c(np.array(v, np.int64))

    def cba(self, x, cin, cout, k=3, s=1, group=1, act="silu", bn="fold", pads=None):
        """Conv (+ BN unfolded or folded into the bias) + activation."""
        name = self.n("conv")
        y = self.conv(x, cin, cout, k, name, stride=s, group=group, bias=(bn != "unfold"), pads=pads)
        y = self.bn(y, cout, name + "_bn") if bn == "unfold" else y
        return {"silu": self.silu, "relu": self.relu}[act](y, self.n(act)) if act else y

    def split(self, x, sizes, axis=1):
        if self.opset >= 13:
            return self.op("Split", [x, self.i64(*sizes)], n_out=len(sizes), axis=axis)
        return self.op("Split", [x], n_out=len(sizes), axis=axis, split=list(sizes))

    def resize(self, x, scales=None, sizes=None):
        roi = "" if self.opset >= 13 else self.c(np.zeros(0, np.float32))
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        if sizes is not None:
            empty = "" if self.opset >= 13 else self.c(np.zeros(0, np.float32))
            return self.op("Resize", [x, roi, empty, self.i64(*sizes)], **attrs)
        return self.op("Resize", [x, roi, self.c(np.array(scales, np.float32))], **attrs)

    def linear(self, x, k, n, bias=True):
        y = self.op("MatMul", [x, self.c(self.he((k, n), k, 0.7))])
        return self.op("Add", [y, self.c((self.rng.standard_normal(n) * 0.05).astype(np.float32))]) if bias else y

    def finish(self, name, in_shape, outputs: List[str], out_shapes=None) -> onnx.ModelProto:
        shapes = out_shapes or [None] * len(outputs)
        m = self.model(name, [("input", F32, list(in_shape))], [(o, F32, s) for o, s in zip(outputs, shapes)])
        onnx.checker.check_model(m, full_check=True)
        return m


# ------------------------------------------------------------------ YOLO
def _bottleneck(b, x, c, shortcut=True, bn="fold"):
    y = b.cba(b.cba(x, c, c, 3, bn=bn), c, c, 3, bn=bn)
    return b.op("Add", [x, y]) if shortcut else y


def _c3(b, x, cin, cout, bn):
    h = cout // 2
    a = _bottleneck(b, b.cba(x, cin, h, 1, bn=bn), h, bn=bn)
    c = b.cba(x, cin, h, 1, bn=bn)
    return b.cba(b.op("Concat", [a, c], axis=1), 2 * h, cout, 1, bn=bn)


def _c2f(b, x, cin, cout, bn="fold", n=1, shortcut=True):
    h = cout // 2
    y = list(b.split(b.cba(x, cin, 2 * h, 1, bn=bn), [h, h]))
    for _ in range(n):
        y.append(_bottleneck(b, y[-1], h, shortcut, bn))
    return b.cba(b.op("Concat", y, axis=1), (2 + n) * h, cout, 1, bn=bn)


def _sppf(b, x, c, bn="fold"):
    h = c // 2
    y = [b.cba(x, c, h, 1, bn=bn)]
    for _ in range(3):
        y.append(b.op("MaxPool", [y[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return b.cba(b.op("Concat", y, axis=1), 4 * h, c, 1, bn=bn)


def yolov5_like(seed=0, nc=80, size=128, opset=13):
    """YOLOv5s-style (opset 13): unfolded BN, C3, SPPF, Resize by scales, 5-D head with Sigmoid,
    Split (split as input), grid/anchor decode, output [1, N, nc + 5]."""
    b = B(seed, opset)
    x = b.cba("input", 3, 16, 3, 2, bn="unfold")             # 64
    x = b.cba(x, 16, 16, 3, 2, bn="unfold")                  # 32
    x = b.cba(x, 16, 32, 3, 2, bn="unfold")                  # 16 = P3 (stride 8)
    p3 = _c3(b, x, 32, 32, "unfold")
    x = b.cba(p3, 32, 64, 3, 2, bn="unfold")                 # 8
    p4 = _sppf(b, _c3(b, x, 64, 64, "unfold"), 64, "unfold")
    up = b.resize(b.cba(p4, 64, 32, 1, bn="unfold"), scales=[1, 1, 2, 2])
    n3 = _c3(b, b.op("Concat", [up, p3], axis=1), 64, 32, "unfold")
    n4 = _c3(b, b.op("Concat", [b.cba(n3, 32, 32, 3, 2, bn="unfold"), p4], axis=1), 96, 64, "unfold")
    no, outs = nc + 5, []
    for f, cin, stride in ((n3, 32, 8), (n4, 64, 16)):
        hw = size // stride
        p = b.conv(f, cin, 3 * no, 1, b.n("detect"), gain=0.5)
        p = b.op("Reshape", [p, b.i64(1, 3, no, hw, hw)])
        p = b.op("Sigmoid", [b.op("Transpose", [p], perm=[0, 1, 3, 4, 2])])
        xy, wh, conf = b.split(p, [2, 2, nc + 1], axis=4)
        gy, gx = np.meshgrid(np.arange(hw), np.arange(hw), indexing="ij")
        grid = (np.stack([gx, gy], -1)[None, None] - 0.5).astype(np.float32)
        xy = b.op("Mul", [b.op("Add", [b.op("Mul", [xy, b.c(np.float32(2))]), b.c(grid)]), b.c(np.float32(stride))])
        anchors = (np.array([[10, 13], [16, 30], [33, 23]], np.float32) * stride / 8).reshape(1, 3, 1, 1, 2)
        wh = b.op("Mul", [b.op("Pow", [b.op("Mul", [wh, b.c(np.float32(2))]), b.c(np.float32(2))]), b.c(anchors)])
        y = b.op("Concat", [xy, wh, conf], axis=4)
        outs.append(b.op("Reshape", [y, b.i64(1, 3 * hw * hw, no)]))
    return b.finish("yolov5_like", [1, 3, size, size], [b.op("Concat", outs, axis=1)])


def yolov5_opset11(seed=0):
    """yolov5_like as opset 11 writes it: Resize(x, roi, scales) with a constant empty roi, Split
    with the ``split`` attribute, 20 classes."""
    return yolov5_like(seed, nc=20, opset=11)


def yolov8_like(seed=0, nc=80, size=128):
    """Ultralytics YOLOv8n-style (opset 17): folded BN, C2f with Split, SPPF, Resize by sizes,
    anchor-free head (DFL: Reshape/Transpose/Softmax/Conv), dist2bbox, output [1, nc + 4, N]."""
    b = B(seed, 17)
    x = b.cba("input", 3, 16, 3, 2)
    x = b.cba(x, 16, 16, 3, 2)
    x = b.cba(x, 16, 32, 3, 2)                               # 16 = P3 (stride 8)
    p3 = _c2f(b, x, 32, 32)
    x = b.cba(p3, 32, 64, 3, 2)                              # 8
    p4 = _sppf(b, _c2f(b, x, 64, 64), 64)
    up = b.resize(p4, sizes=[1, 64, size // 8, size // 8])
    n3 = _c2f(b, b.op("Concat", [up, p3], axis=1), 96, 32, shortcut=False)
    n4 = _c2f(b, b.op("Concat", [b.cba(n3, 32, 32, 3, 2), p4], axis=1), 96, 64, shortcut=False)
    reg, feats, anchors, strides = 16, [], [], []
    for f, cin, s in ((n3, 32, 8), (n4, 64, 16)):
        box = b.conv(b.cba(b.cba(f, cin, 32, 3), 32, 32, 3), 32, 4 * reg, 1, b.n("cv2"), gain=0.5)
        cls = b.conv(b.cba(b.cba(f, cin, 32, 3), 32, 32, 3), 32, nc, 1, b.n("cv3"), gain=0.5)
        hw = size // s
        feats.append(b.op("Reshape", [b.op("Concat", [box, cls], axis=1), b.i64(1, 4 * reg + nc, -1)]))
        gy, gx = np.meshgrid(np.arange(hw) + 0.5, np.arange(hw) + 0.5, indexing="ij")
        anchors.append(np.stack([gx.ravel(), gy.ravel()]))
        strides.append(np.full(hw * hw, s))
    x = b.op("Concat", feats, axis=2)
    n = x_n = sum(a.shape[1] for a in anchors)
    box, cls = b.split(x, [4 * reg, nc], axis=1)
    d = b.op("Transpose", [b.op("Reshape", [box, b.i64(1, 4, reg, n)])], perm=[0, 2, 1, 3])
    dfl_w = b.const(b.n("dfl.weight"), np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1))
    d = b.op("Conv", [b.op("Softmax", [d], axis=1), dfl_w], kernel_shape=[1, 1])
    d = b.op("Reshape", [d, b.i64(1, 4, x_n)])
    lt, rb = b.op("Slice", [d, b.i64(0), b.i64(2), b.i64(1)]), b.op("Slice", [d, b.i64(2), b.i64(4), b.i64(1)])
    anc = b.c(np.concatenate(anchors, 1)[None].astype(np.float32))
    x1y1, x2y2 = b.op("Sub", [anc, lt]), b.op("Add", [anc, rb])
    cxy = b.op("Div", [b.op("Add", [x1y1, x2y2]), b.c(np.float32(2))])
    box = b.op("Concat", [cxy, b.op("Sub", [x2y2, x1y1])], axis=1)
    box = b.op("Mul", [box, b.c(np.concatenate(strides)[None, None].astype(np.float32))])
    return b.finish("yolov8_like", [1, 3, size, size], [b.op("Concat", [box, b.op("Sigmoid", [cls])], axis=1)])


def yolox_like(seed=0, nc=20, size=128):
    """YOLOX / YOLOv5-v5.0-style (opset 13): Focus stem (four stride-2 Slices + Concat), decoupled
    head Concat([reg, Sigmoid(obj), Sigmoid(cls)], axis=1) per level, Reshape [1, C, -1], Concat on
    axis 2, Transpose to [1, N, 5 + nc]."""
    b = B(seed, 13)
    sl = [b.op("Slice", ["input", b.i64(i, j), b.i64(size, size), b.i64(2, 3), b.i64(2, 2)])
          for i, j in ((0, 0), (1, 0), (0, 1), (1, 1))]
    x = b.cba(b.op("Concat", sl, axis=1), 12, 16, 3)                            # 64
    x = b.cba(x, 16, 32, 3, 2)                                                  # 32
    p3 = _c3(b, b.cba(x, 32, 32, 3, 2), 32, 32, "fold")                         # 16
    p4 = _sppf(b, b.cba(p3, 32, 64, 3, 2), 64)                                  # 8
    outs = []
    for f, cin in ((p3, 32), (p4, 64)):
        stem = b.cba(f, cin, 32, 1)
        r = b.cba(stem, 32, 32, 3)
        c = b.cba(stem, 32, 32, 3)
        reg = b.conv(r, 32, 4, 1, b.n("reg"), gain=0.5)
        obj = b.op("Sigmoid", [b.conv(r, 32, 1, 1, b.n("obj"), gain=0.5)])
        cls = b.op("Sigmoid", [b.conv(c, 32, nc, 1, b.n("cls"), gain=0.5)])
        outs.append(b.op("Reshape", [b.op("Concat", [reg, obj, cls], axis=1), b.i64(1, 5 + nc, -1)]))
    y = b.op("Transpose", [b.op("Concat", outs, axis=2)], perm=[0, 2, 1])
    return b.finish("yolox_like", [1, 3, size, size], [y])


# ------------------------------------------------------------------ SSD / RetinaNet
def ssd_like(seed=0, nc=21, size=128, anchors=4):
    """SSD/RetinaNet-style: 3 feature maps, loc/conf Conv heads, Transpose [0,2,3,1] + Reshape +
    Concat, Softmax over classes (SSD) and Sigmoid scores (RetinaNet), opset 11."""
    b = B(seed, 11)
    x = b.cba("input", 3, 16, 3, 2, act="relu")
    x = b.cba(x, 16, 32, 3, 2, act="relu")
    f1 = b.cba(b.cba(x, 32, 32, 3, 2, act="relu"), 32, 32, 3, act="relu")      # 16
    f2 = b.cba(f1, 32, 48, 3, 2, act="relu")                                    # 8
    f3 = b.cba(b.cba(f2, 48, 24, 1, act="relu"), 24, 48, 3, 2, act="relu")      # 4
    locs, confs = [], []
    for f, c in ((f1, 32), (f2, 48), (f3, 48)):
        lo = b.conv(f, c, anchors * 4, 3, b.n("loc"), gain=0.5)
        co = b.conv(f, c, anchors * nc, 3, b.n("conf"), gain=0.5)
        locs.append(b.op("Reshape", [b.op("Transpose", [lo], perm=[0, 2, 3, 1]), b.i64(1, -1, 4)]))
        confs.append(b.op("Reshape", [b.op("Transpose", [co], perm=[0, 2, 3, 1]), b.i64(1, -1, nc)]))
    loc = b.op("Concat", locs, axis=1)
    conf = b.op("Concat", confs, axis=1)
    return b.finish("ssd_like", [1, 3, size, size],
                    [loc, b.op("Softmax", [conf], axis=-1), b.op("Sigmoid", [conf])])


# ------------------------------------------------------------------ EfficientNet
def _mbconv(b, x, cin, cout, k, s, expand):
    h = cin * expand
    y = b.cba(x, cin, h, 1, bn="unfold") if expand != 1 else x
    y = b.cba(y, h, h, k, s, group=h, bn="unfold")
    se = b.op("GlobalAveragePool", [y])
    r = max(1, cin // 4)
    se = b.silu(b.conv(se, h, r, 1, b.n("se_reduce")), b.n("se_silu"))
    se = b.op("Sigmoid", [b.conv(se, r, h, 1, b.n("se_expand"))])
    y = b.cba(b.op("Mul", [y, se]), h, cout, 1, act=None, bn="unfold")
    if s == 1 and cin == cout:
        y = b.op("Add", [b.op("Dropout", [y, b.c(np.float32(0.2))]), x])
    return y


def efficientnet_like(seed=0, size=128, classes=100):
    """EfficientNet-B0-style (opset 13): Swish as x*Sigmoid(x), depthwise 3x3 and 5x5, SE with
    GAP/Conv/Swish/Conv/Sigmoid/Mul, residual Add after Dropout, Dropout + Gemm head."""
    b = B(seed, 13)
    x = b.cba("input", 3, 16, 3, 2, bn="unfold")
    x = _mbconv(b, x, 16, 8, 3, 1, 1)
    x = _mbconv(b, x, 8, 16, 3, 2, 6)
    x = _mbconv(b, x, 16, 16, 3, 1, 6)
    x = _mbconv(b, x, 16, 24, 5, 2, 6)
    x = _mbconv(b, x, 24, 24, 5, 1, 6)
    x = b.cba(x, 24, 64, 1, bn="unfold")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    x = b.op("Dropout", [x, b.c(np.float32(0.2))])
    return b.finish("efficientnet_like", [1, 3, size, size], [b.gemm(x, 64, classes, b.n("classifier"))])


# ------------------------------------------------------------------ ResNet-D / RegNet
def _resnetd_block(b, x, cin, cout, s, groups):
    y = b.cba(x, cin, cout, 1, act="relu", bn="unfold")
    y = b.cba(y, cout, cout, 3, s, group=groups, act="relu", bn="unfold")
    y = b.cba(y, cout, cout, 1, act=None, bn="unfold")
    sc = x
    if s != 1:
        sc = b.op("AveragePool", [sc], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=0)
    if s != 1 or cin != cout:
        sc = b.cba(sc, cin, cout, 1, act=None, bn="unfold")
    return b.relu(b.op("Add", [y, sc]), b.n("relu"))


def resnetd_like(seed=0, size=120, classes=100):
    """timm ResNet-D / RegNet-style (opset 11): deep stem, MaxPool, grouped conv (groups=8),
    AvgPool(2, s2, ceil_mode, count_include_pad=0) shortcut on odd sizes, GAP/Flatten/Gemm."""
    b = B(seed, 11)
    x = b.cba("input", 3, 16, 3, 2, act="relu", bn="unfold")           # 60
    x = b.cba(x, 16, 16, 3, act="relu", bn="unfold")
    x = b.cba(x, 16, 32, 3, act="relu", bn="unfold")
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])  # 30
    x = _resnetd_block(b, x, 32, 32, 1, 8)
    x = _resnetd_block(b, x, 32, 64, 2, 8)                                # 15
    x = _resnetd_block(b, x, 64, 128, 2, 8)                               # 8 (ceil)
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.finish("resnetd_like", [1, 3, size, size], [b.gemm(x, 128, classes, b.n("fc"))])


# ------------------------------------------------------------------ ViT
def _layernorm(b, x, d):
    g = b.c((1 + 0.1 * b.rng.standard_normal(d)).astype(np.float32))
    be = b.c((0.05 * b.rng.standard_normal(d)).astype(np.float32))
    return b.op("LayerNormalization", [x, g, be], axis=-1, epsilon=1e-6)


def _gelu_erf(b, x):
    e = b.op("Erf", [b.op("Div", [x, b.c(np.float32(np.sqrt(2.0)))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.c(np.float32(1))])]), b.c(np.float32(0.5))])


def vit_like(seed=0, size=128, dim=64, heads=2, depth=2, classes=100):
    """ViT-tiny-style (opset 17): patch Conv 16x16 s16, Flatten/Transpose to tokens, class token
    Concat, position Add, LayerNormalization, MatMul attention with Softmax, Gelu (Erf form),
    Gather of the class token, Gemm head."""
    b = B(seed, 17)
    t, hd = (size // 16) ** 2 + 1, dim // heads
    x = b.conv("input", 3, dim, 16, "patch_embed", stride=16, pads=[0, 0, 0, 0])
    x = b.op("Transpose", [b.op("Reshape", [x, b.i64(1, dim, -1)])], perm=[0, 2, 1])
    cls = b.c((0.02 * b.rng.standard_normal((1, 1, dim))).astype(np.float32))
    x = b.op("Concat", [cls, x], axis=1)
    x = b.op("Add", [x, b.c((0.02 * b.rng.standard_normal((1, t, dim))).astype(np.float32))])
    for _ in range(depth):
        qkv = b.linear(_layernorm(b, x, dim), dim, 3 * dim)
        qkv = b.op("Transpose", [b.op("Reshape", [qkv, b.i64(1, t, 3, heads, hd)])], perm=[2, 0, 3, 1, 4])
        q, k, v = (b.op("Gather", [qkv, b.c(np.array(i, np.int64))], axis=0) for i in range(3))
        a = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
        a = b.op("Softmax", [b.op("Mul", [a, b.c(np.float32(hd ** -0.5))])], axis=-1)
        o = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [a, v])], perm=[0, 2, 1, 3]), b.i64(1, t, dim)])
        x = b.op("Add", [x, b.linear(o, dim, dim)])
        h = _gelu_erf(b, b.linear(_layernorm(b, x, dim), dim, 2 * dim))
        x = b.op("Add", [x, b.linear(h, 2 * dim, dim)])
    x = b.op("Gather", [_layernorm(b, x, dim), b.c(np.array(0, np.int64))], axis=1)
    return b.finish("vit_like", [1, 3, size, size], [b.gemm(x, dim, classes, b.n("head"))])


def convnext_like(seed=0, size=128, dims=(32, 64), classes=100):
    """timm ConvNeXt-style (opset 17): 4x4/s4 stem, depthwise 7x7, permute to channels-last,
    LayerNormalization, Linear (MatMul on 4-D data) + Gelu (Erf) + Linear, layer-scale Mul, permute
    back, residual Add; downsample LN + 2x2/s2 conv; GAP/LN/Gemm head."""
    b = B(seed, 17)
    x = b.conv("input", 3, dims[0], 4, b.n("stem"), stride=4, pads=[0, 0, 0, 0])
    for i, d in enumerate(dims):
        if i:
            x = b.op("Transpose", [_layernorm(b, b.op("Transpose", [x], perm=[0, 2, 3, 1]), dims[i - 1])],
                     perm=[0, 3, 1, 2])
            x = b.conv(x, dims[i - 1], d, 2, b.n("down"), stride=2, pads=[0, 0, 0, 0])
        for _ in range(2):
            y = b.conv(x, d, d, 7, b.n("dwconv"), group=d)
            y = _layernorm(b, b.op("Transpose", [y], perm=[0, 2, 3, 1]), d)
            y = b.linear(_gelu_erf(b, b.linear(y, d, 4 * d)), 4 * d, d)
            y = b.op("Mul", [y, b.c((0.1 + 0.05 * b.rng.standard_normal(d)).astype(np.float32))])
            x = b.op("Add", [x, b.op("Transpose", [y], perm=[0, 3, 1, 2])])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.finish("convnext_like", [1, 3, size, size], [b.gemm(_layernorm(b, x, dims[-1]), dims[-1], classes, b.n("head"))])


def bifpn_like(seed=0, size=128, c=32, nc=10):
    """EfficientDet BiFPN-style (opset 13): fast normalised fusion with weights computed by
    Relu/ReduceSum/Div on initializers (constant folded), Resize 2x, MaxPool 3x3/s2 with TF SAME
    pads [0,0,1,1], separable convs (depthwise + pointwise + BN), Swish, class/box heads
    Transpose+Reshape+Concat, Sigmoid."""
    b = B(seed, 13)
    x = b.cba("input", 3, 16, 3, 2, pads=[0, 0, 1, 1])                          # 64
    x = b.cba(x, 16, 24, 3, 2, pads=[0, 0, 1, 1])                               # 32
    p3 = b.cba(x, 24, c, 3, 2, pads=[0, 0, 1, 1])                               # 16
    p4 = b.cba(p3, c, c, 3, 2, pads=[0, 0, 1, 1])                               # 8
    p5 = b.cba(p4, c, c, 3, 2, pads=[0, 0, 1, 1])                               # 4

    def fuse(ins):
        w = b.op("Relu", [b.c(np.abs(b.rng.standard_normal(len(ins))).astype(np.float32) + 0.5)])
        w = b.op("Div", [w, b.op("Add", [b.op("ReduceSum", [w, b.i64(0)], keepdims=1), b.c(np.float32(1e-4))])])
        acc = None
        for k, t in enumerate(ins):
            wk = b.op("Gather", [w, b.c(np.array(k, np.int64))], axis=0)
            t = b.op("Mul", [t, wk])
            acc = t if acc is None else b.op("Add", [acc, t])
        acc = b.silu(acc, b.n("swish"))
        y = b.conv(acc, c, c, 3, b.n("sep_dw"), group=c, bias=False)
        return b.bn(b.conv(y, c, c, 1, b.n("sep_pw")), c, b.n("sep_bn"))

    def down(t):
        return b.op("MaxPool", [t], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    p4_td = fuse([p4, b.resize(p5, scales=[1, 1, 2, 2])])
    p3_out = fuse([p3, b.resize(p4_td, scales=[1, 1, 2, 2])])
    p4_out = fuse([p4, p4_td, down(p3_out)])
    p5_out = fuse([p5, down(p4_out)])
    boxes, scores = [], []
    for f in (p3_out, p4_out, p5_out):
        h = b.cba(f, c, c, 3)
        boxes.append(b.op("Reshape", [b.op("Transpose", [b.conv(h, c, 9 * 4, 3, b.n("box"), gain=0.5)], perm=[0, 2, 3, 1]), b.i64(1, -1, 4)]))
        scores.append(b.op("Reshape", [b.op("Transpose", [b.conv(h, c, 9 * nc, 3, b.n("cls"), gain=0.5)], perm=[0, 2, 3, 1]), b.i64(1, -1, nc)]))
    return b.finish("bifpn_like", [1, 3, size, size],
                    [b.op("Concat", boxes, axis=1), b.op("Sigmoid", [b.op("Concat", scores, axis=1)])])


# ------------------------------------------------------------------ Inception / DenseNet
def inception_dense_like(seed=0, size=96, classes=50):
    """Inception-v3/DenseNet-ish (opset 13): TF SAME asymmetric pads (s2 [0,0,1,1]), 1x7/7x1
    factorised convs, AveragePool 3x3 s1 pad 1 count_include_pad=1 branch, dense-layer Concats,
    BN-Relu-Conv transition + AveragePool 2x2, GAP/Flatten/Gemm + Softmax."""
    b = B(seed, 13)
    x = b.cba("input", 3, 16, 3, 2, act="relu", pads=[0, 0, 1, 1])       # 48 (TF SAME)
    x = b.cba(x, 16, 32, 3, act="relu")
    br1 = b.cba(x, 32, 16, 1, act="relu")
    n2 = b.cba(x, 32, 12, 1, act="relu")
    w17 = b.const(b.n("w1x7"), b.he((16, 12, 1, 7), 84))
    n2 = b.relu(b.op("Conv", [n2, w17], kernel_shape=[1, 7], pads=[0, 3, 0, 3]), b.n("relu"))
    w71 = b.const(b.n("w7x1"), b.he((16, 16, 7, 1), 112))
    br2 = b.relu(b.op("Conv", [n2, w71, b.c(np.zeros(16, np.float32))], kernel_shape=[7, 1], pads=[3, 0, 3, 0]), b.n("relu"))
    br3 = b.op("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)
    br3 = b.cba(br3, 32, 16, 1, act="relu")
    br4 = b.op("MaxPool", [b.cba(x, 32, 16, 3, act="relu")], kernel_shape=[3, 3], strides=[1, 1], pads=[0, 0, 2, 2])
    x = b.op("Concat", [br1, br2, br3, br4], axis=1)                      # 64 @ 48
    x = b.cba(x, 64, 64, 3, 2, act="relu", pads=[0, 0, 1, 1])            # 24
    c = 64
    for _ in range(2):                                                    # dense layers: BN-Relu-Conv
        y = b.cba(b.relu(b.bn(x, c, b.n("dense_bn")), b.n("relu")), c, 32, 1, act="relu", bn="unfold")
        x = b.op("Concat", [x, b.conv(y, 32, 16, 3, b.n("dense_conv"), bias=False)], axis=1)
        c += 16
    x = b.conv(b.relu(b.bn(x, c, b.n("trans_bn")), b.n("relu")), c, 48, 1, b.n("trans_conv"), bias=False)
    x = b.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])    # 12
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.finish("inception_dense_like", [1, 3, size, size],
                    [b.op("Softmax", [b.gemm(x, 48, classes, b.n("fc"))], axis=1)])


# ------------------------------------------------------------------ Keras / tf2onnx
def keras_mobilenet_like(seed=0, size=128, classes=10):
    """tf2onnx export of a Keras MobileNet (opset 13): NHWC input Transpose'd to NCHW, explicit Pad
    (TF SAME for stride 2: bottom/right only) before the conv, ReLU6 as Clip, depthwise convs,
    ReduceMean over H, W (keepdims=0), MatMul + Add, Softmax."""
    b = B(seed, 13)
    x = b.op("Transpose", ["input"], perm=[0, 3, 1, 2])
    zero = b.c(np.float32(0))
    pad_same = lambda x: b.op("Pad", [x, b.i64(0, 0, 0, 0, 0, 0, 1, 1), zero], mode="constant")  # noqa: E731
    clip6 = lambda y: b.op("Clip", [y, zero, b.c(np.float32(6))])  # noqa: E731
    x = clip6(b.conv(pad_same(x), 3, 16, 3, b.n("conv"), stride=2, pads=[0, 0, 0, 0]))
    for cin, cout, s in ((16, 32, 1), (32, 64, 2), (64, 64, 1), (64, 96, 2)):
        x = pad_same(x) if s == 2 else x
        x = clip6(b.conv(x, cin, cin, 3, b.n("dw"), stride=s, group=cin, pads=[0, 0, 0, 0] if s == 2 else None))
        x = clip6(b.conv(x, cin, cout, 1, b.n("pw")))
    x = b.op("ReduceMean", [x], axes=[2, 3], keepdims=0)
    x = b.op("Softmax", [b.linear(x, 96, classes)], axis=-1)
    return b.model("keras_mobilenet_like", [("input", F32, [1, size, size, 3])], [(x, F32, None)])


# ------------------------------------------------------------------ torchvision (older exports)
def googlenet_like(seed=0, size=96, classes=20):
    """torchvision GoogLeNet-style export (opset 12): input normalisation Sub/Div by [1,3,1,1]
    constants, shapes as Constant nodes, MaxPool ceil_mode=1, a conv with auto_pad SAME_UPPER,
    Mul(Sigmoid(x), x) (operands swapped), Concat on axis -3, ``x.view(x.size(0), -1)`` flatten
    (Shape/Gather/Unsqueeze/Concat/Reshape), Gemm."""
    b = B(seed, 12)
    mean = b.c(np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1))
    std = b.c(np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1))
    x = b.op("Div", [b.op("Sub", ["input", mean]), std])
    x = b.cba(x, 3, 16, 7, 2, act="relu", bn="unfold")                         # 48
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)   # 24
    w = b.const(b.n("same.weight"), b.he((24, 16, 3, 3), 144))
    x = b.op("Conv", [x, w], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")  # 12
    x = b.op("Mul", [b.op("Sigmoid", [x]), x])
    a = b.cba(x, 24, 16, 1, act="relu")
    c = b.cba(b.cba(x, 24, 8, 1, act="relu"), 8, 16, 5, act="relu")
    d = b.cba(b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], ceil_mode=1),
              24, 16, 1, act="relu")
    x = b.op("Concat", [a, c, d], axis=-3)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)   # 6 (ceil)
    x = b.op("GlobalAveragePool", [x])
    shape = b.op("Shape", [x])
    n0 = b.op("Gather", [shape, b.c(np.array(0, np.int64))], axis=0)
    minus1 = b.n("minus1")
    b.nodes.append(onnx.helper.make_node("Constant", [], [minus1], value=onnx.numpy_helper.from_array(
        np.array([-1], np.int64)), name=b.unique(minus1 + "_node")))
    tgt = b.op("Concat", [b.op("Unsqueeze", [n0], axes=[0]), minus1], axis=0)
    x = b.op("Reshape", [x, tgt])
    return b.finish("googlenet_like", [1, 3, size, size], [b.gemm(x, 48, classes, b.n("fc"))], [[1, classes]])


ALL: Dict[str, Callable[..., onnx.ModelProto]] = {
    f.__name__: f for f in (yolov5_like, yolov5_opset11, yolov8_like, yolox_like, keras_mobilenet_like, ssd_like, efficientnet_like, resnetd_like,
                            vit_like, inception_dense_like, googlenet_like,
                            convnext_like, bifpn_like)}

