"""Steps before the rules: node names, initializer inputs, opset upgrade, IR version."""
from __future__ import annotations

import logging
from typing import Dict, List, Sequence

import onnx
from onnx import helper

from .. import provenance
from ..errors import ModelError
from . import old_opsets
from .shapes import LIGHT_LIMIT

logger = logging.getLogger(__name__)

MIN_OPSET = 13
ORT_MIN_OPSET = 7   # onnxruntime's oldest supported opset: older models must convert (or fail)
MAX_IR = 10


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def node_names(nodes: Sequence[onnx.NodeProto]) -> List[str]:
    """The names ``name_nodes`` gives ``nodes``: unnamed (or duplicate-named) ones ``<OpType>_<index>``
    (compare finds the original nodes a layer's origin names by these)."""
    taken = {n.name for n in nodes if n.name}
    seen, out = set(), []
    for idx, n in enumerate(nodes):
        if n.name and n.name not in seen:
            seen.add(n.name)
            out.append(n.name)
            continue
        base = f"{n.op_type}_{idx}" if not n.name else f"{n.name}_{idx}"
        name, k = base, 1
        while name in taken or name in seen:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        seen.add(name)
        out.append(name)
    return out


def name_nodes(graph: onnx.GraphProto) -> int:
    """Give unnamed (or duplicate-named) nodes the name ``<OpType>_<index>``; returns how many."""
    renamed = 0
    for n, name in zip(graph.node, node_names(graph.node)):
        if n.name != name:
            n.name = name
            renamed += 1
    return renamed


def drop_initializer_inputs(graph: onnx.GraphProto) -> int:
    """Initializers listed as graph inputs (IR 3) become plain constants."""
    inits = {i.name for i in graph.initializer}
    keep = [vi for vi in graph.input if vi.name not in inits]
    dropped = len(graph.input) - len(keep)
    if dropped:
        del graph.input[:]
        graph.input.extend(keep)
    return dropped


def _adapter_origins(g: onnx.GraphProto, cg: onnx.GraphProto) -> None:
    """Nodes an adapter added (Softmax 11 -> 13: ``Shape, Flatten, Softmax, Reshape`` around the old
    one) get the provenance of the original node whose output their chain ends in."""
    before = {(n.name, n.op_type) for n in g.node}
    writer = {o: n.name for n in g.node for o in n.output if o}
    readers: Dict[str, list] = {}
    for n in cg.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for n in cg.node:
        if (n.name, n.op_type) in before or any(p.key == provenance.ORIGIN_KEY for p in n.metadata_props):
            continue
        seen, todo, origin = set(), list(n.output), []
        while todo and not origin:
            t = todo.pop()
            if t in writer:
                origin.append(writer[t])
            elif t not in seen:
                seen.add(t)
                todo.extend(o for r in readers.get(t, []) for o in r.output)
        if origin:
            provenance.set_origin(n, origin)


def upgrade_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """Convert the default-domain opset to MIN_OPSET when below it (big weights stay out of the
    converter); on failure log it and return the model unchanged."""
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        return model   # no default-domain op (e.g. only ai.onnx.ml): nothing to convert
    old = default_opset(model)
    if old >= MIN_OPSET:
        return model
    g = model.graph
    held: Dict[str, onnx.TensorProto] = {}
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    lg = light.graph
    lg.name = g.name or "graph"
    lg.node.extend(g.node)
    lg.input.extend(g.input)
    lg.output.extend(g.output)
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n > LIGHT_LIMIT:
            held[t.name] = t
            lg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            lg.initializer.append(t)
    if old < ORT_MIN_OPSET:   # old adapters need input sizes that ONNX inference cannot give
        old_opsets.seed_shapes(light, old)
    try:
        conv = onnx.version_converter.convert_version(light, MIN_OPSET)
    except Exception as exc:
        if old < ORT_MIN_OPSET:
            raise ModelError(f"the opset {old} model cannot be converted to opset {MIN_OPSET} ({exc})",
                             hint=f"re-export the model at opset {ORT_MIN_OPSET} or newer (onnxruntime runs "
                                  f"opset {ORT_MIN_OPSET}+)") from None
        logger.warning("legalize: opset %d -> %d conversion failed (%s); keeping opset %d, rules "
                       "handle its attribute forms", old, MIN_OPSET, exc, old)
        return model
    cg = conv.graph
    changed = _interface_change(list(g.input) + list(g.output), list(cg.input) + list(cg.output))
    if old < 11 and not changed:
        changed = _resize_10_semantics(cg)
    if changed and old < ORT_MIN_OPSET:
        raise ModelError(f"converting the opset {old} model to opset {MIN_OPSET} would change it ({changed})",
                         hint=f"re-export the model at opset {ORT_MIN_OPSET} or newer")
    if changed:
        # e.g. the Scan 8 -> 9 adapter drops the batch axis of the graph inputs and outputs:
        # the converted model would no longer accept the caller's tensors
        logger.warning("legalize: opset %d -> %d conversion would change the model (%s); "
                       "keeping opset %d, rules handle its attribute forms", old, MIN_OPSET,
                       changed, old)
        return model
    # a node the converter rebuilt (Upsample -> Resize) comes back unnamed: it keeps the name of the
    # node that wrote the same output
    writer = {o: n.name for n in g.node for o in n.output if o}
    used = {n.name for n in cg.node if n.name}
    for n in cg.node:
        name = writer.get(n.output[0]) if not n.name and n.output else None
        if name and name not in used:
            n.name = name
            used.add(name)
            provenance.set_origin(n, [name])
    _adapter_origins(g, cg)
    # take the converted nodes back into the model, whose big weights never moved
    have = {t.name for t in g.initializer}
    del g.node[:]
    g.node.extend(cg.node)
    inputs = [vi for vi in cg.input if vi.name not in held]
    del g.input[:]
    g.input.extend(inputs)
    for t in cg.initializer:
        if t.name not in have:
            g.initializer.append(t)
    del model.opset_import[:]
    model.opset_import.extend(conv.opset_import)
    model.ir_version = max(model.ir_version, 7)
    g.ClearField("value_info")
    renamed = name_nodes(g)
    logger.info("legalize: opset %d -> %d (%d nodes added by the converter named)", old,
                MIN_OPSET, renamed)
    return model


def _resize_10_semantics(graph: onnx.GraphProto) -> str:
    """Give the Resize nodes that came from opset <= 10 (Resize-10, Upsample) the coordinate mode they
    had: onnx's converter leaves Resize-11's defaults (``half_pixel``, ``round_prefer_floor``), which
    compute something else (PyTorch opset 9/10 exports of a bilinear upsample: 0.6 relative error).
    onnxruntime runs Resize-10 as ``asymmetric``, nearest taking the floor when upsampling and the
    ceiling when downsampling. Returns why the conversion cannot keep them ("" when it can)."""
    consts = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            v = next((a.t for a in n.attribute if a.name == "value"), None)
            if v is not None:
                consts[n.output[0]] = v
    for n in graph.node:
        if n.op_type != "Resize" or any(a.name == "coordinate_transformation_mode" for a in n.attribute):
            continue
        n.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        mode = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "mode"), b"nearest")
        if mode not in (b"nearest", "nearest"):
            continue
        scales = consts.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        scales = onnx.numpy_helper.to_array(scales).reshape(-1) if scales is not None else []
        down, up = any(0 < x < 1 for x in scales), any(x > 1 for x in scales)
        if down and up:
            return f"nearest Resize {n.name!r} scales some axes up and some down (no Resize-11 equivalent)"
        # a computed scale is taken for an upsampling (Upsample's purpose)
        n.attribute.append(helper.make_attribute("nearest_mode", "ceil" if down else "floor"))
    return ""


def _type_key(tp: onnx.TypeProto):
    """Element type and dims (None when not static) of a tensor type; the bytes otherwise."""
    kind = tp.WhichOneof("value")
    if kind is None:
        return 0, None
    if kind != "tensor_type":
        return tp.SerializeToString()
    t = tp.tensor_type
    dims = None
    if t.HasField("shape"):
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return t.elem_type, dims


def _interface_change(before, after) -> str:
    """Why the graph inputs/outputs ``after`` differ from ``before`` ("" when they do not): a
    tensor must keep its element type, rank and static dimensions."""
    new = {vi.name: vi for vi in after}
    for vi in before:
        other = new.get(vi.name)
        if other is None:
            return f"{vi.name!r} disappeared"
        a, b = _type_key(vi.type), _type_key(other.type)
        if isinstance(a, bytes) or isinstance(b, bytes):
            if a != b:
                return f"{vi.name!r} changed its type"
            continue
        if a[0] and b[0] and a[0] != b[0]:
            return f"{vi.name!r} changed its element type"
        if a[1] is None or b[1] is None:
            continue
        if len(a[1]) != len(b[1]) or any(x is not None and y is not None and x != y
                                         for x, y in zip(a[1], b[1])):
            return f"{vi.name!r} changed its shape from {list(a[1])} to {list(b[1])}"
    return ""


def fix_ir_version(model: onnx.ModelProto) -> None:
    """At least what the opsets need, at most what onnxruntime 1.31 loads (capped at 10)."""
    try:
        need = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:
        need = 7
    model.ir_version = min(max(model.ir_version, need, 4), MAX_IR)
