"""The checks of a model read from the user: opset range, unique tensor names, onnxruntime's own
domains and default-domain ops, raw_data sizes, then onnx.checker on a weightless copy."""
from __future__ import annotations

import logging
from typing import List, Optional

import onnx

from . import file_weights
from .errors import ModelError

log = logging.getLogger(__name__)
MIN_OPSET = 1   # older opsets are converted by legalize (onnx.version_converter)


def validate_model(model: onnx.ModelProto, raw_sizes: Optional[List[Optional[int]]] = None) -> None:
    """Checker, opset range and unique tensor names, with errors that say what to fix.
    ``raw_sizes``: the initializers' raw_data lengths from ``read_model`` (None: asked of ``model``)."""
    default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if default:
        from onnx import defs
        newest = defs.onnx_opset_version()
        if default[0] < MIN_OPSET:
            raise ModelError(f"opset {default[0]} is older than the oldest supported ({MIN_OPSET})",
                             hint="re-export the model at opset 7 or newer")
        if default[0] > newest:
            raise ModelError(f"opset {default[0]} is newer than the installed onnx knows ({newest})",
                             hint="upgrade onnx or export at an older opset")
    seen = {}
    for n in model.graph.node:
        for o in n.output:
            if o and o in seen:
                raise ModelError(f"tensor '{o}' is produced by two nodes ('{seen[o]}' and '{n.name}')",
                                 node=n.name, hint="tensor names must be unique (SSA)")
            if o:
                seen[o] = n.name
    skeleton = _check_sizes_and_strip(model, raw_sizes)
    _ort_default_domain_ops(skeleton)
    ort_domain_imports(skeleton)
    try:
        if skeleton.ByteSize() > 2_000_000_000:   # the checker takes at most 2 GB of protobuf
            log.warning("model too large for onnx.checker even without its weights: not checked")
            return
        onnx.checker.check_model(file_weights.inline(skeleton))
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid model"
        if first.startswith("Field 'shape' of 'type' is required but missing"):
            # a graph output / value_info with an element type and no shape: the checker refuses it,
            # onnxruntime runs it, and shape inference (legalize) fills the shape in
            log.info("the model has a tensor type without a shape (accepted; shapes are inferred)")
            return
        if "must be topologically sorted" in first and _sorted_check(skeleton):
            # a node reads a tensor written further down, e.g. a Loop body's outer-scope read after
            # onnxruntime's quantizer moved the Loop up: onnxruntime sorts and runs it, so does legalize
            log.info("the model's nodes are not in topological order (accepted; legalize sorts them)")
            return
        if "Unrecognized attribute: axis" in first:
            per_axis = next((n for n in skeleton.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                             and n.domain in ("", "ai.onnx") and any(a.name == "axis" for a in n.attribute)), None)
            if per_axis is not None:
                raise ModelError(
                    f"{per_axis.op_type} '{per_axis.name}' has a per-channel 'axis', which opset "
                    f"{default[0] if default else '?'} does not have (onnxruntime's quantize_static writes it with "
                    f"per_channel=True into opset 10-12 models; onnxruntime refuses the model as well)",
                    node=per_axis.name,
                    hint="raise the float model to opset 13 (onnx.version_converter.convert_version(m, 13)) "
                         "before quantizing it, or quantize with per_channel=False") from None
        hint = _unknown_op_hint(skeleton) or "fix the exporter output (onnx.checker.check_model explains)"
        raise ModelError(f"the model fails the ONNX checker: {first}", hint=hint) from None


def _unknown_op_hint(model: onnx.ModelProto) -> Optional[str]:
    """What to do about the first default-domain op with no schema at the model's opset: an op of a
    later opset (tf2onnx writes HardSwish, an opset-14 op, at ``--opset 13``), or a TFLite custom op
    tf2onnx passed through (``TFL_<name>``: no ONNX equivalent, onnxruntime cannot run it either)."""
    from onnx import defs
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or defs.has(n.op_type, version):
            continue
        if defs.has(n.op_type):
            since = next(v for v in range(version + 1, defs.onnx_opset_version() + 1) if defs.has(n.op_type, v))
            return (f"{n.op_type} ('{n.name}') is an ONNX op from opset {since} in a model of opset {version}: "
                    f"export at opset {since} or newer (tf2onnx: --opset {since})")
        if n.op_type.startswith("TFL_"):
            return (f"{n.op_type} ('{n.name}') is a TFLite custom op that tf2onnx passed through (no ONNX "
                    f"equivalent; onnxruntime cannot run it either): replace it in the TFLite model or the "
                    f"ONNX graph with standard ops before converting")
        return f"{n.op_type} ('{n.name}') is no ONNX op: give it a domain onnxruntime registers, or replace it"
    return None


# onnxruntime's own operator domains: it runs their ops without the model importing the domain
# (quantize_dynamic(extra_options={"EnableSubgraph": True}) writes a DynamicQuantizeLSTM / MatMulInteger
# into an If / Loop body and imports com.microsoft only when the main graph has one of its ops)
ORT_DOMAINS = ("com.microsoft", "com.microsoft.nchwc")


def ort_domain_imports(skeleton: onnx.ModelProto) -> None:
    """Import onnxruntime's domains (version 1) that nodes of ``skeleton``, bodies included, use
    without the model importing them, as onnxruntime takes them (the checker would refuse)."""
    used, graphs = set(), [skeleton.graph]
    while graphs:
        for n in graphs.pop().node:
            used.add(n.domain)
            graphs += [b for a in n.attribute for b in ([a.g] if a.HasField("g") else []) + list(a.graphs)]
    have = {o.domain for o in skeleton.opset_import}
    for d in ORT_DOMAINS:
        if d in used and d not in have:
            skeleton.opset_import.append(onnx.helper.make_opsetid(d, 1))
            log.info("the model uses domain %s without importing it (accepted, as onnxruntime does)", d)


def _sorted_check(skeleton: onnx.ModelProto) -> bool:
    """True when ``skeleton`` (a stripped copy: sorted in place) passes the checker once its nodes
    are in topological order, outer-scope reads of If / Loop / Scan bodies counted."""
    from .graph_index import node_reads
    nodes = list(skeleton.graph.node)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[i] for i in node_reads(n) if i in producer and producer[i] != k} for k, n in enumerate(nodes)]
    done, order = set(), []
    while len(order) < len(nodes):
        ready = [k for k in range(len(nodes)) if k not in done and deps[k] <= done]
        if not ready:
            return False
        order += ready
        done.update(ready)
    copies = [onnx.NodeProto() for _ in nodes]
    for c, k in zip(copies, order):
        c.CopyFrom(nodes[k])
    del skeleton.graph.node[:]
    skeleton.graph.node.extend(copies)
    try:
        onnx.checker.check_model(file_weights.inline(skeleton))
    except onnx.checker.ValidationError:
        return False
    return True


# onnxruntime registers these in the default domain as its own ops (LayerNormalization below opset 17,
# SimplifiedLayerNormalization at any): its transformer optimizer writes them there. The checker has no
# schema for them; legalize's contrib_norm rewrites them (docs/legalize.md, rule 1b).
ORT_DEFAULT_DOMAIN_OPS = {"LayerNormalization": 17, "SimplifiedLayerNormalization": 10 ** 9}


def _ort_default_domain_ops(skeleton: onnx.ModelProto) -> None:
    """Check onnxruntime's default-domain ops in the stripped copy as custom-domain ops."""
    default = next((o.version for o in skeleton.opset_import if o.domain in ("", "ai.onnx")), 0)
    moved = False
    for n in skeleton.graph.node:
        if n.domain in ("", "ai.onnx") and default < ORT_DEFAULT_DOMAIN_OPS.get(n.op_type, 0):
            n.domain = "com.microsoft"
            moved = True
    if moved and not any(o.domain == "com.microsoft" for o in skeleton.opset_import):
        skeleton.opset_import.add(domain="com.microsoft", version=1)


# Element sizes of the types whose raw_data _check_sizes_and_strip may replace by one element.
_RAW_ITEMSIZE = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.FLOAT16: 2,
                 onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1,
                 onnx.TensorProto.INT16: 2, onnx.TensorProto.UINT16: 2, onnx.TensorProto.INT32: 4,
                 onnx.TensorProto.UINT32: 4, onnx.TensorProto.INT64: 8, onnx.TensorProto.UINT64: 8,
                 onnx.TensorProto.BOOL: 1}
STRIP_BYTES = 1 << 16   # initializers with more raw bytes than this are checked here, not by onnx


def _check_sizes_and_strip(model: onnx.ModelProto, raw_sizes=None) -> onnx.ModelProto:
    """A copy of ``model`` for onnx.checker in which every big raw_data initializer holds one
    element (dims [1]). The checker reads no values; what it checks about them, raw_data being
    long enough for dims and type, is checked here first (a tensor that fails goes to the checker
    whole, so the message is onnx's). check_model on the real model serialises and parses every
    weight: seconds on large models, and impossible beyond 2 GB."""
    skeleton = onnx.ModelProto()
    for fd, value in model.ListFields():          # messages come back by reference: no copy
        if fd.name != "graph":
            copy_field(skeleton, fd, value)
    graph = model.graph
    for fd, value in graph.ListFields():
        if fd.name != "initializer":
            copy_field(skeleton.graph, fd, value)
    if raw_sizes is not None and len(raw_sizes) != len(graph.initializer):
        raw_sizes = None
    for i, t in enumerate(graph.initializer):
        size = _RAW_ITEMSIZE.get(t.data_type)
        held = file_weights.is_held(t)   # raw data kept apart (file_weights.py): its length known
        if not held and (size is None or t.data_location == onnx.TensorProto.EXTERNAL or not t.HasField("raw_data")
                         or t.HasField("segment")):
            skeleton.graph.initializer.add().CopyFrom(t)
            continue
        n = 1
        for d in t.dims:
            n *= d
        known = raw_sizes[i] if raw_sizes is not None else None
        nbytes = (file_weights.nbytes(t) if held else
                  known if known is not None and known >= 0 else len(t.raw_data))   # (a copy: upb)
        if not held and (n < 0 or nbytes <= STRIP_BYTES or n * size > nbytes):
            skeleton.graph.initializer.add().CopyFrom(t)   # small, or the checker reports it
            continue
        stub = skeleton.graph.initializer.add()
        for fd in onnx.TensorProto.DESCRIPTOR.fields:
            if fd.name in (("raw_data", "dims", "data_location", "external_data") if held else ("raw_data", "dims")):
                continue
            if fd.is_repeated:
                if len(getattr(t, fd.name)):
                    getattr(stub, fd.name).extend(getattr(t, fd.name))
            elif t.HasField(fd.name):
                copy_field(stub, fd, getattr(t, fd.name))
        stub.dims.append(1)
        stub.raw_data = bytes(size)
    return skeleton


def copy_field(msg, fd, value) -> None:
    """Set protobuf field ``fd`` of ``msg`` to ``value`` (repeated: extended; message: copied)."""
    if fd.is_repeated:
        getattr(msg, fd.name).extend(value)
    elif fd.type == fd.TYPE_MESSAGE:
        getattr(msg, fd.name).CopyFrom(value)
    else:
        setattr(msg, fd.name, value)
