"""Static shapes for the legalizer: input pinning, ONNX shape inference, onnxruntime fallback.

Shape inference runs on a *light* copy of the model: large float initializers are declared as
graph inputs of the same type instead of being serialized, so a 500 MB model infers in
milliseconds. Small (integer) constants stay, so ``data_prop`` can still follow shape arithmetic.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper

from .. import file_weights
from ..errors import ShapeError

logger = logging.getLogger(__name__)

LIGHT_LIMIT = 4096  # elements: larger initializers are declared, not serialized


def _dims(vi: onnx.ValueInfoProto):
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)


def _value_info_of(t: onnx.TensorProto) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))


def declared_as_input(t: onnx.TensorProto) -> bool:
    """Whether the light model declares initializer ``t`` a graph input (reads only its name, type
    and dims) rather than copying it."""
    n = 1
    for d in t.dims:
        n *= d
    return n > LIGHT_LIMIT and t.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)


def light_model(model: onnx.ModelProto, nodes, inits: Dict[str, onnx.TensorProto],
                inputs: List[onnx.ValueInfoProto], outputs: List[onnx.ValueInfoProto]
                ) -> onnx.ModelProto:
    """A copy of ``model`` with ``nodes`` whose large initializers are declared graph inputs."""
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name or "graph"
    g.node.extend(nodes)
    g.input.extend(inputs)
    for name, t in inits.items():
        if declared_as_input(t):
            g.input.append(_value_info_of(t))
        else:
            g.initializer.append(t)
    for o in outputs:
        if is_tensor(o):
            vi = helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type or 0, None)
        else:  # sequence / optional / map values keep their declared type
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(o)
        g.output.append(vi)
    return light


def infer(graph_view, inputs: List[onnx.ValueInfoProto], outputs: List[onnx.ValueInfoProto]
          ) -> None:
    """Refresh ``graph_view.shapes`` / ``dtypes`` from ONNX shape inference."""
    light = light_model(graph_view.model, graph_view.toposort(), graph_view.inits, inputs, outputs)
    try:
        inferred = onnx.shape_inference.infer_shapes(file_weights.inline(light), strict_mode=False, data_prop=True)
    except Exception as exc:  # inference errors on exotic ops: keep what we know
        logger.warning("legalize: ONNX shape inference failed (%s); shapes stay partial", exc)
        return
    shapes, dtypes, other = {}, {}, set()
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + \
            list(inferred.graph.input):
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            if vi.type.WhichOneof("value"):
                other.add(vi.name)
            continue
        if t.elem_type:
            dtypes[vi.name] = t.elem_type
        d = _dims(vi)
        if d is not None:
            shapes[vi.name] = d
    graph_view.shapes = shapes
    graph_view.dtypes = dtypes
    graph_view.non_tensors = other


def is_tensor(vi: onnx.ValueInfoProto) -> bool:
    """A tensor value, or one whose type is not declared (then treated as a tensor)."""
    return vi.type.WhichOneof("value") in (None, "tensor_type")


def non_tensor_inputs(model: onnx.ModelProto) -> List[str]:
    """Graph inputs that are not tensors (sequence, optional, map values)."""
    inits = {i.name for i in model.graph.initializer}
    return [vi.name for vi in model.graph.input
            if vi.name not in inits and not is_tensor(vi)]


def pool_out_size(size, k, s, d, pb, pe, ceil):
    """Pooling output length as onnxruntime computes it (a ceil-mode window must start inside
    the input or its leading pad)."""
    span = size + pb + pe - ((k - 1) * d + 1)
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + pb:
        out -= 1
    return out


def ort_fill(model: onnx.ModelProto, missing: List[str], graph_view, override=False) -> None:
    """Measure the shapes ONNX inference left open by running onnxruntime once (random inputs)."""
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return
    others = non_tensor_inputs(model)
    if others:
        logger.info("legalize: no onnxruntime shape probe (inputs %s are not tensors); %d "
                    "tensors keep unknown shapes", others, len(missing))
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.ir_version = min(probe.ir_version, 10)
    known = {o.name for o in probe.graph.output}
    for name in missing:
        if name not in known:
            probe.graph.output.append(helper.make_empty_tensor_value_info(name))
    feeds = probe_feeds(probe.graph)
    try:
        sess = ort.InferenceSession(file_weights.serialized(probe), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(names, feeds)
    except Exception as exc:
        logger.warning("legalize: onnxruntime shape probe failed (%s); %d tensors keep unknown "
                       "shapes", exc, len(missing))
        graph_view.probe_error = str(exc)   # pinned input shapes the model cannot take? (shape_fit.py)
        return
    for name, v in zip(names, values):
        if (override or name in missing) and isinstance(v, np.ndarray):
            graph_view.shapes[name] = tuple(int(d) for d in v.shape)
            graph_view.dtypes[name] = helper.np_dtype_to_tensor_dtype(v.dtype)
    logger.info("legalize: %d tensor shapes measured with onnxruntime (data-dependent shapes are "
                "the values for a random input)", len(missing))


def probe_feeds(graph: onnx.GraphProto, ones: bool = False) -> Dict[str, np.ndarray]:
    """Inputs of the graph's static input shapes: seeded normal floats and zero integers, or all ones."""
    rng = np.random.default_rng(0)
    inits = {i.name for i in graph.initializer}
    feeds = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        shape = [d.dim_value for d in t.shape.dim]
        feeds[vi.name] = (np.ones(shape, dtype) if ones else rng.standard_normal(shape).astype(dtype)
                          if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype))
    return feeds


def pin_inputs(graph: onnx.GraphProto, input_shapes: Optional[Dict[str, List[int]]],
               init_names) -> None:
    """Apply ``input_shapes`` and insist every graph input is fully static."""
    input_shapes = dict(input_shapes or {})
    names = {vi.name for vi in graph.input}
    unknown = set(input_shapes) - names
    if unknown:
        raise ShapeError(f"input_shapes names {sorted(unknown)}, which are not graph inputs "
                         f"(inputs: {sorted(names - set(init_names))})",
                         hint="use the graph input names")
    for vi in graph.input:
        if vi.name in init_names or not vi.type.HasField("tensor_type"):
            continue
        t = vi.type.tensor_type
        if vi.name in input_shapes:
            shape = [int(d) for d in input_shapes[vi.name]]
            if t.HasField("shape") and len(t.shape.dim) and len(t.shape.dim) != len(shape):
                raise ShapeError(f"input_shapes[{vi.name!r}] has rank {len(shape)} but the input "
                                 f"has rank {len(t.shape.dim)}", node=vi.name,
                                 hint=f"give {len(t.shape.dim)} dimensions")
            t.ClearField("shape")
            t.shape.SetInParent()   # [] pins a 0-D input (no dims, but a known shape)
            for d in shape:
                t.shape.dim.add().dim_value = d
            continue
        # a symbolic batch (first) dimension proposes 1; any other symbolic one is named, not guessed
        # (1 there would propose a 1x1 image): the user fills in the real size
        sizes = [str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else
                 "1" if k == 0 else (d.dim_param if d.dim_param.isidentifier() else f"D{k}")
                 for k, d in enumerate(t.shape.dim)] if t.HasField("shape") else []
        example = ",".join(sizes) if t.HasField("shape") else "1,3,224,224"
        named = [x for x in sizes if not x.isdigit()]
        if not t.HasField("shape"):
            raise ShapeError(f"graph input {vi.name!r} has an unknown shape", node=vi.name,
                             hint=f"pass input_shapes={{{vi.name!r}: [{example}]}} "
                                  f"(CLI: --input-shape {vi.name}:{example})")
        for k, d in enumerate(t.shape.dim):
            if not d.HasField("dim_value") or d.dim_value < 0:
                what = repr(d.dim_param) if d.dim_param else "unknown"
                raise ShapeError(
                    f"graph input {vi.name!r} has a non-static dimension {k} ({what}); the "
                    f"accelerator needs static shapes", node=vi.name,
                    hint=f"pass input_shapes={{{vi.name!r}: [{example.replace(',', ', ')}]}} with "
                         f"the real sizes{' of ' + ', '.join(named) if named else ''} "
                         f"(CLI: --input-shape {vi.name}:{example})")


# ops whose output shape follows from their input shapes and attributes alone
SHAPE_DETERMINED = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "MatMul", "Gemm",
                              "Concat", "Add", "Sub", "Mul", "Div"})


def refused_by_inference(graph_view, unknown) -> List[Tuple[str, str]]:
    """(node, reason) for each default-domain node of ``SHAPE_DETERMINED`` whose inputs are static but
    whose output is among ``unknown``: ONNX shape inference refused the shapes (a kernel larger than
    its input, a MatMul of mismatched sizes): the model is invalid there, unless inference is wrong."""
    unknown, out = set(unknown), []
    for n in graph_view.model.graph.node:
        if n.op_type in SHAPE_DETERMINED and n.domain in ("", "ai.onnx") and n.output and n.output[0] in unknown:
            given = [graph_view.shape(i) for i in n.input if i]
            if all(s is not None for s in given):
                out.append((n.name, f"{n.op_type} output shape not inferable from the static input shapes "
                                    f"{[list(s) for s in given]}"))
    return out


def is_static(shape) -> bool:
    return shape is not None and all(d is not None and d >= 0 for d in shape)
