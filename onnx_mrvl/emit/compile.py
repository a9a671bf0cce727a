"""Compile a Nodes-JSON + Constants-JSON pair (ours or TVM's) into a model binary.

Reads the JSON pair alone. Produces the layer program in execution order, the tensor table,
fp16 weights in the layout each layer reads (OHWI / OI; FC weights permuted for an NHWC flatten),
an on-chip memory plan for ``num_tiles`` tiles of ``ocm_size`` bytes, and the arch parameters;
``artifact.pack`` turns that into bytes (docs/program.md, docs/binary-format.md).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..artifact.io_quant import boundary_fields
from ..artifact.schema import TENSOR_DTYPES, program_version
from ..errors import CompileError
from ..target import ArchProfile
from . import boundary_quant
from .json_attrs import NodeAttrs, to_number, unwrap
from .program_layer import LAYER_NAMES, Context, compile_layer, fit_rank, needs_flatten  # noqa: F401
from .memory import plan_memory

log = logging.getLogger(__name__)
MAX_BATCH = 1024


@dataclasses.dataclass
class CompileOptions:
    """The compiler's options (TVM's ``-num_tiles``, ``--ocm_size``, ``-quantize``, ``-b``)."""
    num_tiles: int = 4
    ocm_size: int = 0x100000
    quantize: str = "float16"
    batch: Optional[int] = None
    arch: Optional[ArchProfile] = None

    def arch_dict(self) -> dict:
        arch = self.arch or ArchProfile()
        d = {f.name: getattr(arch, f.name) for f in dataclasses.fields(arch)}
        d.update(num_tiles=int(self.num_tiles), ocm_size=int(self.ocm_size))
        return d


def _check_options(o: CompileOptions) -> None:
    if o.quantize not in ("float16", "fp16"):
        raise CompileError(f"quantize={o.quantize!r} is not supported", hint="use --quantize float16")
    if int(o.num_tiles) < 1:
        raise CompileError(f"num_tiles={o.num_tiles} must be at least 1")
    if int(o.ocm_size) < 1:
        raise CompileError(f"ocm_size={o.ocm_size} must be a positive number of bytes")
    if o.batch is not None and not 1 <= int(o.batch) <= MAX_BATCH:
        raise CompileError(f"batch={o.batch} must be between 1 and {MAX_BATCH}")


def _top_int(nodes_json: dict, key: str, default: int) -> int:
    v = nodes_json.get(key, default)
    try:
        return int(to_number(unwrap(v)))
    except (TypeError, ValueError):
        raise CompileError(f"top-level '{key}' is not an integer: {v!r}", hint="see docs/json-format.md") from None


ORDER_AGNOSTIC = ("Sum2D", "Mul2D", "Concat")
RECURRENT = ("LSTM", "GRU", "RNN")   # Y [T, D, B, H]: not an image


def _input_tensor(node: dict, idx: int, batch: Optional[int]) -> dict:
    a = NodeAttrs(node, idx)
    shape = a.ints("shape")
    if not shape or any(d < 1 for d in shape):
        a.fail(f"input shape {shape} is not a static shape of positive dimensions")
    if batch:
        shape = [batch] + shape[1:]
    dtype = a.str("dtype", "float32")
    if dtype not in ("float32", "float"):
        a.fail(f"input dtype {dtype} is not supported (region inputs cross as float32)")
    layout = a.str("data_layout", "NC" if len(shape) == 2 else "NCHW")
    return {"name": a.name, "shape": shape, "layout": layout}


def _first_input_batch(nodes_json: dict) -> int:
    for idx, node in enumerate(nodes_json["nodes"]):
        if isinstance(node, dict) and node.get("op") == "input":
            shape = _input_tensor(node, idx, None)["shape"]
            return int(shape[0]) if shape else 1
    return 1


def _check_declared_inputs(a: NodeAttrs, in_shapes: List[List[int]]) -> None:
    """data_layout_shape[_i] (TVM: per input, Sum2D's padded to 4-D) must match the real inputs."""
    for i, s in enumerate(in_shapes):
        key = f"data_layout_shape_{i}" if a.has(f"data_layout_shape_{i}") else ("data_layout_shape" if i == 0 else None)
        if key is None or not a.has(key):
            continue
        declared = fit_rank(a.ints(key), len(s))
        if declared[1:] != s[1:]:
            a.fail(f"{key} {a.ints(key)} disagrees with the shape {s} of input {i} "
                   f"(produced by the node it refers to)")


def build_program(nodes_json: dict, consts_json: dict, options: Optional[CompileOptions] = None, *,
                  defer: bool = False) -> Tuple[dict, Dict[str, np.ndarray]]:
    """The program (meta, weights) for a JSON pair; see docs/program.md. ``defer``: large float16
    weights may be :class:`~.fp16_cast.Float16Cast` (cast by ``pack`` into the binary) instead of arrays."""
    options = options or CompileOptions()
    _check_options(options)
    if not isinstance(nodes_json, dict) or not isinstance(nodes_json.get("nodes"), list):
        raise CompileError("the Nodes-JSON has no 'nodes' list", hint="see docs/json-format.md")
    if not isinstance(consts_json, dict):
        raise CompileError("the Constants-JSON is not an object", hint="see docs/json-format.md")
    json_batch = _first_input_batch(nodes_json)
    if "batch_size" in nodes_json and _top_int(nodes_json, "batch_size", 0) != json_batch:
        raise CompileError(f"batch_size={nodes_json['batch_size']!r} but the first input has batch {json_batch}",
                           hint="batch_size is the batch dimension of the region inputs (docs/json-format.md)")
    batch = int(options.batch) if options.batch else None
    ctx = Context(consts_json, json_batch, batch, {}, [], defer)
    tensors, layers, inputs = [], [], []
    node_tensor: Dict[int, int] = {}

    def new_tensor(name, shape, layout):  # only region inputs keep a name: the meta stays small
        t = {"id": len(tensors), "shape": [int(d) for d in shape], "layout": layout}
        if name is not None:
            t["name"] = name
        tensors.append(t)
        return len(tensors) - 1

    for idx, node in enumerate(nodes_json["nodes"]):
        if not isinstance(node, dict):
            raise CompileError(f"node {idx} is not an object")
        if node.get("op") == "input":
            t = _input_tensor(node, idx, batch)
            tid = new_tensor(t["name"], t["shape"], t["layout"])
            inputs.append({"name": t["name"], "tensor": tid, "shape": tensors[tid]["shape"], "layout": t["layout"]})
            node_tensor[idx] = tid
            continue
        a = NodeAttrs(node, idx)
        if node.get("op") not in ("tvm_op", "kernel", None):
            a.fail(f"node op '{node.get('op')}' is neither 'input' nor 'tvm_op'")
        ins = []
        refs = node.get("inputs", [])
        if not isinstance(refs, list):
            a.fail(f"inputs is not a list: {refs!r}")
        for ref in refs:
            try:
                src = int(to_number(ref[0] if isinstance(ref, list) else ref))
            except (TypeError, ValueError, IndexError):
                a.fail(f"malformed input reference {ref!r} (expected [node_index, 0, 0])")
            if src not in node_tensor:
                a.fail(f"input reference {ref!r} points to node {src}, which is not a node defined before "
                       f"this one (nodes must be listed in execution order)")
            ins.append(node_tensor[src])
        if not ins:
            a.fail("layer has no inputs")
        in_shapes = [tensors[t]["shape"] for t in ins]
        _check_declared_inputs(a, in_shapes)
        if needs_flatten(LAYER_NAMES.get(a.str("layer_name", "")), in_shapes):
            # TVM's fc_ni2no swallowed the NHWC flatten: make it an explicit program layer
            n = in_shapes[0][0]
            flat = [n, int(np.prod(in_shapes[0][1:]))]
            tid = new_tensor(None, flat, "NC")
            layers.append({"name": f"{a.name}.flatten", "layer_name": "Flatten", "params": {"shape": flat},
                           "weights": {}, "origin": a.origin, "macs": 0, "index": len(layers),
                           "inputs": ins, "outputs": [tid]})
            ins, in_shapes = [tid], [flat]
        layer, out_shape = compile_layer(idx, node, ctx, in_shapes, f"l{len(layers)}",
                                         [tensors[t]["layout"] for t in ins])
        if layer["layer_name"] == "layout_transform":
            layout = layer["params"]["dst_layout"]
        elif len(out_shape) == 2:
            layout = "NC"
        elif len(out_shape) == 4 and layer["layer_name"] in ORDER_AGNOSTIC + ("Lookup",):
            # Sum2D / Mul2D / Concat compute the same on any storage: the JSON's out_layout says
            # which one (fuse runs one on NCHW data when its inputs come from the CPU); TVM: NHWC.
            # An int8 Lookup writes the storage it read (its channel last): its out_layout too.
            # "ND": another permutation of its logical axes (a Transpose relabelled it, e.g. an
            # attention key k^T scaled in the order it was written), neither NCHW nor NHWC
            layout = a.str("out_layout", "NHWC")
            layout = layout if layout in ("NCHW", "NHWC", "ND") else "NHWC"
        elif len(out_shape) == 4 and layer["layer_name"] in ("Slice2D", "LayerNorm", "Softmax", "Requantize"):
            # a slice, layer norm, softmax or requantize keeps the storage of its input (its axis is given in it)
            layout = tensors[ins[0]]["layout"]
        elif len(out_shape) == 4 and layer["layer_name"] not in ("Reshape", "Flatten", "Squeeze", "BatchMatMul", *RECURRENT):
            layout = "NHWC"
        else:
            layout = "ND"
        tid = new_tensor(None, out_shape, layout)
        layer.update(index=len(layers), inputs=ins, outputs=[tid])
        layers.append(layer)
        node_tensor[idx] = tid
    outputs = _outputs(nodes_json, node_tensor, tensors)
    if not layers:
        raise CompileError("the Nodes-JSON has no layers", hint="a region needs at least one tvm_op node")
    for name, want in (("num_subgraph_inputs", len(inputs)), ("num_subgraph_outputs", len(outputs))):
        if name in nodes_json and _top_int(nodes_json, name, want) != want:
            raise CompileError(f"{name}={nodes_json[name]!r} but the Nodes-JSON has {want}",
                               hint="see docs/json-format.md")
    tensor_dtypes(tensors, layers, inputs, outputs)
    boundary_quant.check(nodes_json, inputs, outputs)
    for t in tensors:
        t["nbytes"] = int(np.prod(t["shape"], dtype=np.int64)) * TENSOR_DTYPES[t.get("dtype", "float16")]
    arch = options.arch_dict()
    memory = plan_memory(tensors, layers, inputs, outputs, ctx.weights, arch)
    meta = {"format": "onnx_mrvl.program", "program_version": program_version(layers),
            "name": str(nodes_json.get("subgraph_name") or "mrvl_subgraph"),
            "batch_size": int(batch or json_batch),
            "quantize": "float16", "arch": arch, "inputs": inputs, "outputs": outputs, "tensors": tensors,
            "weights": ctx.wmeta, "layers": layers, "memory_plan": memory}
    log.debug("compiled %s: %d layers, %d weights", meta["name"], len(layers), len(ctx.wmeta))
    return meta, ctx.weights


COPIES = ("Reshape", "Flatten", "Squeeze", "layout_transform")   # move values, compute nothing
FP32_MOVES = COPIES + ("Slice2D", "Concat", "Resize", "Maxpool2D", "GlobalMaxpool2D")   # an fp32 chain's data movement


def tensor_dtypes(tensors: List[dict], layers: List[dict], inputs: List[dict], outputs: List[dict]) -> None:
    """int8 storage (docs/program.md "tensor dtypes"): the output of an int8 layer holds its int8 /
    uint8 codes (``out_dtype``, with ``scale`` / ``zero_point``), so does a copy of such a tensor
    (Reshape/Flatten/Squeeze/layout_transform); a region input whose readers (through such copies)
    are all int8 layers of one input quantization is quantized by the runtime on the host (TVM's
    ``qscale``) and so are the copies on its way. The output of an fp32 layer (``precision`` "fp32", an fp32
    chain: fuse/qdq_f32chain.py) and data movement of it (Slice2D, Concat, Resize, max pools, copies) is float32.
    Every other tensor is fp16."""
    def quant(t, q):
        t.update(dtype=q[0], scale=float(q[1]), zero_point=int(q[2]))

    readers: Dict[int, List[dict]] = {}
    for layer in layers:
        for t in layer["inputs"]:
            readers.setdefault(t, []).append(layer)
    out_ids = {o["tensor"] for o in outputs}

    def wanted(t: int):
        """The one input quantization every reader of ``t`` applies (through copies), or None."""
        qs = set()
        if t in out_ids or not readers.get(t):
            return None
        for r in readers[t]:
            p = r["params"]
            if p.get("precision") in ("int8", "int8_in") or p.get("precision") == "int8_out" and "in_dtype" in p:
                # input 0: in_*, input 1 of a Sum2D / BatchMatMul: in2_*
                for k, ref in enumerate(r["inputs"]):
                    side = "in2" if k == 1 and "in2_dtype" in p else "in"
                    if ref != t:
                        continue
                    if k and r["layer_name"] in RECURRENT:   # a state input of an int8 recurrent layer: fp16
                        return None
                    if "in_scales" in p:   # an int8 Concat: input k's own quantization
                        qs.add((p["in_dtype"], p["in_scales"][k], p["in_zero_points"][k]))
                    else:
                        qs.add((p[f"{side}_dtype"], p[f"{side}_scale"], p[f"{side}_zero_point"]))
            elif r["layer_name"] in COPIES and len(r["inputs"]) == 1:
                qs.add(wanted(r["outputs"][0]))
            else:
                return None
        return qs.pop() if len(qs) == 1 and None not in qs else None

    def mark_inputs(t: int, q) -> None:
        quant(tensors[t], q)
        for r in readers.get(t, []):
            if r["layer_name"] in COPIES:
                mark_inputs(r["outputs"][0], q)

    for i in inputs:
        q = wanted(i["tensor"])
        if q is not None:
            mark_inputs(i["tensor"], q)
            i["dtype"] = q[0]
    for layer in layers:
        p, out = layer["params"], tensors[layer["outputs"][0]]
        if p.get("precision") in ("int8", "int8_out"):   # int8_out: a float layer writing int8 codes
            quant(out, (p["out_dtype"], p["out_scale"], p["out_zero_point"]))
        elif p.get("precision") == "fp32":   # an fp32 chain's arithmetic (fuse/qdq_f32chain.py)
            out["dtype"] = "float32"
        elif layer["layer_name"] in FP32_MOVES and p.get("precision") is None and \
                any(tensors[t].get("dtype") == "float32" for t in layer["inputs"]):
            out["dtype"] = "float32"   # moves fp32 values (and exactly dequantized codes beside them)
        elif layer["layer_name"] in COPIES and tensors[layer["inputs"][0]].get("dtype", "float16") != "float16":
            src = tensors[layer["inputs"][0]]
            quant(out, (src["dtype"], src["scale"], src["zero_point"]))
    # the MLIP metadata's boundary quantization (format 1.2): quantize / qscale, dequantize / dscale
    for key, items in (("inputs", inputs), ("outputs", outputs)):
        for b in items:
            t = tensors[b["tensor"]]
            if t.get("dtype", "float16") in ("int8", "uint8"):
                b["quantize" if key == "inputs" else "dequantize"] = boundary_fields(t, key)


def _outputs(nodes_json: dict, node_tensor: Dict[int, int], tensors: List[dict]) -> List[dict]:
    heads = nodes_json.get("heads")
    if not isinstance(heads, list) or not heads:
        raise CompileError("the Nodes-JSON has no 'heads' (the region outputs)", hint="see docs/json-format.md")
    names = nodes_json.get("output_names")
    outputs = []
    for k, head in enumerate(heads):
        try:
            src = int(to_number(head[0] if isinstance(head, list) else head))
        except (TypeError, ValueError, IndexError):
            raise CompileError(f"head {k} is malformed: {head!r} (expected [node_index, 0, 0])") from None
        if src not in node_tensor:
            raise CompileError(f"head {k} refers to node {src}, which does not exist",
                               hint="heads index the nodes list")
        t = tensors[node_tensor[src]]
        name = str(names[k]) if isinstance(names, list) and k < len(names) else \
            str(nodes_json["nodes"][src].get("name", f"output_{k}"))
        outputs.append({"name": name, "tensor": t["id"], "shape": t["shape"], "layout": t["layout"]})
    return outputs


def compile_json(nodes_json: dict, consts_json: dict, options: Optional[CompileOptions] = None) -> bytes:
    """The model binary for a JSON pair."""
    return compile_program(nodes_json, consts_json, options)[0]


def compile_program(nodes_json: dict, consts_json: dict, options: Optional[CompileOptions] = None
                    ) -> Tuple[bytes, dict]:
    """(the model binary, its meta) for a JSON pair."""
    binary, meta, _ = compile_program_sha256(nodes_json, consts_json, options)
    return binary, meta


def compile_program_sha256(nodes_json: dict, consts_json: dict, options: Optional[CompileOptions] = None
                           ) -> Tuple[bytes, dict, str]:
    """(the model binary, its meta, the binary's sha256 hex digest) for a JSON pair."""
    from ..artifact import pack_sha256
    meta, weights = build_program(nodes_json, consts_json, options, defer=True)   # cast into the binary
    binary, digest = pack_sha256(meta, weights)
    return binary, meta, digest
