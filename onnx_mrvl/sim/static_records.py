"""Native step records of the static plan (``static_plan.py``): for each fp16 step whose kernel is
native, the tuple of integers ``run_steps`` in ``_native_conv.c`` reads (record kind, descriptor
and buffer addresses, activation codes) and the arrays the record points into (``keep``)."""
from __future__ import annotations

import numpy as np

from . import jit, native
from .fc import FC, GEMV_ROWS
from .kernels import Conv2D
from .pooling import window_counts, pool_geometry
from .tensor_ops import npc_dims

F32 = np.float32
SOFTMAX = True      # Softmax over the last axis as a record (kind 13, _native_act.c act_softmax); False: numpy
COPIES = True       # Concat / Slice2D as strided-copy records (kind 12); False: their numpy kernels


def size(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def fp16_record(plan, e, step, name: str) -> bool:
    """Fill ``e.rec`` (and ``e.keep`` / ``e.post``) with the native record of an fp16 step of
    ``plan``; False when the step has no native form (it then runs its Python kernel)."""
    if str(step.spec.params.get("precision", "fp16")) != "fp16":
        return False                                # int8 / int8_out layers: sim/int8*.py (Python)
    shapes, ptr = plan.shapes, plan.ptrs
    out_shape = shapes[step.out]
    if step.out in plan.aliases:
        return True                                 # a view of its input: nothing to run
    conv = getattr(step.fn, "__self__", None)
    if step.inner is not None:                      # fused Conv2D + Sum2D
        conv, act = step.fn.conv, step.fn.sum_act
        x_shape = shapes[step.ins[0]]
        _, oh, ow, _ = conv.output_shape(x_shape)
        plan = conv._plan(x_shape, oh, ow, act)
        if plan[3] != out_shape or shapes[step.ins[1]] != out_shape:
            return False
        e.rec, e.keep = (1, plan[2], ptr[step.ins[0]], ptr[step.out], ptr[step.ins[1]]), plan
        return True
    if isinstance(conv, Conv2D) and len(step.ins) == 1:
        if conv.depthwise and conv.og != 1:         # a channel multiplier: np.repeat first
            return False
        x_shape = shapes[step.ins[0]]
        _, oh, ow, _ = conv.output_shape(x_shape)
        plan = conv._plan(x_shape, oh, ow)
        if plan[3] != out_shape:
            return False
        e.rec = (2, plan[2], ptr[step.ins[0]], ptr[step.out]) if conv.depthwise else \
            (1, plan[2], ptr[step.ins[0]], ptr[step.out], 0)
        e.keep, e.post = plan, plan[5]
        _post_in_c(e, out_shape)
        return True
    if isinstance(conv, FC) and len(step.ins) == 1:
        fc, x_shape = conv, shapes[step.ins[0]]
        rows = x_shape[0]
        if size(x_shape) != rows * fc.in_features or out_shape != (rows, fc.out_features):
            return False
        if rows <= GEMV_ROWS:
            desc, dptr, keep, act = fc.gemv_plan(rows)
            e.rec, e.keep, e.post = (6, dptr, ptr[step.ins[0]], ptr[step.out]), (desc, keep), act
        else:
            plan = fc.native_conv()._plan((rows, 1, 1, fc.in_features), 1, 1)
            e.rec, e.keep, e.post = (1, plan[2], ptr[step.ins[0]], ptr[step.out], 0), plan, plan[5]
        _post_in_c(e, out_shape)
        return True
    if name in ("sum2d", "mul2d"):
        return _binary(plan, e, step, name == "mul2d")
    if name in ("maxpool2d", "avgpool2d") and len(step.ins) == 1:
        return _pool(plan, e, step, name == "avgpool2d")
    if name == "globalavgpool2d" and len(step.ins) == 1:
        x_shape = shapes[step.ins[0]]
        if len(x_shape) != 4 or out_shape != (x_shape[0], 1, 1, x_shape[3]) or size(x_shape) == 0:
            return False
        e.rec = (7, ptr[step.ins[0]], ptr[step.out], x_shape[0], x_shape[1] * x_shape[2], x_shape[3])
        return True
    if name == "softmax" and SOFTMAX:
        return _softmax(plan, e, step)
    if name in ("concat", "slice2d") and COPIES:
        return _copies(plan, e, step, name == "concat")
    if name == "resize" and COPIES and str(step.spec.params.get("mode", "nearest")).lower() == "nearest":
        return _nearest(plan, e, step)
    if name == "layout_transform" and len(step.ins) == 1:
        src = str(step.spec.params.get("src_layout", "")).upper()
        dst = str(step.spec.params.get("dst_layout", "")).upper()
        x_shape = shapes[step.ins[0]]
        if {src, dst} != {"NCHW", "NHWC"} or len(x_shape) != 4:
            return False
        n = x_shape[0]
        c, hw = (x_shape[1], x_shape[2] * x_shape[3]) if src == "NCHW" else (x_shape[3], x_shape[1] * x_shape[2])
        perm = (0, 2, 3, 1) if src == "NCHW" else (0, 3, 1, 2)
        if tuple(x_shape[i] for i in perm) != out_shape:
            return False
        e.rec = (5, ptr[step.ins[0]], ptr[step.out], n, c, hw, int(src == "NCHW"))
        return True
    return False

def _post_in_c(e, out_shape) -> None:
    """A sigmoid / silu / gelu after a conv / FC kernel finished by ``run_steps`` itself (record
    words 12-14: _native_conv.c ``with_post``), when activations_native can: the step then needs no
    numpy ``post`` and does not end its native segment (plan_fusion never pairs such a record)."""
    if e.post is None:
        return
    from .activations_native import post_record
    post = post_record(e.post)
    if post:
        e.rec = tuple(e.rec) + (0,) * (12 - len(e.rec)) + (post[0], size(out_shape), post[1])
        e.post = None


def has_post_in_c(rec) -> bool:
    """The record carries an activation ``run_steps`` applies after its kernel (``_post_in_c``)."""
    return len(rec) > 12 and bool(rec[12])


def _binary(plan, e, step, mul: bool) -> bool:
    spec, shapes = step.spec, plan.shapes
    a_id = step.ins[0]
    a_shape = shapes[a_id]
    if len(step.ins) == 2:
        b_shape, b_ptr = shapes[step.ins[1]], plan.ptrs[step.ins[1]]
        b_keep = None
    else:
        from .fp16 import to_fp16_values
        b_keep = np.ascontiguousarray(to_fp16_values(spec.weight("operand", required=True)), dtype=F32)
        b_shape, b_ptr = b_keep.shape, b_keep.ctypes.data
    a_ptr = plan.ptrs[a_id]
    full = tuple(np.broadcast_shapes(a_shape, b_shape))
    if a_shape != full:                               # IEEE + and * commute bit for bit
        a_shape, b_shape, a_ptr, b_ptr = b_shape, a_shape, b_ptr, a_ptr
    dims = npc_dims(a_shape, b_shape) if a_shape == full else None
    if dims is None or full != shapes[step.out] or size(full) == 0:
        return False
    a = spec.activation()
    try:
        code, p0, p1, sl = jit.act_args(a["activation"], a["activation_params"], a["slope"], dims[0][2])
    except ValueError:                                # a slope along an axis C does not hold: numpy
        return False
    slope = native.padded(sl, 16)
    post = None
    if code < 0:
        from .activations import make_activation
        post = make_activation(a["activation"], a["activation_params"], a["slope"])
    bits = np.array([p0, p1], F32).view(np.uint32)
    e.rec = (3, a_ptr, b_ptr, plan.ptrs[step.out]) + tuple(dims[0]) + tuple(dims[1]) + (
        int(mul), slope.ctypes.data, int(code), int(bits[0]), int(bits[1]))
    e.keep, e.post = (b_keep, slope), post
    return True

def _pool(plan, e, step, avg: bool) -> bool:
    p, x_shape = step.spec.params, plan.shapes[step.ins[0]]
    geo = pool_geometry(np.broadcast_to(F32(0), x_shape), p.get("kernel_size"), p.get("strides") or (1, 1),
                    p.get("padding") or (0, 0, 0, 0), p.get("dilation") or (1, 1), int(p.get("ceil_mode", 0)))
    (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), (oh, ow) = geo
    n, h, w, c = x_shape
    if (n, oh, ow, c) != plan.shapes[step.out] or (avg and (dh, dw) != (1, 1)):
        return False
    div = None
    if avg:
        inc = bool(int(p.get("count_include_pad", 0)))
        div = np.ascontiguousarray(window_counts(h, oh, kh, sh, t, b, dh, inc)[:, None]
                                   * window_counts(w, ow, kw, sw, l, r, dw, inc)[None, :], dtype=F32)
    desc = np.array((n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, t, l, int(avg)), dtype=np.int64)
    e.rec = (4, desc.ctypes.data, plan.ptrs[step.ins[0]], plan.ptrs[step.out], 0 if div is None else div.ctypes.data)
    e.keep = (desc, div)
    return True


def _copies(plan, e, step, concat: bool) -> bool:
    """Concat / Slice2D as kind 12 (_native_conv.c ``copy_blocks``): [src, dst, rows, count, src
    stride, dst stride] per block in floats, one block per Concat operand (constants kept here as
    the numpy kernel's float32 values) or the one slice; the same values move, so the same bits."""
    p, shapes, ptr = step.spec.params, plan.shapes, plan.ptrs
    out_shape, out = shapes[step.out], ptr[step.out]
    if concat:
        srcs = [(shapes[t], ptr[t]) for t in step.ins]
        for pos in sorted(int(v) for v in p.get("const_positions") or []):
            c = np.ascontiguousarray(step.spec.weight(f"const{pos}", required=True), dtype=F32)
            e.keep = e.keep + (c,)
            srcs.insert(pos, (c.shape, c.ctypes.data))
        axis = int(p["axis"]) % len(out_shape)
        rows, inner = size(out_shape[:axis]), size(out_shape[axis + 1:])
        if any(len(sh) != len(out_shape) or sh[:axis] + sh[axis + 1:] != out_shape[:axis] + out_shape[axis + 1:]
               for sh, _ in srcs) or sum(sh[axis] for sh, _ in srcs) != out_shape[axis]:
            return False
        blocks, at = [], 0
        for sh, a in srcs:
            blocks.append((a, out + 4 * at, rows, sh[axis] * inner, sh[axis] * inner, out_shape[axis] * inner))
            at += sh[axis] * inner
        spans = [(a, size(sh)) for sh, a in srcs]
    else:
        x_shape, x = shapes[step.ins[0]], ptr[step.ins[0]]
        axis, start, end = (int(p[k]) for k in ("axis", "start", "end"))
        if len(x_shape) != 4 or not 0 < axis < 4 or not 0 <= start < end <= x_shape[axis] \
                or out_shape != x_shape[:axis] + (end - start,) + x_shape[axis + 1:]:
            return False
        inner = size(x_shape[axis + 1:])
        blocks = [(x + 4 * start * inner, out, size(x_shape[:axis]), (end - start) * inner,
                   x_shape[axis] * inner, (end - start) * inner)]
        spans = [(x, size(x_shape))]
    return _copy_record(e, blocks, spans, out, size(out_shape))


def _copy_record(e, blocks, spans, out: int, n: int) -> bool:
    """Kind 12 from ``blocks`` when the output (``n`` floats at ``out``) overlaps none of ``spans``
    (operand address, floats): else False, and the numpy kernel copies via a temporary."""
    if n == 0 or any(a < out + 4 * n and out < a + 4 * k for a, k in spans):
        return False
    blocks = [(a, b, 1, r * c, r * c, r * c) if c == s == d else (a, b, r, c, s, d) for a, b, r, c, s, d in blocks]
    desc = np.array(blocks, dtype=np.int64)
    e.rec, e.keep = (12, desc.ctypes.data, len(blocks)), e.keep + (desc,)
    return True


def _nearest(plan, e, step) -> bool:
    """Nearest Resize of NHWC by integer factors (tensor_ops.resize_nearest) as kind 12: input row
    (n, h) to output rows h * sh + i, each pixel at columns w * sw + j, one block per (n, h, i, j)."""
    scales = step.spec.params.get("scales") or ()
    x_shape, out_shape = plan.shapes[step.ins[0]], plan.shapes[step.out]
    if len(step.ins) != 1 or len(scales) != 2 or any(float(v) != int(float(v)) or float(v) < 1 for v in scales):
        return False
    (sh, sw), x, out = (int(float(v)) for v in scales), plan.ptrs[step.ins[0]], plan.ptrs[step.out]
    if len(x_shape) != 4 or out_shape != (x_shape[0], x_shape[1] * sh, x_shape[2] * sw, x_shape[3]) \
            or x_shape[0] * x_shape[1] * sh * sw > 1 << 16:      # blocks: the descriptor stays small
        return False
    n, h, w, c = x_shape
    blocks = [(x + 4 * r * w * c, out + 4 * ((r * sh + i) * w * sw + j) * c, w, c, c, sw * c)
              for r in range(n * h) for i in range(sh) for j in range(sw)]
    return _copy_record(e, blocks, [(x, size(x_shape))], out, size(out_shape))


def _softmax(plan, e, step) -> bool:
    """An fp16 Softmax over the stored layout's last axis (YOLOv8's DFL head, attention scores) as
    kind 13: _native_act.c ``act_softmax``, the steps of norm_ops.softmax with numpy's exp and sum
    order -- when it gives numpy's bits on this host (activations_native checks once)."""
    p, x_shape = step.spec.params, plan.shapes[step.ins[0]]
    axis = p.get("axis")
    if len(step.ins) != 1 or int(p.get("log", 0)) or p.get("nan_fill") is not None or len(x_shape) < 2 \
            or not isinstance(axis, int) or axis not in (-1, len(x_shape) - 1) or plan.shapes[step.out] != x_shape:
        return False                                # the Python step (its checks and errors)
    from .activations_native import softmax_address
    fn = softmax_address()
    if fn is None or size(x_shape) == 0:
        return False
    e.rec = (13, fn, plan.ptrs[step.ins[0]], plan.ptrs[step.out], size(x_shape) // x_shape[-1], x_shape[-1])
    return True
