"""Materialise fused groups as NHWC Mrvl nodes with the fewest layout changes.

Every tensor is tracked as (current name, stored permutation of its logical axes). Spatial Mrvl ops
want NHWC storage of a logical NCHW tensor; elementwise ops, concat and channel slices (slices.py)
take the storage that needs the fewest conversions of their inputs (NHWC on a tie for images; 4-D
data no spatial op touches, e.g. attention scores, is ND (``images.py``): the fewest converted
elements on a tie, no NHWC preference, so it stays in the order it was written); a Transpose is a
relabelling of the stored data and costs nothing; reshapes run on the stored data when they only
split/merge runs of axes that are in order in storage (``perms.py``), or feed an FC whose weights get
permuted; CPU ops that compute the same on permuted data (unary elementwise, Split/Slice off the
channel axis) keep the storage too. A layout change is inserted only where a consumer needs another
storage: a Mrvl ``LayoutTransform`` at an accelerator boundary, a plain Transpose elsewhere, at most
once per tensor and storage.

Nodes writing a permuted tensor carry ``metadata_props["mrvl.storage"]`` (JSON perm); tensors so
stored are named ``<t>__nhwc`` / ``<t>__perm`` except Mrvl outputs inside the graph, which keep the
logical name of the original tensor.
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper

from .. import opset
from ..graph_index import FLOAT, GraphIndex, attr, extend_copies, holds_exactly, subgraph_reads
from ..provenance import set_origin
from .lower import SPATIAL, GroupLowering
from .patterns import Group
from .shell import model_shell
from . import in_place, rotate
from .images import non_image_tensors
from .perms import NHWC, Perm, inverse_perm, norm_perm, rotations, stored_shape

STORAGE_KEY = "mrvl.storage"
# CPU ops that compute the same thing on permuted storage (scalar extra inputs; Split and Slice get
# their axes remapped): they keep the accelerator's layout instead of converting around them
LAYOUT_FREE_CPU_OPS = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
                       "HardSwish", "Softplus", "Softsign", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf",
                       "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Mish", "Gelu", "Clip",
                       "Identity", "Split", "Slice", "Softmax", "LogSoftmax", "Hardmax"}
# single-axis ops (opset >= 13: Softmax family over one axis) whose ``axis`` attribute is remapped
AXIS_OPS = {"Split", "Softmax", "LogSoftmax", "Hardmax"}


# Mrvl ops that read a 4-D operand in any stored order (batch_matmul.py: a_perm / b_perm), so
# an op feeding only them need not write NHWC
ANY_ORDER_READERS = ("BatchMatMul",)


class Materializer(GroupLowering):
    """Tracks every tensor as (current name, stored permutation) and writes the nodes; how each group
    kind becomes Mrvl nodes is GroupLowering's (lower.py)."""

    def __init__(self, g: GraphIndex, group_of: Dict[str, Group], aliases: set, non_image: Optional[set] = None):
        self.g = g
        self.non_image = non_image or set()             # tensors no spatial op wants NHWC (images.py)
        self.group_of = group_of
        self.aliases = aliases
        self.loc: Dict[str, Tuple[str, Perm]] = {}
        self.flat: Dict[str, List[int]] = {}          # tensor -> NHWC shape it was flattened from
        self.rows: Dict[str, Tuple[str, List[int]]] = {}  # N-D FC output kept as [rows, O] -> (name, stored shape)
        self.cache: Dict[Tuple[str, Perm], str] = {}
        self.mrvl_tensors: set = set()
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[Tuple[str, np.ndarray]] = []   # written straight into the output graph
        self.vinfo: Dict[str, List[int]] = {}
        self.names: set = {n.name for n in g.nodes}
        self.mrvl_name: Dict[str, str] = {}            # anchor name -> Mrvl node name
        self.alias_of: Dict[str, List[str]] = {}       # tensor -> Transposes folded on its way
        self.alias_owner: Dict[str, str] = {}          # folded Transpose -> Mrvl node it went into
        self._shapes: Dict[str, List[int]] = {}
        self.mrvl_producer: Dict[str, str] = {}        # stored tensor -> Mrvl node writing it
        self.rename: Dict[str, str] = {}               # tensor -> graph output name it becomes
        self.produced: set = set()                     # tensors written by an emitted node
        self.label: Dict[str, str] = {}                # 4-D Mrvl output -> the layout compile gives it
        # tensors that must exist in the logical layout under their own name: graph outputs and
        # outer-scope values read inside If/Loop/Scan bodies (a body reads them by name)
        self.keep: set = g.output_set | subgraph_reads(g.nodes)

    # ---------------------------------------------------------------- helpers
    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def init(self, base: str, arr: np.ndarray, dtype=np.float32) -> str:
        name = self.fresh(base)
        a = np.asarray(arr, dtype=dtype)   # a view (an OHWI kernel) is written in C order as it is
        self.inits.append((name, a if a.ndim else np.ascontiguousarray(a)))   # (0-d: 1-d, as before)
        return name

    def logical_shape(self, t: str) -> List[int]:
        shape = self._shapes.get(t)
        if shape is None:
            shape = self._shapes[t] = self.g.shape(t)
        return shape

    def known_shape(self, t: str, shape: List[int]) -> None:
        """Declare the logical shape of a tensor fuse introduces (not in the input graph)."""
        self._shapes[t] = list(shape)

    def available(self, t: str, want: Perm) -> bool:
        """True when ``t`` already exists stored with ``want`` (no conversion needed)."""
        return self.loc[t][1] == want or (t, want) in self.cache

    def common_perm(self, tensors: Sequence[str], out: Optional[str] = None) -> Perm:
        """The storage for an op over ``tensors`` that needs the fewest conversions; on a tie NHWC
        for 4-D tensors (the accelerator's layout), so a fused region stays NHWC throughout. A 4-D
        ``out`` read by accelerator ops counts as one more conversion unless NHWC: the conversion
        then happens before the op on a tie; with more inputs to convert (a Concat of CPU slices,
        YOLOv5's Focus) the op runs on the NCHW data and one LayoutTransform follows it (the emitted
        layer's out_layout tells the compile step which storage it wrote). For ND tensors (``images.py``:
        no spatial op in their storage component) neither NHWC nor the extra count: the fewest
        conversions, then the fewest converted elements, then the first operand's storage."""
        rank = len(self.logical_shape(tensors[0]))
        image = rank == 4 and not all(t in self.non_image for t in list(tensors) + [out] if t)
        candidates = [NHWC] if image else []
        for t in tensors:
            p = self.loc[t][1]
            if p not in candidates and t not in self.flat:
                candidates.append(p)
        if not candidates:
            return None
        if not image:   # ND data (attention scores, masks): the storage that moves the fewest elements
            return min(candidates, key=lambda p: (sum(not self.available(t, p) for t in tensors),
                                                  sum(int(np.prod(self.logical_shape(t))) for t in tensors
                                                      if not self.available(t, p))))
        extra = rank == 4 and out is not None and self._feeds_mrvl(out, skip=ANY_ORDER_READERS)
        return min(candidates, key=lambda p: sum(not self.available(t, p) for t in tensors)
                   + (extra and p != NHWC))

    def get(self, t: str, want: Perm, *, for_mrvl: bool, origin: Sequence[str]) -> str:
        """The name of tensor ``t`` stored with permutation ``want``, converting if needed."""
        name, have = self.loc[t]
        if have == want:
            return name
        if t in self.flat or t in self.rows:
            raise AssertionError(f"flattened tensor {t} used outside an FC")
        key, own = (t, want), False
        if key in self.cache:
            hit = self.cache[key]
            # a graph output converted on the host for the user: an accelerator op reading the same
            # data converts it in its region instead of reading the host's copy (a cut otherwise)
            if not (for_mrvl and name in self.mrvl_tensors and hit not in self.mrvl_tensors):
                return hit
            key, own = (t, want, "mrvl"), True
            if key in self.cache:
                return self.cache[key]
        shape = self.logical_shape(t)
        src = list(have) if have else list(range(len(shape)))
        dst = list(want) if want else list(range(len(shape)))
        q = [inverse_perm(src)[dst[j]] for j in range(len(dst))]
        out = t if (want is None and t in self.keep and not own) else self.fresh(
            f"{t}__{'nhwc' if want == NHWC else 'nchw' if want is None else 'perm'}")
        layouts = {tuple(opset.TO_NHWC): ("NCHW", "NHWC"), tuple(opset.TO_NCHW): ("NHWC", "NCHW")}
        mrvl = for_mrvl or name in self.mrvl_tensors
        src_l, dst_l = layouts.get(tuple(q), (None, None))
        # the compile step knows what a Mrvl op wrote as NHWC / NCHW; a Transpose may have relabelled
        # it (Conv -> Transpose(0,3,1,2) -> Reshape): then this is no NCHW<->NHWC change of that data
        relabelled = src_l is not None and self.label.get(name, src_l) != src_l
        unit_only = [a for a in src if shape[a] != 1] == [a for a in dst if shape[a] != 1]
        if src_l is not None and unit_only and name in self.mrvl_tensors and name not in self.label:
            relabelled = True    # a Mrvl output of unknown label whose bytes stay: a reshape is right either way
        if src_l is not None and mrvl and not relabelled:   # TVM's layout_transform
            node = opset.make_node("LayoutTransform", [name], [out], name=self.fresh(f"layout_{t}"),
                                   origin=origin, attrs={"src_layout": src_l, "dst_layout": dst_l},
                                   composite=f"mrvl.layout_transform_{src_l.lower()}2{dst_l.lower()}")
            self.mrvl_tensors.add(out)
            self.label[out] = dst_l
        elif unit_only:
            # only unit axes move (3-D/5-D storages, CPU tensors): the same data, relabelled by a reshape
            stored = stored_shape(shape, want)
            if mrvl:
                node = opset.make_node("Reshape", [name], [out], name=self.fresh(f"reshape_{t}"), origin=origin,
                                       attrs={"shape": stored}, composite="mrvl.reshape")
                self.mrvl_tensors.add(out)
            else:
                node = helper.make_node("Reshape", [name, self.init(f"{t}_stored_shape", np.array(stored), np.int64)],
                                        [out], name=self.fresh(f"reshape_{t}"))
                set_origin(node, origin)
        elif ((for_mrvl and out != t) or (mrvl and relabelled)) and \
                (steps := rotations(stored_shape(shape, have), q)) is not None:
            # a real permutation an accelerator op reads (not a graph output's): keep it in the region
            node = rotate.materialize(self, t, name, out, steps, stored_shape(shape, want), origin)
        else:
            node = helper.make_node("Transpose", [name], [out], name=self.fresh(f"transpose_{t}"), perm=q)
            set_origin(node, origin)
        self.add(node, want)
        self.vinfo[out] = stored_shape(shape, want)
        self.cache[key] = out
        return out

    def define(self, t: str, perm: Perm, *, mrvl: bool, suffix: str = "") -> str:
        """Name for a produced tensor ``t`` that will be stored with ``perm`` (``suffix``: the
        data is not the original tensor's, e.g. an activation moved before a concat)."""
        if suffix:
            name = self.fresh(f"{t}{suffix}")
        elif perm is None or (mrvl and t not in self.keep):
            name = t
        else:
            name = self.fresh(f"{t}__{'nhwc' if perm == NHWC else 'perm'}")
        self.loc[t] = (name, perm)
        self.produced.add(name)
        if mrvl:
            self.mrvl_tensors.add(name)
        self.vinfo[name] = stored_shape(self.logical_shape(t), perm)
        return name

    def add(self, node: onnx.NodeProto, perm: Perm) -> None:
        """Append ``node``; when it writes its output in a permuted storage order, say so in
        ``metadata_props["mrvl.storage"]`` (JSON list: stored axis k holds logical axis perm[k])."""
        if perm is not None:
            entry = node.metadata_props.add()
            entry.key, entry.value = STORAGE_KEY, json.dumps(list(perm))
        self.nodes.append(node)

    # ---------------------------------------------------------------- nodes
    def cpu_node(self, n: onnx.NodeProto) -> None:
        new = onnx.NodeProto()
        new.CopyFrom(n)
        perm = self._transparent(n)
        if perm is not None:   # runs as well on the stored data: no layout change around it
            new.input[0] = self.get(n.input[0], perm, for_mrvl=True, origin=[n.name])
            rank = len(self.logical_shape(n.input[0]))
            if n.op_type in AXIS_OPS:
                axis = list(perm).index(attr(n, "axis", 0 if n.op_type == "Split" else -1) % rank)
                del new.attribute[:]
                new.attribute.extend([a for a in n.attribute if a.name != "axis"] +
                                     [helper.make_attribute("axis", axis)])
            elif n.op_type == "Slice":   # starts/ends/steps follow ``axes``: remap the axes only
                axes = (self.g.const(n.input[3]) if len(n.input) > 3 and n.input[3]
                        else np.arange(len(self.g.const(n.input[1]))))
                stored = np.array([list(perm).index(int(a) % rank) for a in axes], np.int64)
                while len(new.input) < 4:
                    new.input.append("")
                new.input[3] = self.init(f"{n.name}_axes_stored", stored, np.int64)
            for i, o in enumerate(n.output):
                if o:
                    new.output[i] = self.define(o, perm, mrvl=False)
            self.add(new, perm)
            return
        for i, t in enumerate(n.input):
            if t and t in self.loc:
                new.input[i] = self.get(t, None, for_mrvl=False, origin=[n.name])
        for t in subgraph_reads([n]):   # a body reads outer values by name, in the logical layout
            if t in self.loc and t not in n.input:
                self.get(t, None, for_mrvl=False, origin=[n.name])
        for o in n.output:
            if o:
                self.loc[o] = (o, None)
                self.produced.add(o)
        self.nodes.append(new)

    def _transparent(self, n: onnx.NodeProto) -> Perm:
        """The stored permutation a CPU node can run on as it is (elementwise on one tensor, or a
        Split / Slice with constant parameters), or None when it needs the logical layout."""
        if n.op_type not in LAYOUT_FREE_CPU_OPS or not n.input or n.input[0] not in self.loc:
            return None
        if n.input[0] in self.flat or any(t and not self.g.is_const(t) for t in n.input[1:]):
            return None
        if n.op_type in AXIS_OPS and n.op_type != "Split" and self._opset() < 13:
            return None    # before opset 13 Softmax flattens the axes from ``axis`` on
        if not self.g.is_float(n.input[0]) or any(o and self.logical_shape(o) is None for o in n.output):
            return None
        perm = self.loc[n.input[0]][1]
        if perm is None and len(self.logical_shape(n.input[0])) == 4 and all(
                self._only_spatial(o) for o in n.output if o):
            perm = NHWC   # everything it feeds wants NHWC: convert its input (once) instead
        return perm

    def _opset(self) -> int:
        return next((o.version for o in self.g.model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def alias(self, n: onnx.NodeProto) -> None:
        name, have = self.loc[n.input[0]]
        rank = len(self.logical_shape(n.input[0]))
        perm = list(attr(n, "perm", list(range(rank))[::-1]))
        src = list(have) if have else list(range(rank))
        stored = norm_perm([inverse_perm(perm)[src[j]] for j in range(rank)])
        self.loc[n.output[0]] = (name, stored)
        self.alias_of[n.output[0]] = self.alias_of.get(n.input[0], []) + [n.name]
        if name in self.mrvl_producer:       # relabels what an accelerator op wrote
            self.alias_owner[n.name] = self.mrvl_producer[name]
        out = n.output[0]
        if out not in self.g.output_set:
            return
        # graph outputs are stored as logical, under their own name
        if stored is None and name in self.produced and name not in self.g.output_set:
            self.rename[name] = out          # the data is already in order: the producer writes it
            self.loc[out] = (out, None)
            if name in self.mrvl_tensors:
                self.mrvl_tensors.add(out)
        elif self.get(out, None, for_mrvl=name in self.mrvl_tensors, origin=[n.name]) != out:
            node = helper.make_node("Identity", [name], [out], name=self.fresh(f"identity_{out}"))
            set_origin(node, [n.name])
            self.nodes.append(node)
            self.loc[out] = (out, None)

    def _wanted_storage(self, t: str) -> List[int]:
        """Storage to write ``t`` in when it must be converted anyway: NHWC for a 4-D image, logical
        otherwise; but when every reader is the same relabelling Transpose to a 4-D tensor, the order
        that makes that tensor NHWC (``Transpose(0,2,3,1) -> Reshape -> Transpose(0,3,1,2) -> Conv``:
        one conversion before the reshape instead of one before and one after)."""
        rank = len(self.logical_shape(t))
        users = self.g.consumers.get(t, [])
        perms = {tuple(attr(c, "perm", list(range(rank))[::-1])) for c in users if c.name in self.aliases}
        if (users and len(perms) == 1 and all(c.name in self.aliases for c in users) and rank == 4
                and t not in self.g.output_set):
            perm = perms.pop()
            return [perm[a] for a in NHWC]
        return list(NHWC) if rank == 4 else list(range(rank))

    def _feeds_spatial(self, t: str) -> bool:
        return any(self.group_of[c.name].op in SPATIAL for c in self.g.consumers.get(t, [])
                   if c.name in self.group_of)

    def _feeds_mrvl(self, t: str, skip=()) -> bool:
        return any(c.name in self.group_of and self.group_of[c.name].op not in skip
                   for c in self.g.consumers.get(t, []))

    def _only_spatial(self, t: str) -> bool:
        users = self.g.consumers.get(t, [])
        return bool(users) and t not in self.g.output_set and all(
            c.name in self.group_of and self.group_of[c.name].op in SPATIAL and self.group_of[c.name].anchor is c
            for c in users)

    def _flat_for_fc(self, src: str, out: str, perm: Perm) -> bool:
        in_shape, out_shape = self.logical_shape(src), self.logical_shape(out)
        return (perm == NHWC and len(in_shape) == 4 and len(out_shape) == 2
                and out_shape[0] == in_shape[0] and out not in self.g.output_set
                and all(self._is_fc_input(c, out) for c in self.g.consumers.get(out, [])))

    def _is_fc_input(self, consumer: onnx.NodeProto, t: str) -> bool:
        grp = self.group_of.get(consumer.name)
        return grp is not None and grp.op == "FC" and grp.anchor is consumer and grp.inputs[0] == t


def materialize(model: onnx.ModelProto, g: GraphIndex, groups: List[Group], order: List[onnx.NodeProto],
                aliases: set, keep_weights: bool = True, consume: bool = False, cpu_inputs=None
                ) -> Tuple[onnx.ModelProto, Dict[str, str], Dict[str, str], Optional[Dict[str, np.ndarray]]]:
    """(the fused model, anchor -> Mrvl node name, folded Transpose -> Mrvl node, the written arrays).
    ``cpu_inputs``: {CPU node name: (input index, constant array, ...)}: that input replaced (masks.py).
    ``consume``: ``model`` is given up and becomes the fused model when it can (in_place.py; the
    written arrays are then returned, else None)."""
    group_of = {n.name: grp for grp in groups for n in grp.nodes}
    m = Materializer(g, group_of, aliases,
                     non_image_tensors(g, groups, aliases, order, LAYOUT_FREE_CPU_OPS, SPATIAL))
    for t in list(g.inputs) + list(g.initializers):
        m.loc[t] = (t, None)
    for n in order:
        grp = group_of.get(n.name)
        if grp is not None:
            if grp.anchor is n:
                m.group(grp)
        elif n.name in aliases:
            m.alias(n)
        else:
            m.cpu_node(n)
            if n.name in (cpu_inputs or {}):
                k, arr = cpu_inputs[n.name][:2]
                m.nodes[-1].input[k] = m.init(f"{n.name}_in{k}", arr)
    for o in g.outputs:
        m.get(o, None, for_mrvl=False, origin=[])
    if m.rename:
        for n in m.nodes:
            for seq in (n.input, n.output):
                for i, t in enumerate(seq):
                    if t in m.rename:
                        seq[i] = m.rename[t]
    out = model_shell(model)
    graph = out.graph
    graph.node.extend(m.nodes)
    used = {i for n in m.nodes for i in n.input} | subgraph_reads(m.nodes) | set(g.outputs)
    # an array that is an initializer's values as read (an FC kernel kept as it is) is copied from it
    inits, m.inits = [(name, arr, g.const_origin(arr)) for name, arr in m.inits], []
    if not keep_weights:   # each array is freed once written: nothing else holds it
        for grp in groups:
            grp.weights = {}
        g.forget_values()
    arrays = in_place.write_in_place(model, g, used, inits) if consume else None
    if arrays is None:
        extend_copies(graph.initializer, (t for t in model.graph.initializer if t.name in used))
    inits.reverse()
    while inits:
        name, arr, origin = inits.pop()
        t = graph.initializer.add()
        if origin is not None and holds_exactly(g.initializers[origin], arr):
            del arr
            t.CopyFrom(g.initializers[origin])   # one copy in protobuf, the same bytes as below
            t.name = name
            continue
        t.name, t.data_type = name, helper.np_dtype_to_tensor_dtype(arr.dtype)
        t.dims.extend(arr.shape)
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        del arr   # freed before protobuf copies ``data`` (with keep_weights=False): two copies at a time, not three
        t.raw_data = data
        del data
    old_vi = {vi.name: vi for vi in model.graph.value_info}
    produced = {o for n in m.nodes for o in n.output}
    del graph.value_info[:]
    for name in sorted(produced - set(g.outputs)):
        if name in m.vinfo:
            graph.value_info.append(helper.make_tensor_value_info(name, FLOAT, m.vinfo[name]))
        elif name in old_vi:
            graph.value_info.append(old_vi[name])
    if arrays is not None:
        out = in_place.become(model, out)
    return out, m.mrvl_name, m.alias_owner, arrays
