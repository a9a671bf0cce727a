"""Fusion: legalized standard ONNX -> NHWC nodes of the Mrvl op set, with a decision per node.

``fuse(model, target)`` returns a ``FuseResult`` (the stage contract, onnx_mrvl/stage.py) whose
``model`` is a valid ONNX model (every Mrvl node has a model-local reference function, so plain
onnxruntime runs it), whose ``decisions`` say, for every node of the input, which Mrvl node it went
into or why it stays on the CPU, and whose ``log`` has one ``(composite, [node names], Mrvl node)``
per group.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Union

import numpy as np
import onnx

from .. import opset
from ..graph_index import GraphIndex, topological_order
from ..decisions import Decisions
from ..provenance import get_origin
from ..stage import StageResult, as_model
from ..target import Target, get_target
from .materialize import LAYOUT_FREE_CPU_OPS, materialize
from . import batch_matmul, gather_elements, host_power_log, host_preprocess, masks, qconst, qdq, qdq_concat, qdq_fallback, qdq_float_max, qdq_pool, \
    qdq_int8_in, qdq_layernorm, qdq_lookup, qdq_masked_softmax, qdq_norm_affine, qdq_recurrent, qdq_sub, qdq_transformer, recurrent, rmsnorm, slices_nd, \
    neg, qdq_f32chain, smooth_acts, take
from .patterns import ANCHORS as _PATTERN_ANCHORS, Group, Pattern, activation_through_concat, weights_reason
from .standalone import ACTIVATION_OPS, build_smooth_standalone, build_standalone_activation
from .transformer import ANCHORS as _TRANSFORMER_ANCHORS
from .lrn import ANCHORS as _LRN_ANCHORS

log = logging.getLogger(__name__)
def _int8_softmax(g, n, target, claimed=frozenset()):
    """A masked int8 Softmax (qdq_masked_softmax.py), else qdq_transformer's."""
    built = qdq_masked_softmax.build(g, n, target, claimed)
    return built if built is not None else qdq_transformer.build_int8_softmax(g, n, target, claimed)


INT8_TRANSFORMER_ANCHORS = dict(qdq_transformer.ANCHORS, Softmax=_int8_softmax,
                                ReduceMean=qdq_layernorm.build_qdq_layernorm,
                                **{op: qdq_layernorm.build_qdq_rmsnorm for op in qdq_layernorm.RMS_ENTRY_OPS})

ABSORB_ONLY = {"BatchNormalization": "batch normalization"}
# an activation nothing absorbed runs as Mul2D(x, 1) + activation (standalone.py)
STANDALONE = Pattern("mrvl.mul", ACTIVATION_OPS, build_standalone_activation)
ANCHORS = dict(_PATTERN_ANCHORS, **{op: STANDALONE for op in ACTIVATION_OPS}, **_TRANSFORMER_ANCHORS, **_LRN_ANCHORS)
# MatMul: an FC on a constant second operand, else a BatchMatMul of two activations (batch_matmul.py)
ANCHORS["MatMul"] = Pattern("mrvl.fc_ni2no|mrvl.batch_matmul", ("MatMul",), batch_matmul.build)
# Split / Slice: 4-D channel slices (slices.py), or one axis of a 2-D/3-D/5-D tensor (slices_nd.py)
ANCHORS["Split"] = ANCHORS["Slice"] = Pattern("mrvl.slice", ("Split", "Slice"), slices_nd.build)
# attention masks whose fill does not fit fp16 (masks.py): Add of float32's lowest, Where(cond, x, -inf)
ANCHORS["Add"] = Pattern("mrvl.sum", ("Add",), masks.build_add, ("activation",))
ANCHORS["Where"] = Pattern("mrvl.sum", ("Where",), masks.build_where)
ANCHORS["Mul"] = Pattern("mrvl.mul", ("Mul",), masks.build_mul, ("activation",))   # HF's run-time mask
ANCHORS.update({op: Pattern(f"mrvl.{op.lower()}", (op,), recurrent.build) for op in recurrent.PATTERN_ANCHORS})
ANCHORS.update({"Gather": Pattern("mrvl.slice", ("Gather",), take.build),          # take.py
                "Concat": Pattern("mrvl.concat", ("Concat",), take.build_concat_rows)})
# GatherElements with a constant index table: DeBERTa's relative-position gathers (gather_elements.py)
ANCHORS["GatherElements"] = Pattern("mrvl.gather_elements", ("GatherElements",), gather_elements.build)
# a Q -> DQ pair on an activation no int8 layer absorbed: a Requantize layer (qdq_transformer.py)
# a float Neg no pattern took: Mul2D(x, -1), exact (neg.py)
ANCHORS["Neg"] = Pattern("mrvl.mul", ("Neg",), neg.build_neg)
ANCHORS["QuantizeLinear"] = Pattern("mrvl.requantize", ("QuantizeLinear",), qdq_transformer.build_requantize)


class _Index(GraphIndex):
    """GraphIndex with memoised static shapes (patterns and layout ask for the same ones often)."""

    def __init__(self, model: onnx.ModelProto):
        super().__init__(model)
        self._shape_cache: Dict[str, Optional[List[int]]] = {}

    def shape(self, name: str) -> Optional[List[int]]:
        if name not in self._shape_cache:
            self._shape_cache[name] = super().shape(name)
        found = self._shape_cache[name]
        return None if found is None else list(found)


@dataclass
class FuseResult(StageResult):
    groups: List[Group] = field(default_factory=list)
    # fuse(consume=True): initializer name -> the read-only array written into ``model`` (in_place.py)
    arrays: Optional[Dict[str, np.ndarray]] = None


USER_EXCLUDED = "excluded by the user (exclude=...)"


def _excluded(node: onnx.NodeProto, exclude: dict) -> Optional[str]:
    """The reason ``node`` must stay on the CPU, matching its name, op type or original names, or
    being an operator of another domain than ONNX's (``_foreign``)."""
    for key in (node.name, node.op_type, *get_origin(node)):
        if key in exclude:
            return exclude[key]
    return _foreign(node)


def _foreign(node: onnx.NodeProto) -> Optional[str]:
    """A node outside the ONNX domain that legalize left (no rule rewrites it, or it refused): the
    patterns match ONNX op types, and a same-named op of another domain computes something else
    (onnxruntime's com.microsoft.nchwc ``Conv`` of an ORT_ENABLE_ALL-saved model reads and writes its
    CPU's blocked channel layout): it runs in onnxruntime, never fused by its op type."""
    if node.domain in ("", "ai.onnx", "ai.onnx.ml"):   # ONNX-ML ops: "no accelerator op" as before
        return None
    channels_last = any(a.name == "channels_last" and a.i for a in node.attribute)
    why = (" (onnxruntime's NCHWc blocked layout of a model saved after ORT_ENABLE_ALL optimizations: "
           "weights and tensors in its CPU's block order; save at ORT_ENABLE_EXTENDED to offload it)"
           if node.domain == "com.microsoft.nchwc" else
           " (channels_last: onnxruntime's NHWC form of a model saved after ORT_ENABLE_ALL optimizations; "
           "save at ORT_ENABLE_EXTENDED to offload it)" if channels_last else "")
    return f"{node.domain}::{node.op_type} is not an ONNX operator{why}: it runs in onnxruntime"


def _control_flow(node: onnx.NodeProto) -> Optional[str]:
    """The reason a node with bodies (If/Loop/Scan) stays on the CPU, or None for other nodes."""
    bodies = [sg for a in node.attribute for sg in list(a.graphs) + ([a.g] if a.HasField("g") else [])]
    if not bodies:
        return None
    count = sum(len(b.node) for b in bodies)
    return (f"control flow ({node.op_type}): the node runs in onnxruntime; the outer values its {len(bodies)} "
            f"bodies ({count} nodes) read stay in the logical layout")


def _int8_groups(g: GraphIndex, order, target: Target, exclude: dict, host=frozenset()):
    """QDQ layers (qdq.py), found before the float patterns: each claims Q/DQ nodes that come
    before its anchor in the order. -> ({anchor name: Group}, {anchor name: reason}, claimed names,
    {node name: why it is not int8}: what the float patterns take from a QDQ context, said in
    its fp16 layer's decision)."""
    found, reasons, claimed, not_int8 = {}, {}, set(host), {}   # host: the host's preprocessing
    index = {x.name: k for k, x in enumerate(order)}
    for n in order:
        if n.op_type not in qdq.ANCHORS + qdq_pool.POOL_ANCHORS + qdq_lookup.ANCHORS + ("Concat",) + \
                tuple(INT8_TRANSFORMER_ANCHORS) + qdq_recurrent.ANCHORS or _excluded(n, exclude) or n.name in claimed:
            continue
        built = None
        if n.op_type in qdq_norm_affine.ENTRY_OPS:   # the mean of a Keras layer norm cut by pairs
            built = qdq_norm_affine.build(g, n, target, claimed)
            if isinstance(built, str):
                not_int8[n.name], built = built, None
        if built is None and n.op_type in qdq.ANCHORS + qdq_pool.POOL_ANCHORS:
            built = (qdq.build if n.op_type in qdq.ANCHORS else qdq_pool.build_pool)(g, n, target, claimed)
        if built is None and n.op_type == "Add":   # c + DQ(a): the constant first (qdq_sub.py)
            built = qdq_sub.build_add_const_first(g, n, target, claimed)
        if built is None and n.op_type in qdq_float_max.ANCHORS:   # float x -> MaxPool -> Q -> DQ
            built = qdq_float_max.build(g, n, target, claimed)
        if n.op_type == "Concat":
            built = qdq_concat.build_concat_int8(g, n, target, claimed)
        if n.op_type in qdq_recurrent.ANCHORS:   # DQ(x) -> LSTM / GRU / RNN on DQ(W), DQ(R)
            built = qdq_recurrent.build(g, n, target, claimed)
        if built is None and n.op_type in INT8_TRANSFORMER_ANCHORS:
            # MatMul of two activations, Softmax (qdq_transformer.py), a layer norm or RMSNorm cut by
            # pairs (qdq_layernorm.py); a reason: the float pattern takes it
            built = INT8_TRANSFORMER_ANCHORS[n.op_type](g, n, target, claimed)
            if isinstance(built, str):
                not_int8[n.name], built = built, None
        if not isinstance(built, Group) and n.op_type in qdq_lookup.ANCHORS:
            lookup = qdq_lookup.build_lookup(g, n, target, claimed, index)
            if isinstance(lookup, str) and built is None:
                not_int8[n.name] = lookup
            built = lookup if isinstance(lookup, Group) else built
        if not isinstance(built, Group) and n.op_type == "Sub":   # two tensors, or a constant along
            sub = qdq_sub.build_sub(g, n, target, claimed)        # several axes: a subtracting Sum2D
            if isinstance(sub, Group):
                not_int8.pop(n.name, None)
                built = sub
        if isinstance(built, Group):
            built = weights_reason(built, target) or built
        if isinstance(built, Group):
            if any(x.name in claimed for x in built.nodes):
                continue
            found[n.name] = built
            claimed.update(x.name for x in built.nodes)
        elif isinstance(built, str) and n.op_type in qdq.ANCHORS:
            # a Conv/Gemm/MatMul on DQ weights whose output is not quantized: int8 in, fp16 out
            # (qdq_int8_in.py), else the fp16 layer on its dequantized weights (qdq_fallback.py),
            # else it stays on the CPU; a pool or an add that cannot be int8 is left to the float
            # patterns (an fp16 layer on the dequantized values)
            fallback = qdq_int8_in.build_int8_in(g, n, target, claimed)
            fallback = fallback or qdq_fallback.build_dequantized(g, n, target, built)
            fallback = (weights_reason(fallback, target) or fallback) if fallback is not None else None
            if isinstance(fallback, Group) and not any(x.name in claimed for x in fallback.nodes):
                found[n.name] = fallback
                claimed.update(x.name for x in fallback.nodes)
            else:
                reasons[n.name] = f"int8 (QDQ) layer: {built}"
        elif isinstance(built, str) and n.op_type in qdq_recurrent.ANCHORS:
            # a QDQ recurrent node that cannot be int8: the fp16 layer on its dequantized weights
            fallback = qdq_recurrent.build_dequantized(g, n, target, built, claimed)
            if fallback is not None and not any(x.name in claimed for x in fallback.nodes):
                found[n.name] = fallback
                claimed.update(x.name for x in fallback.nodes)
            else:
                not_int8[n.name] = built
        elif isinstance(built, str):
            not_int8[n.name] = built
    # fp16 fallbacks (a note) do not quantize their input: they take no pair
    # (an int8-in layer quantizes its input: it does)
    claimed.update(qdq.shared_pairs(g, [x for x in found.values()
                                        if not x.note or x.attrs.get("precision") == qdq_int8_in.PRECISION], claimed))
    claimed.update(qconst.shared_constant_dqs(g, list(found.values()), claimed))
    return found, reasons, claimed, not_int8


def find_groups(g: GraphIndex, order, target: Target, exclude: set, decisions: Decisions) -> List[Group]:
    claimed, groups = set(), []
    producer_of: Dict[str, Group] = {}
    int8, int8_reasons, int8_claimed, not_int8 = _int8_groups(g, order, target, exclude)
    host = host_preprocess.host_nodes(g, order) if int8 else set()
    if host & int8_claimed or host & set(int8):   # the host's preprocessing is kept out of the int8 layers
        int8, int8_reasons, int8_claimed, not_int8 = _int8_groups(g, order, target, exclude, host)
    int8_claimed = int8_claimed - host
    for n in order:
        decisions.record(n.name, n.op_type)
        if n.name in int8:
            groups.append(int8[n.name])
            claimed.update(x.name for x in int8[n.name].nodes)
            producer_of[int8[n.name].output] = int8[n.name]
            continue
        if n.name in claimed or n.name in int8_claimed:
            continue
        why = _excluded(n, exclude) or int8_reasons.get(n.name) or (host_preprocess.REASON if n.name in host else None)
        if why:
            decisions.record(n.name, n.op_type, reason=why)
            continue
        # the first node of a written-out GELU / Mish nothing absorbed (smooth_acts.py): Mul2D(x, 1) + it
        smooth = build_smooth_standalone(g, n, target) if n.op_type in smooth_acts.ENTRY_OPS else None
        built = (weights_reason(smooth, target) or smooth) if isinstance(smooth, Group) else None
        if built is None and n.op_type in rmsnorm.ENTRY_OPS:   # the square of an RMSNorm (rmsnorm.py)
            rms = rmsnorm.build(g, n, target)
            if isinstance(rms, str):
                decisions.record(n.name, n.op_type, reason=rms)
                continue
            built = (weights_reason(rms, target) or rms) if rms is not None else None
            if isinstance(built, str):
                decisions.record(n.name, n.op_type, reason=built)
                continue
        pattern = STANDALONE if built is not None else ANCHORS.get(n.op_type)
        if pattern is None:
            what = ABSORB_ONLY.get(n.op_type)
            reason = (f"standalone {what} (fuses only into a preceding conv, fc, sum or mul)" if what
                      else _control_flow(n) or f"no accelerator op for {n.op_type}")
            decisions.record(n.name, n.op_type, reason=reason)
            continue
        if built is None:
            built = pattern.match(g, n, target)
        if isinstance(built, str):
            decisions.record(n.name, n.op_type, reason=built)
            continue
        if n.name in not_int8 and not built.note:
            built.note = f"fp16 layer (not int8: {not_int8[n.name]})"
        built.note = built.note or qdq_recurrent.float_in_qdq_note(g, built)
        activation_through_concat(g, built, producer_of, target)
        groups.append(built)
        claimed.update(x.name for x in built.nodes)
        producer_of[built.output] = built
    groups = qdq_transformer.merge_output_pairs(g, groups, decisions)   # float layers writing int8 codes
    groups = qdq_f32chain.mark_fp32_chains(g, groups, decisions)   # float chains between int8 values and quantizers: fp32
    return groups


def _aliases(g: GraphIndex, order, groups: List[Group], exclude: set) -> set:
    """Transposes that become free relabellings (their input or a consumer is on the accelerator)."""
    in_group = {x.name for grp in groups for x in grp.nodes}
    mrvl_out = {grp.output for grp in groups}
    aliases = set()
    for n in order:
        if n.op_type in LAYOUT_FREE_CPU_OPS and n.name not in in_group and n.input and \
                n.input[0] in mrvl_out:
            # runs on the accelerator's storage (materialize.py): a Transpose after it relabels too
            # (tf2onnx: region -> Softmax(axis) -> Transpose to NHWC -> graph output)
            mrvl_out.update(o for o in n.output if o)
            continue
        if n.op_type != "Transpose" or n.name in in_group or _excluded(n, exclude):
            continue
        if not g.is_float(n.input[0]) or g.shape(n.input[0]) is None:
            continue
        feeds_mrvl = any(c.name in in_group for c in g.consumers.get(n.output[0], []))
        if n.input[0] in mrvl_out or feeds_mrvl:
            aliases.add(n.name)
            mrvl_out.add(n.output[0])
    return aliases


def fuse(model: onnx.ModelProto, target: Optional[Target] = None, *,
         exclude: Union[Iterable[str], Dict[str, str]] = (), keep_weights: bool = True,
         consume: bool = False) -> FuseResult:
    """Fuse a legalized model into Mrvl ops.

    ``exclude``: node names (legalized or original) or op types kept on the CPU; a dict maps each
    to the reason recorded for it. ``keep_weights=False``: the groups' weight arrays are dropped as
    they are written into the model (``convert`` does: one copy of the weights held, not two).
    ``consume=True``: the caller gives ``model`` up; it becomes the fused model (its weights not
    copied) and ``arrays`` holds the arrays written into it (fuse/in_place.py)."""
    model = as_model(model, "fuse")
    target = get_target(target)
    exclude = dict(exclude) if isinstance(exclude, dict) else {e: USER_EXCLUDED for e in (exclude or ())}
    g = _Index(model)
    order = topological_order(g.nodes, g.inputs)
    exclude = {**host_power_log.host_nodes(g, order, ANCHORS), **exclude}   # before any activation absorbs a Log
    g.excluded = {n.name for n in g.nodes if _excluded(n, exclude)}
    decisions = Decisions()
    groups = find_groups(g, order, target, exclude, decisions)
    aliases = _aliases(g, order, groups, exclude)
    fills = masks.cpu_mask_fills(g, groups, target)
    for name, (_, _, fill) in fills.items():
        d = decisions.get(name)
        decisions.record(name, "Where", reason=f"{d.reason if d else 'on the CPU'}; its fill "
                         f"{fill:.4g} becomes {masks.MASK_FILL:g} "
                         f"(fp16 holds it; the masked scores still get weight 0 in the region's Softmax)")
    fused, mrvl_names, alias_owner, arrays = materialize(model, g, groups, order, aliases, keep_weights, consume,
                                                         fills)
    for grp in groups:
        mrvl = mrvl_names[grp.anchor.name]
        for i, x in enumerate(grp.nodes):
            kind = {"int8": f"{grp.op} int8", qdq_int8_in.PRECISION: f"{grp.op} int8 in, fp16 out"}.get(
                grp.attrs.get("precision"), grp.op)
            how = (f"fused into {kind} ({grp.composite})" if i == 0 else
                   f"applied by the ops feeding {grp.op} ({grp.composite}): moved before the concat"
                   if grp.op == "Concat" else f"absorbed into {kind} ({grp.composite})")
            how = f"{grp.note}; {how}" if grp.note else how
            decisions.record(x.name, x.op_type, placement="accelerator", mrvl_node=mrvl,
                             composite=grp.composite, reason=how)
    for name in aliases:
        owner = alias_owner.get(name)
        decisions.record(name, "Transpose", placement="accelerator" if owner else "cpu", mrvl_node=owner,
                         reason=f"folded into the layout of {owner} (a relabelling, no data movement)"
                         if owner else "a transpose between CPU ops")
    opset.attach_functions(fused)
    log.info("fuse: %d groups, %d of %d nodes on the accelerator", len(groups),
             len(decisions.by_placement("accelerator")), len(decisions))
    steps = [(grp.composite, [x.name for x in grp.nodes], mrvl_names[grp.anchor.name]) for grp in groups]
    return FuseResult(fused, decisions, steps, groups, arrays)
