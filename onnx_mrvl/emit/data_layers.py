"""Program layers that move data: Reshape/Flatten/Squeeze, layout changes, Concat, Slice2D,
GatherElements (docs/program.md)."""
from __future__ import annotations

import numpy as np

from .json_attrs import decode_const
from .layer_common import PERMS, fit_rank

def reshape(a, ctx, layer_name, in_shape):
    """Output shape of reshape / nn.batch_flatten / squeeze, with the batch changed by --batch."""
    total = int(np.prod(in_shape))
    if layer_name == "Flatten" and not a.has("newshape"):
        return [in_shape[0], total // max(in_shape[0], 1)]
    if layer_name == "Squeeze" and not a.has("newshape") and a.has("axis"):
        axes = [x % len(in_shape) for x in a.ints("axis")]
        if any(in_shape[x] != 1 for x in axes):
            a.fail(f"squeeze axis {axes} of a tensor of shape {in_shape} whose dims there are not 1")
        return [d for i, d in enumerate(in_shape) if i not in axes]
    key = a.first("newshape", "out_layout_shape", "shape")
    if key is None:
        a.fail("missing attribute 'newshape' (or out_layout_shape)")
    out = a.ints(key)
    if ctx.batch and ctx.batch != ctx.json_batch and out:
        if out[0] not in (ctx.json_batch, -1):
            a.fail(f"reshape to {out} mixes the batch dimension (batch {ctx.json_batch}) with others; it "
                   f"cannot be recompiled for batch {ctx.batch}", hint="convert the model again with that batch")
        out = [in_shape[0] if out[0] == ctx.json_batch else -1] + out[1:]
    out = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(out)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        a.fail(f"newshape {out} is not a valid shape")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or total % known:
            a.fail(f"cannot reshape {in_shape} to {out}")
        out = [total // known if d == -1 else d for d in out]
    if int(np.prod(out)) != total:
        a.fail(f"cannot reshape {in_shape} ({total} values) to {out}")
    return out


def layout_change(a, in_shape, params, in_layout=None):
    if a.has("src_layout"):
        src, dst = a.str("src_layout"), a.str("dst_layout")
    elif a.has("axes"):  # TVM's transpose
        perm = tuple(a.ints("axes"))
        pair = next((p for p, v in PERMS.items() if v == perm), None)
        if pair is None:
            a.fail(f"transpose axes {list(perm)} is not an NCHW<->NHWC layout change")
        src, dst = pair
    else:
        src, dst = a.str("data_layout"), a.str("out_layout")
    if (src, dst) not in PERMS or len(in_shape) != 4:
        a.fail(f"layout_transform {src}->{dst} of a tensor of shape {in_shape} is not supported "
               f"(NCHW<->NHWC of 4-D tensors)")
    if in_layout in ("NCHW", "NHWC") and in_layout != src:
        a.fail(f"layout_transform {src}->{dst} reads a tensor stored {in_layout}")
    params.update(src_layout=src, dst_layout=dst)
    return [in_shape[i] for i in PERMS[(src, dst)]]


def concat(a, ctx, lname, in_shapes, params, weights):
    """Concatenation along ``axis`` of the stored layout; ``const_positions`` (onnx_mrvl's
    extension) lists the positions of constant operands, each ``input<p>_const_name``."""
    axis = a.int("axis")
    if a.has("const_positions"):
        positions = sorted(a.ints("const_positions"))
        if ctx.batch and ctx.batch != ctx.json_batch:
            a.fail(f"concat with constant operands cannot be recompiled for batch {ctx.batch}",
                   hint="convert the model again with that batch")
        shapes = list(in_shapes)
        for p in positions:
            if not 0 <= p <= len(shapes) or not a.has(f"input{p}_const_name"):
                a.fail(f"constant operand {p}: bad position or no input{p}_const_name")
            c = decode_const(ctx.consts, a.str(f"input{p}_const_name"), a)
            if in_shapes and c.ndim > len(in_shapes[0]):   # padded to 4-D by a TVM-style writer
                c = c.reshape(fit_rank(list(c.shape), len(in_shapes[0])))
            shapes.insert(p, list(c.shape))
            weights[f"const{p}"] = ctx.weight(a, f"{lname}.const{p}", c, "ND", fp16=True)
        params["const_positions"] = positions
        in_shapes = shapes
    rank = len(in_shapes[0])
    if any(len(s) != rank for s in in_shapes):
        a.fail(f"concat of tensors of different ranks {in_shapes}")
    if not -rank <= axis < rank:
        a.fail(f"concat axis {axis} is out of range for rank {rank}")
    axis %= rank
    for s in in_shapes[1:]:
        if [d for i, d in enumerate(s) if i != axis] != [d for i, d in enumerate(in_shapes[0]) if i != axis]:
            a.fail(f"concat inputs {in_shapes} differ outside axis {axis}")
    out = list(in_shapes[0])
    out[axis] = sum(s[axis] for s in in_shapes)
    params["axis"] = axis
    return out


def slice2d(a, in_shapes, params):
    """Entries [start, end) of ``axis`` of the stored layout (3 = NHWC channels), step 1."""
    shape = in_shapes[0]
    axis, start, end = a.int("axis"), a.int(a.first("start", "begin") or "start"), a.int("end")
    if len(shape) != 4 or not -4 <= axis < 4 or axis % 4 == 0 or not 0 <= start < end <= shape[axis % 4]:
        a.fail(f"Slice2D [{start}, {end}) of axis {axis} does not fit an input of shape {shape} "
               f"(4-D, a non-batch axis, a non-empty range)")
    params.update(axis=axis % 4, start=start, end=end)
    return [end - start if i == axis % 4 else d for i, d in enumerate(shape)]




def gather_elements(a, ctx, lname, in_shapes, params, weights):
    """GatherElements along ``axis`` of the stored layout with a constant int32 index table
    (``indices_const_name``, leading axes it does not vary on stored as 1; ``index_shape`` the
    full table's shape, which is the output's). Values in range, off-axis sizes within the data's."""
    shape = list(in_shapes[0])
    rank = len(shape)
    axis = a.int("axis")
    if not 2 <= rank <= 5 or not -rank <= axis < rank:
        a.fail(f"GatherElements axis {axis} does not fit an input of shape {shape} (2-D to 5-D)")
    axis %= rank
    out = a.ints("index_shape")
    if not a.has("indices_const_name"):
        a.fail("a GatherElements layer needs its index table (indices_const_name)")
    idx = decode_const(ctx.consts, a.str("indices_const_name"), a, integer="int32")
    if len(out) != rank or any(out[k] > shape[k] for k in range(rank) if k != axis):
        a.fail(f"index_shape {out} does not fit the data {shape} off axis {axis}")
    if idx.ndim != rank or any(i not in (1, o) for i, o in zip(idx.shape, out)):
        a.fail(f"index table of shape {list(idx.shape)} does not broadcast to index_shape {out}")
    if idx.size and (idx.min() < 0 or idx.max() >= shape[axis]):
        a.fail(f"index values outside [0, {shape[axis]}) along axis {axis} of {shape}")
    params.update(axis=axis, index_shape=list(out))
    weights["indices"] = ctx.weight(a, f"{lname}.indices", idx, "ND", fp16=False)
    return list(out)
