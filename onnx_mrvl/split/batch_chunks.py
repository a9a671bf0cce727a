"""Regions whose batch exceeds ``target.max_batch`` run as hardware batches.

A region of batch B > max_batch is compiled once for the chunk batch ``c = ceil(B / k)`` with
``k = ceil(B / max_batch)`` (the compile step's ``batch`` option, which refuses a reshape that mixes
the batch axis with others), and its ``Subgraph`` node becomes: per input a ``Pad`` of the batch axis
to ``k * c`` (only when c does not divide B) and a ``Split`` into k chunks, k ``Subgraph`` calls of the
same binary (one region, one artifact), per output a ``Concat`` of the chunks (and a ``Slice`` back to
B after padding). Batch 10 -> 2 calls of 5, batch 17 -> 3 calls of 6 (one zero sample padded).

Every Mrvl layer is per sample along axis 0 (fuse refuses reshapes across the batch axis, concats on
it and broadcasts along it), so the chunks compute exactly what one call on the whole batch would.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..provenance import set_origin


def largest_batch(model: onnx.ModelProto) -> int:
    """The largest leading dimension of a 4-D / 5-D graph input of ``model`` (1 when none);
    tensors inside may be 4-D views whose leading axis is no batch (block rotations), and outputs
    may lead with time steps (a recurrent layer's Y [T, D, B, H])."""
    g = model.graph
    best = 1
    inits = {t.name for t in g.initializer}
    for vi in (i for i in g.input if i.name not in inits):
        t = vi.type.tensor_type
        dims = t.shape.dim if t.HasField("shape") else []
        if len(dims) in (4, 5) and dims[0].HasField("dim_value"):
            best = max(best, int(dims[0].dim_value))
    return best


def plan(batch: int, max_batch: int) -> Tuple[int, int]:
    """(number of hardware batches k, chunk batch c) with k * c >= batch, c <= max_batch."""
    k = math.ceil(batch / max_batch)
    return k, math.ceil(batch / k)


def _dims(vi: onnx.ValueInfoProto) -> Optional[List[int]]:
    t = vi.type.tensor_type
    if not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
        return None
    return [int(d.dim_value) for d in t.shape.dim]


def region_batch(region_model: onnx.ModelProto) -> int:
    """The image batch of a region: the largest leading dimension of its 4-D / 5-D inputs (the
    leading axes of 2-D / 3-D tensors hold FC rows, which have no batch limit)."""
    return largest_batch(region_model)


def check(region_model: onnx.ModelProto, batch: int) -> Optional[str]:
    """Why the region cannot run in hardware batches (None when it can): every input and output
    must lead with the batch, every tensor inside with a multiple of it (an FC over rows)."""
    g = region_model.graph
    for vi in list(g.input) + list(g.output):
        dims = _dims(vi)
        if not dims or dims[0] != batch:
            return (f"batch {batch} exceeds max_batch and region tensor '{vi.name}' {dims} does not lead "
                    f"with the batch (the region cannot run in hardware batches)")
    for vi in g.value_info:
        dims = _dims(vi)
        if not dims or dims[0] % batch:
            return (f"batch {batch} exceeds max_batch and tensor '{vi.name}' {dims} inside the region mixes "
                    f"the batch axis (the region cannot run in hardware batches)")
    return None


def chunk_node(model: onnx.ModelProto, node: onnx.NodeProto, region_model: onnx.ModelProto, batch: int,
               k: int, c: int, origin: List[str]) -> List[onnx.NodeProto]:
    """Replace the Subgraph ``node`` of ``model`` by k calls on batch chunks of c (see the module
    docstring). Returns the new nodes; the binary attributes are copied from ``node``."""
    g = model.graph
    taken = {i.name for i in g.initializer} | {o for n in g.node for o in n.output} | {i.name for i in g.input}

    def fresh(base: str) -> str:
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        return name

    def const(base: str, arr) -> str:
        name = fresh(base)
        g.initializer.append(numpy_helper.from_array(np.asarray(arr, np.int64), name))
        return name

    ranks = {vi.name: len(_dims(vi) or []) for vi in region_model.graph.input}
    base, padded = node.name, k * c
    new: List[onnx.NodeProto] = []
    split = const(f"{base}_chunks", [c] * k)
    ins: List[List[str]] = []
    for t in node.input:
        src = t
        if padded > batch:
            rank = ranks[t]
            pads = [0] * (2 * rank)
            pads[rank] = padded - batch
            src = fresh(f"{t}__batch_padded")
            new.append(helper.make_node("Pad", [t, const(f"{base}_batch_pads", pads)], [src],
                                        name=fresh(f"{base}/pad_{t}")))
        parts = [fresh(f"{t}__chunk{i}") for i in range(k)]
        new.append(helper.make_node("Split", [src, split], parts, name=fresh(f"{base}/split_{t}"), axis=0))
        ins.append(parts)
    outs = [[fresh(f"{o}__chunk{i}") for i in range(k)] for o in node.output]
    for i in range(k):
        call = onnx.NodeProto()
        call.CopyFrom(node)
        call.name = f"{base}__chunk{i}"
        del call.input[:], call.output[:]
        call.input.extend(parts[i] for parts in ins)
        call.output.extend(parts[i] for parts in outs)
        new.append(call)
    for o, parts in zip(node.output, outs):
        if padded > batch:
            full = fresh(f"{o}__batch_padded")
            new.append(helper.make_node("Concat", parts, [full], name=fresh(f"{base}/concat_{o}"), axis=0))
            new.append(helper.make_node("Slice", [full, const(f"{base}_zero", [0]), const(f"{base}_batch", [batch]),
                                                  const(f"{base}_axis0", [0])], [o], name=fresh(f"{base}/slice_{o}")))
        else:
            new.append(helper.make_node("Concat", parts, [o], name=fresh(f"{base}/concat_{o}"), axis=0))
    for n in new:
        if n.domain != node.domain:
            set_origin(n, origin)
    pos = list(g.node).index(node)
    del g.node[pos]
    for j, n in enumerate(new):
        g.node.insert(pos + j, n)
    return new

