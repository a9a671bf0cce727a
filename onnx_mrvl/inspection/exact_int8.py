"""A dynamic-int8 reference whose integer sums onnxruntime computes exactly on every x86 CPU.

onnxruntime runs uint8 activations x int8 weights (``MatMulInteger``, com.microsoft
``DynamicQuantizeMatMul`` / ``MatMulIntegerToFloat`` / ``DynamicQuantizeLSTM``) on MLAS's U8S8
kernels, which on x86 without VNNI / AMX (AVX2) add two adjacent products into an int16 with
saturation (``sim/mlas_u8s8.py``): with weight codes beyond 7 bits (``quantize_dynamic`` without
``reduce_range``) and activation codes far from 0 its int32 sums, and everything after them, are
not the model's. ``w + 128`` as uint8 with zero point ``z + 128`` is the same product (``(w + 128)
- (z + 128) = w - z``), which onnxruntime runs on its U8U8 kernels (16-bit operands, exact int32
sums). (Its ``ConvInteger`` sums exactly with int8 weights too: measured with onnxruntime 1.32 on 1x1
to 5x5 kernels, 3 to 64 channels; not re-coded.) ``onnx-mrvl compare --exact-int8`` takes that copy as
the reference (docs/quantize.md "Dynamic int8 models": how to tell onnxruntime's saturation from the
conversion's error)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

from ..legalize.rules.qtensor import MS, domain

# (domain, op type) -> (weight input, weight zero point input) pairs
WEIGHTS: Dict[Tuple[str, str], Tuple[Tuple[int, int], ...]] = {
    ("", "MatMulInteger"): ((1, 3),),
    (MS, "DynamicQuantizeMatMul"): ((1, 3),), (MS, "MatMulIntegerToFloat"): ((1, 5),),
    (MS, "DynamicQuantizeLSTM"): ((1, 9), (2, 11))}
SEVEN_BITS = 64   # |w| <= 64 (reduce_range): a pair stays within 2 * 255 * 64 < 32767


def _graphs(g: onnx.GraphProto):
    yield g
    for n in g.node:
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                yield from _graphs(sub)


def _int8_weights(g: onnx.GraphProto):
    """(node, weight input index, zero point input index) of every integer op with an int8 constant weight."""
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        for wi, zi in WEIGHTS.get((domain(n), n.op_type), ()):
            w = n.input[wi] if len(n.input) > wi else ""
            if w in inits and inits[w].data_type == onnx.TensorProto.INT8:
                yield n, wi, zi


def saturable(model: onnx.ModelProto) -> List[str]:
    """Names of the integer ops whose int8 weight codes go beyond 7 bits (|w| > 64): those onnxruntime's
    U8S8 kernels can saturate on a CPU without VNNI (``mlas_u8s8.saturates()``)."""
    out = []
    for g in _graphs(model.graph):
        inits = {t.name: t for t in g.initializer}
        for n, wi, _ in _int8_weights(g):
            w = numpy_helper.to_array(inits[n.input[wi]]).astype(np.int16)
            name = n.name or n.output[0]
            if np.abs(w).max() > SEVEN_BITS and name not in out:
                out.append(name)
    return out


def saturation_note(model: onnx.ModelProto) -> Optional[str]:
    """What ``compare`` / ``run --compare`` print on stderr when onnxruntime's U8S8 kernels can
    saturate this reference on this CPU (``mlas_u8s8.saturates()``), else None."""
    from ..sim import mlas_u8s8

    ops = saturable(model) if mlas_u8s8.saturates() else []
    if not ops:
        return None
    return (f"note: onnxruntime runs {len(ops)} integer op(s) of the reference with int8 weights beyond 7 bits "
            f"({', '.join(ops[:3])}{', ...' if len(ops) > 3 else ''}) on its U8S8 kernels, which saturate pairs "
            f"of products on this CPU (no VNNI); `onnx-mrvl compare --exact-int8` compares with the model's exact "
            f"integer sums")


def u8_recoded(model: onnx.ModelProto) -> Tuple[onnx.ModelProto, int]:
    """A copy whose int8 weights of onnxruntime's integer ops are uint8 ``w + 128`` with zero point
    ``z + 128`` (new initializers, the nodes rewired; an absent zero point becomes 128), and how many
    weights were re-coded. Op types, names and every other tensor are unchanged."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    count, replaced = 0, set()
    for g in _graphs(m.graph):
        inits = {t.name: t for t in g.initializer}
        made: Dict[str, str] = {}
        for n, wi, zi in list(_int8_weights(g)):
            w, z = n.input[wi], (n.input[zi] if len(n.input) > zi else "")
            if z and z not in inits:
                continue   # a zero point computed at run time: left as it is
            zp = numpy_helper.to_array(inits[z]) if z else np.zeros((), np.int8)
            key = f"{w}|{z}"
            if key not in made:
                wq = numpy_helper.to_array(inits[w]).astype(np.int16) + 128
                zq = zp.astype(np.int16) + 128
                names = [f"{w}_u8", f"{z or w + '_zero_point'}_u8"]
                g.initializer.extend([numpy_helper.from_array(wq.astype(np.uint8), names[0]),
                                      numpy_helper.from_array(zq.astype(np.uint8), names[1])])
                made[key] = names
                count += 1
            while len(n.input) <= zi:
                n.input.append("")
            replaced.update((id(g), x) for x in (w, z) if x)
            n.input[wi], n.input[zi] = made[key]
    used = {i for g in _graphs(m.graph) for n in g.node for i in n.input} | {o.name for o in m.graph.output}
    for g in _graphs(m.graph):   # the int8 originals no node reads any more
        keep = [t for t in g.initializer if (id(g), t.name) not in replaced or t.name in used]
        del g.initializer[:]
        g.initializer.extend(keep)
    return m, count
