"""Per-tensor comparison of a converted model B against its reference A.

Both run on the same inputs with every intermediate tensor visible (``runner.run_all``). A tensor
of B maps to the tensor of A with its logical name (``tensors.logical_name``) and is brought back
to A's layout (``tensors.Storage``). Inside an accelerator region onnxruntime sees nothing, so each
``Subgraph`` node's binary runs on the simulator fed with the region inputs of B's run, and every
layer maps to the output of the last original node of its ``origin`` (the fuse convention: a Mrvl
node's output keeps the name of its group's last original output); of a node of several outputs, to
the one ``layer_outputs.py`` finds it holds. A layer the program declares no layout for holds its
data in the order ``stored_order.py`` carries from its input. A layer whose tensor or order is not
known is listed as not compared, with the reason.

Tolerance (fp16-aware): a tensor passes when ``max|ref - got| <= atol + rtol * max|ref|``.
fp16 has an 11-bit significand (relative rounding 2**-11 ~ 4.9e-4 per value); every layer rounds
its output and the errors of a deep net add up, so the default ``rtol`` is 1e-2 of the tensor's
largest magnitude, with ``atol`` 1e-4 for tensors that are (nearly) zero. Integer tensors must be
equal; non-finite values must agree: each row counts the NaN / inf of both sides, and a failing row
says why (e.g. "3 NaN where the reference is finite", or max_abs over the tolerance).

Each row also carries the tensor's SNR in dB (``snr.py``), and ``snr_drops`` the layers adding the
most noise to what they read. Comparing an int8 conversion with its fp32 original, layers map onto
the fp32 tensors through ``quantized_map.py``.

A QDQ reference (activation QuantizeLinear nodes) is not run with every tensor exposed: that would
unfuse its int8 groups in onnxruntime. It is probed at its QuantizeLinear outputs only, where
onnxruntime's plan stays as it is (``qdq_probes.py``); such rows also compare int8 codes (share
identical, max code difference; pass: >= 99% identical, the rest within one quantum).

Inputs: seeded random arrays of A's declared shapes. A symbolic dimension takes ``input_shapes``
(``--input-shape``), else the converted model's static size for it, else 1 when it is the first
(batch) dimension; any other symbolic dimension raises ``UsageError`` asking for ``--input-shape``.
"""
from __future__ import annotations

import logging
import numbers
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx

from ..errors import ModelError, UsageError
from ..options import check_tolerances

from . import qdq_codes, qdq_probes, quantized_map, snr
from .canonical import ModelLike, explicit_origin, load_model
from .compare_result import CompareResult, TensorCompare
from .inputs import feed_shapes, random_feeds
from .layer_outputs import LayerOutputs
from .stored_order import carry_order
from .runner import capture_region, region_binary, region_nodes, run_all, whole_layers
from .tensors import LAYOUT_PERMS, Storage, error_stats, graph_storage, layer_storage_in_reference

log = logging.getLogger(__name__)

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-2


def _producers(model: onnx.ModelProto) -> Dict[str, Tuple[int, onnx.NodeProto]]:
    return {t: (i, n) for i, n in enumerate(model.graph.node) for t in n.output if t}


def _origin_index(model: onnx.ModelProto) -> Dict[str, List[int]]:
    """original node name -> positions of A's nodes standing for it (by name, the name legalization
    gives an unnamed or duplicate-named node, or A's own records)."""
    from ..legalize.prepare import node_names

    out: Dict[str, List[int]] = {}
    for i, (n, legal) in enumerate(zip(model.graph.node, node_names(model.graph.node))):
        if n.name:
            out.setdefault(n.name, []).append(i)
        if legal != n.name:
            out.setdefault(legal, []).append(i)
        for o in explicit_origin(n) or []:
            if o != n.name:
                out.setdefault(o, []).append(i)
    return out


def compare_models(a: ModelLike, b: ModelLike, inputs: Optional[Mapping[str, np.ndarray]] = None, *,
                   atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL, seed: int = 0,
                   model_dir: Optional[str] = None, simulate: bool = True,
                   fp16_baseline: bool = False,
                   input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> CompareResult:
    """Compare every tensor of ``b`` that maps onto a tensor of ``a`` (the reference).

    ``inputs``: arrays by input name (seeded random when None, of the shapes ``feed_shapes`` picks
    with ``input_shapes``); ``model_dir``: where B's region binaries are (default: B's folder);
    ``simulate``: compare inside regions layer by layer; ``fp16_baseline``: also run A with every
    float tensor stored in fp16 and judge each tensor against it (``result.baseline``,
    inspection/baseline_report.py)."""
    check_tolerances(atol=atol, rtol=rtol)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise UsageError(f"seed={seed!r} is not an integer >= 0", hint="pass seed=0 (the default) or another")
    ma, mb = load_model(a), load_model(b)
    if model_dir is None and not isinstance(b, onnx.ModelProto):
        model_dir = os.path.dirname(os.path.abspath(os.fspath(b)))
    if inputs is not None and input_shapes:
        raise UsageError("input shapes were given together with input arrays",
                         hint="drop --input-shape: the arrays of --inputs have their shapes")
    feeds = dict(inputs) if inputs is not None else random_feeds(ma, seed, feed_shapes(ma, mb, input_shapes))
    qdq = None
    try:
        if qdq_probes.is_qdq(ma):
            qdq = qdq_probes.QdqReference(ma, feeds)
            va = qdq.values
        else:
            va = run_all(ma, feeds)
    except Exception as exc:  # noqa: BLE001 - only onnxruntime's own errors are re-worded
        if not type(exc).__module__.startswith("onnxruntime"):
            raise
        shapes = {k: list(np.shape(v)) for k, v in feeds.items()}
        raise ModelError(f"onnxruntime cannot run the reference model on inputs {shapes}: "
                         f"{str(exc).strip().splitlines()[-1][:300]}",
                         hint="give the input sizes the model expects with --input-shape "
                              "NAME:D1,D2,... or real arrays with --inputs") from None
    keep, kept = _keeper(ma, va) if fp16_baseline else (None, {})
    b_inputs = {vi.name for vi in mb.graph.input} - {t.name for t in mb.graph.initializer}
    vb = run_all(mb, {k: v for k, v in feeds.items() if k in b_inputs}, model_dir,
                 None if qdq is None else qdq.b_exposed(mb, region_nodes(mb)))
    res = CompareResult(_label(a, ma, "A"), _label(b, mb, "B"), atol, rtol,
                        {k: list(np.shape(v)) for k, v in feeds.items()}, seed=None if inputs is not None else seed,
                        qdq=qdq)
    prod_a = _producers(ma)
    outputs_a = {o.name for o in ma.graph.output}
    rows: Dict[str, TensorCompare] = {}
    binaries = {n.name: region_binary(n, model_dir) for n in region_nodes(mb)}
    storage = graph_storage(mb, mb.graph.node, {k: tuple(np.shape(v)) for k, v in vb.items()},
                            _region_output_storage(mb, binaries), {t: n for t, (_, n) in prod_a.items()})
    for n in mb.graph.node:
        for t in n.output:
            if not t or t not in storage or t not in vb:
                continue
            logical, st = storage[t]
            if logical not in prod_a or logical not in va:
                res.b_only += 1                # a tensor the conversion created (tiles, splits, ...)
                continue
            if logical in rows and rows[logical].b_tensor == logical:
                continue                       # the logical-layout copy is already compared
            ref = va[logical]
            got = st.to_logical(vb[t], np.shape(ref))
            if got is None:
                res.unmapped.append({"tensor": t, "node": n.name, "reason": f"stored shape {list(np.shape(vb[t]))} "
                                     f"({st.describe()}) does not map onto {list(np.shape(ref))}"})
                continue
            if keep is not None:
                keep(logical, got)
            rows[logical] = _row(logical, prod_a[logical], t, n.name, "onnxruntime",
                                 n.name if n.domain == "mrvl" and n.op_type.startswith("Subgraph") else "",
                                 explicit_origin(n) or [n.name], st.describe(), ref, got, atol, rtol,
                                 logical in outputs_a, qdq)
    if simulate:
        _compare_regions(res, ma, mb, va, vb, rows, prod_a, outputs_a, binaries, storage, atol, rtol, keep, qdq)
    res.rows = sorted(rows.values(), key=lambda r: (r.position, r.tensor))
    res.snr_drops = snr.drops(ma, res.rows)
    if fp16_baseline:
        from .fp16_baseline import judge_against_baseline
        res.baseline = judge_against_baseline(ma, feeds, va, res.rows, kept, atol, rtol)
    first = res.first_failure
    log.info("compare: %d tensors, first failure %s", len(res.rows), first.tensor if first else "none")
    return res


def _row(tensor, producer, b_tensor, b_node, source, region, origin, storage, ref, got, atol, rtol, is_output,
         qdq=None):
    pos, node = producer
    s = error_stats(ref, got, atol, rtol)
    codes = qdq.stats(tensor, got) if qdq is not None else None
    if codes is not None:
        s["pass"], s["reason"] = qdq_codes.judge(codes, s)
    return TensorCompare(tensor, node.name, node.op_type, b_tensor, b_node, source, region, list(origin), storage,
                         list(np.shape(ref)), float(s["max_abs"]), float(s["max_rel"]), float(s["cosine"]),
                         float(s["ref_max_abs"]), bool(s["pass"]), is_output, pos,
                         int(s.get("nan", 0)), int(s.get("inf", 0)), int(s.get("ref_nan", 0)),
                         int(s.get("ref_inf", 0)), str(s.get("reason", "")), snr.snr_db(ref, got), codes)


def _region_output_storage(mb: onnx.ModelProto, binaries: Dict[str, bytes]) -> Dict[str, Storage]:
    """Storage of every region output, from the layout its program declares (a region may hand
    an NHWC tensor to a CPU consumer that wants NHWC). A model output is the original's as it is
    (a region ending in a folded Transpose to NHWC declares NHWC for the logical NHWC tensor)."""
    from ..artifact import load

    out: Dict[str, Storage] = {}
    model_outputs = {o.name for o in mb.graph.output}
    for node in region_nodes(mb):
        meta = load(binaries[node.name], name=node.name).meta
        for spec, t in zip(meta.get("outputs") or [], node.output):
            out[t] = Storage(None if t in model_outputs else LAYOUT_PERMS.get(str(spec.get("layout", ""))))
    return out


def _layer_tensors(layers, meta, node, storage, ma, by_origin, prod_nodes, shapes, b_names=frozenset()
                   ) -> Dict[int, str]:
    """Program tensor id -> logical tensor name of A; fixes the storage of reshape layers.
    ``b_names``: every original node name B knows (quantized models: ``quantized_map``)."""
    logical: Dict[int, str] = {}
    prod_pos = {t: i for i, n in enumerate(ma.graph.node) for t in n.output if t}
    a_users: Dict[str, List[onnx.NodeProto]] = {}
    for n in ma.graph.node:
        for i in set(n.input):
            a_users.setdefault(i, []).append(n)
    for spec, t in zip(meta.get("inputs") or [], node.input):
        logical[int(spec["tensor"])] = storage[t][0] if t in storage else t
    named = {int(spec["tensor"]): storage[t][0] if t in storage else t
             for spec, t in zip(meta.get("outputs") or [], node.output)}
    outputs = LayerOutputs(ma, by_origin, layers, named, shapes)
    stores: Dict[int, Storage] = {}   # tensor id -> its storage, as fixed here
    for layer in layers:
        src = logical.get(layer["inputs"][0]) if layer["inputs"] else None
        in_store = stores.get(layer["inputs"][0]) if layer["inputs"] else None
        if layer["layer_name"] == "layout_transform":
            if src is not None:
                logical[layer["output"]] = src
            continue
        cands = sorted({i for o in layer["origin"] for i in quantized_map.positions(by_origin, o)})
        a_node = ma.graph.node[cands[-1]] if cands and ma.graph.node[cands[-1]].output else None
        held, why = outputs.resolve(a_node, layer) if a_node is not None else (None, "")
        if held is None:
            layer["unmapped"] = why
        else:
            logical[layer["output"]] = quantized_map.layer_tensor(layer["origin"], held, cands[-1],
                                                                  prod_pos, a_users, b_names)
            if src is not None:
                layer["storage"] = layer_storage_in_reference(layer, a_node, src, in_store, prod_nodes)
        layer["storage"] = carry_order(layer, in_store, a_node, prod_nodes) or layer["storage"]
        stores[layer["output"]] = layer["storage"]
    return logical


def _keeper(ma: onnx.ModelProto, va: Mapping[str, np.ndarray]):
    """(keep(tensor, value), kept): keeps our values of A's discontinuous tensors (for flip counts)."""
    from .discontinuous import Discontinuities

    disc, kept = Discontinuities(ma, {k: v.dtype for k, v in va.items()}), {}

    def keep(tensor: str, value: np.ndarray) -> None:
        if disc.sources(tensor, limit=1):
            kept[tensor] = value
    return keep, kept


def _compare_regions(res, ma, mb, va, vb, rows, prod_a, outputs_a, binaries, storage, atol, rtol,
                     keep: Optional[Callable[[str, np.ndarray], None]] = None, qdq=None) -> None:
    by_origin = _origin_index(ma)
    prod_nodes = {t: n for t, (_, n) in prod_a.items()}
    b_names = {o for n in mb.graph.node for o in (explicit_origin(n) or [n.name])}
    for node in region_nodes(mb):
        layers, meta = capture_region(binaries[node.name], {t: vb[t] for t in node.input if t in vb},
                                      name=node.name)
        logical = _layer_tensors(layers, meta, node, storage, ma, by_origin, prod_nodes,
                                 {t: np.shape(v) for t, v in va.items()}, b_names)
        n_cmp = 0
        for layer in whole_layers(layers):
            tensor = logical.get(layer["output"], "")
            key = f"{node.name}/{layer['name']}"
            if layer.get("unmapped"):
                res.unmapped.append({"tensor": key, "node": layer["name"], "reason": layer["unmapped"]})
                continue
            if tensor not in va or tensor not in prod_a:
                continue
            ref = va[tensor]
            got = layer["storage"].to_logical(layer["value"], np.shape(ref))
            if got is None:
                res.unmapped.append({"tensor": key, "node": layer["name"], "reason": (
                    f"stored shape {list(layer['value'].shape)} ({layer['storage'].describe()}) does not map onto "
                    f"{list(np.shape(ref))} of {tensor}" if layer["storage"].known else
                    f"the order it stores {tensor} in is not known (it reads a permuted tensor through "
                    f"layers that regroup its axes: inspection/stored_order.py)")})
                continue
            if keep is not None and tensor not in rows:
                keep(tensor, got)
            row = _row(tensor, prod_a[tensor], key, layer["name"], "simulator", node.name, layer["origin"],
                       layer["storage"].describe(), ref, got, atol, rtol, tensor in outputs_a, qdq)
            prev = rows.get(tensor)
            if prev is not None and prev.source == "onnxruntime":
                prev.region, prev.b_node, prev.origin = node.name, layer["name"], list(layer["origin"])
            else:
                rows[tensor] = row
            n_cmp += 1
        res.regions.append({"region": node.name, "layers": len(layers), "compared": n_cmp})


def _label(x: ModelLike, m: onnx.ModelProto, default: str) -> str:
    return os.fspath(x) if not isinstance(x, onnx.ModelProto) else (m.graph.name or default)
