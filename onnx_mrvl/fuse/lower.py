"""How each fused group becomes Mrvl nodes: Conv2D/pools/Resize, FC, Sum2D/Mul2D, Concat, Reshape
here; slices, BatchMatMul, transformer ops, Take and recurrent cells in their own modules. A mixin of
the Materializer (materialize.py), whose tensor storage tracking (``get``/``define``) it uses."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .. import opset
from ..opset_int8 import ALL_INT8_ATTRS
from . import batch_matmul, fc_rows, gather_elements, qdq_transformer, recurrent, slices, slices_nd, take, transformer
from .qdq_lookup import CHANNEL_AXIS
from .patterns import Group
from .perms import NHWC, Perm, canonical_perm, norm_perm, reshape_blocks, stored_after_reshape, \
    stored_before_reshape, stored_shape


SPATIAL = {"Conv2D", "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "GlobalMaxPool2D", "Resize", "LRN"}   # NHWC in and out


class GroupLowering:
    def group(self, grp: Group) -> None:
        op = grp.op
        handler = {"Conv2D": self._spatial, "MaxPool2D": self._spatial, "AvgPool2D": self._spatial,
                   "GlobalAvgPool2D": self._spatial, "GlobalMaxPool2D": self._spatial,
                   "Resize": self._spatial, "LRN": self._spatial, "FC": self._fc, "Sum2D": self._eltwise, "Mul2D": self._eltwise,
                   "Concat": self._concat, "Reshape": self._reshape, "Lookup": self._lookup,
                   "Slice2D": lambda grp: slices.materialize(self, grp),
                   "BatchMatMul": lambda grp: batch_matmul.materialize(self, grp),
                   "SliceND": lambda grp: slices_nd.materialize(self, grp),
                   "LayerNorm": lambda grp: transformer.materialize(self, grp),
                   "Softmax": lambda grp: transformer.materialize(self, grp),
                   "Requantize": lambda grp: qdq_transformer.materialize(self, grp),
                   "Take": lambda grp: take.materialize(self, grp),
                   "GatherElements": lambda grp: gather_elements.materialize(self, grp),
                   "ConcatRows": lambda grp: take.materialize_concat_rows(self, grp),
                   **{c: lambda grp: recurrent.materialize(self, grp) for c in recurrent.PATTERN_ANCHORS}}[op]
        handler(grp)

    def _emit(self, grp: Group, op: str, inputs: List[str], attrs: dict, out_perm: Perm,
              composite: Optional[str] = None) -> None:
        out = self.define(grp.output, out_perm, mrvl=True, suffix=grp.output_suffix)
        name = self.fresh(f"mrvl_{grp.anchor.name}" + ("_back" if composite else ""))
        self.mrvl_producer[out] = name
        self.mrvl_name[grp.anchor.name] = name
        folded = [a for t in grp.inputs for a in self.alias_of.get(t, []) if a not in self.alias_owner]
        for a in folded:
            self.alias_owner[a] = name
        self.add(opset.make_node(op, inputs, [out], name=name, origin=folded + grp.origin,
                                 attrs=attrs, composite=composite or grp.composite), out_perm)
        # the layout the compile step gives the output (emit/compile.py): NHWC for a spatial op; an
        # order-agnostic op or an int8 Lookup says its storage (a Lookup's unlabelled output once
        # took a unit-axes relabel for an NCHW -> NHWC LayoutTransform of NHWC data: PP-OCRv6 rec QDQ)
        if len(self.logical_shape(grp.output)) == 4 and (op in SPATIAL or out_perm in (None, NHWC)
                                                         and op in ("Sum2D", "Mul2D", "Concat", "Lookup")):
            self.label[out] = "NHWC" if op in SPATIAL or out_perm == NHWC else "NCHW"
        if grp.output in self.g.output_set and out != grp.output:
            self.get(grp.output, None, for_mrvl=True, origin=grp.origin)

    def _act_attrs(self, grp: Group) -> dict:
        """The activation attributes, and an int8 layer's quantization (qdq.py) and kernel sums
        (``int8_sums``: an FC over rows, fc_rows.py, sums as onnxruntime's kernel of the model does)."""
        return {k: v for k, v in grp.attrs.items()
                if k.startswith("activation") or k in ALL_INT8_ATTRS + ("int8_sums", "divide")}

    def _spatial(self, grp: Group) -> None:
        x = self.get(grp.inputs[0], NHWC, for_mrvl=True, origin=grp.origin)
        ins, attrs = [x], dict(grp.attrs)
        base = grp.anchor.name
        if grp.op == "Conv2D":
            w = grp.weights["W"]   # float32, or int8 (+ int32 bias) for an int8 layer (qdq.py)
            ins.append(self.init(f"{base}_kernel_ohwi", w.transpose(0, 2, 3, 1), dtype=w.dtype))
            ins.append(self.init(f"{base}_bias", grp.weights["B"], dtype=grp.weights["B"].dtype)
                       if "B" in grp.weights else "")
            if "slope" in grp.weights:
                ins.append(self.init(f"{base}_slope", grp.weights["slope"]))
        self._emit(grp, grp.op, ins, attrs, NHWC)

    def _fc(self, grp: Group) -> None:
        src = grp.inputs[0]
        attrs = dict(grp.attrs)
        if len(self.logical_shape(src)) > 2:
            self._fc_rows(grp)
            return
        if src in self.flat:
            x = self.loc[src][0]
            attrs.update(weights_need_transform=1, flatten_shape=self.flat[src])
        else:
            x = self.get(src, None, for_mrvl=True, origin=grp.origin)
        base = grp.anchor.name
        ins = [x, self.init(f"{base}_kernel_oi", grp.weights["W"], dtype=grp.weights["W"].dtype),
               self.init(f"{base}_bias", grp.weights["B"], dtype=grp.weights["B"].dtype) if "B" in grp.weights else "",
               self.init(f"{base}_slope", grp.weights["slope"]) if "slope" in grp.weights else ""]
        self._emit(grp, "FC", ins, attrs, None)

    def _fc_rows(self, grp: Group) -> None:
        fc_rows.materialize(self, grp)

    def _eltwise(self, grp: Group) -> None:
        perm = self.common_perm(grp.inputs, grp.output)
        if len(grp.inputs) == 2 and "in2_scale" in grp.attrs and not self._broadcast_kept(grp.inputs, perm):
            perm = None   # an int8 add's broadcast operand (qdq.py) holds in the logical order, not this one
        ins = [self.get(t, perm, for_mrvl=True, origin=grp.origin) for t in grp.inputs]
        if "operand" in grp.weights:
            rank = len(self.logical_shape(grp.output))
            c = grp.weights["operand"]
            c = c.reshape((1,) * (rank - c.ndim) + c.shape)
            if perm is not None:
                c = c.transpose(perm)
            ins.append(self.init(f"{grp.anchor.name}_operand", c))
        self._emit(grp, grp.op, ins, self._act_attrs(grp), perm)

    def _broadcast_kept(self, tensors, perm: Perm) -> bool:
        """Whether an int8 Sum2D's operands stored in ``perm`` still have the broadcast fuse checked
        in their logical order (``qdq_pool.broadcast_operand``: the second along the first's leading axes,
        the innermost axis shared). NHWC moves the channel axis innermost: a mean over the channels
        of ``[N, C, 1, W]`` (a written-out LayerNorm's ``x - mean``) broadcasts along C, fine in NCHW,
        but its NHWC operand ``[N, 1, W, 1]`` would broadcast along the innermost axis."""
        from .qdq_pool import broadcast_operand
        a, b = (list(self.logical_shape(t)) for t in tensors)
        if a == b or perm is None:
            return True
        return broadcast_operand([a[i] for i in perm], [b[i] for i in perm]) if len(b) == len(a) else False

    def _lookup(self, grp: Group) -> None:
        """int8 Lookup (qdq_lookup.py): a per-channel table reads its channel axis last (NHWC for
        axis 1 of 4-D data, [N, T, C] for [N, C, T], as written for channels-last data)."""
        table = grp.weights["T"]
        attrs = dict(grp.attrs)
        axis = attrs.pop(CHANNEL_AXIS, 1)
        rank = len(self.logical_shape(grp.inputs[0]))
        perm = self.common_perm(grp.inputs, grp.output)
        if table.shape[0] > 1:
            perm = norm_perm([i for i in range(rank) if i != axis % rank] + [axis % rank])
        x = self.get(grp.inputs[0], perm, for_mrvl=True, origin=grp.origin)
        t = self.init(f"{grp.anchor.name}_table", table,   # fp32: an fp32 chain's value table
                      dtype=np.float32 if attrs.get("precision") == "fp32" else np.int32)
        self._emit(grp, "Lookup", [x, t], dict(attrs, channels=int(table.shape[0])), perm)

    def _concat(self, grp: Group) -> None:
        perm = self.common_perm(grp.inputs, grp.output)
        ins = [self.get(t, perm, for_mrvl=True, origin=grp.origin) for t in grp.inputs]
        for key in sorted(grp.weights, key=lambda k: int(k[5:])):   # constants at their positions
            c = grp.weights[key]
            ins.insert(int(key[5:]), self.init(f"{grp.anchor.name}_{key}", c if perm is None else c.transpose(perm)))
        axis = grp.attrs["axis"]
        stored_axis = list(perm).index(axis) if perm else axis
        int8 = {k: v for k, v in grp.attrs.items() if k in ALL_INT8_ATTRS or k in ("in_scales", "in_zero_points")}
        self._emit(grp, "Concat", ins, {"axis": stored_axis, "num_inputs": len(ins), **int8}, perm)

    def _reshape(self, grp: Group) -> None:
        """Run on the stored data when the reshape only splits/merges runs of axes that are in order
        in storage (the output is then stored permuted too); feed an FC a flattened NHWC tensor as it
        is (its weights get permuted); otherwise convert the input once, to the storage from which
        the reshape yields an NHWC (4-D) or logical output."""
        src, out = grp.inputs[0], grp.output
        in_shape, out_shape = self.logical_shape(src), self.logical_shape(out)
        name, perm = self.loc[src]
        if src in self.flat:
            name, perm = self.get(src, None, for_mrvl=True, origin=grp.origin), None
        blocks = reshape_blocks(in_shape, out_shape)
        out_perm: Perm = None
        flat = None
        if perm is not None and blocks is not None:
            after = stored_after_reshape(blocks, in_shape, perm)
            if after is not None:
                out_perm = canonical_perm(after, out_shape, self._feeds_spatial(out))
            elif self._flat_for_fc(src, out, perm):
                n, c, h, w = in_shape
                flat = [n, h, w, c]
            else:
                want = self._wanted_storage(out)
                before = stored_before_reshape(blocks, out_shape, want)
                if before is None:
                    want, before = list(range(len(out_shape))), list(range(len(in_shape)))
                name = self.get(src, norm_perm(before), for_mrvl=True, origin=grp.origin)
                out_perm = norm_perm(want)
        elif perm is not None:
            name = self.get(src, None, for_mrvl=True, origin=grp.origin)
        if out_perm is None and flat is None and len(out_shape) == 4 and self._feeds_mrvl(out):
            # [N, C] -> [N, C, 1, 1] (a Linear SE scale): the same data is already NHWC
            out_perm = canonical_perm(list(range(4)), out_shape, nhwc_first=True)
        op = "Reshape"
        # the tensor the node reads (a folded Transpose's input: [1, T, D] for [T, 1, D]) decides
        read = self.vinfo.get(name) or self.g.shape(name) or in_shape
        if len(out_shape) == 2 and len(in_shape) > 2 and out_shape[0] == in_shape[0] == read[0] \
                and stored_shape(out_shape, out_perm) == list(out_shape):
            op = "Flatten"   # nn.batch_flatten keeps the first axis; any other 2-D result is a Reshape
        elif [d for d in in_shape if d != 1] == [d for d in out_shape if d != 1] and len(out_shape) < len(in_shape):
            op = "Squeeze"
        grp.composite = opset.OPS[op].composite
        self._emit(grp, op, [name], {"shape": stored_shape(out_shape, out_perm)}, out_perm)
        if flat is not None:
            self.flat[out] = flat

