"""Gemm biases in the 1-D form onnxruntime's ``quantize_static`` takes.

With ``per_channel=True`` its int32-bias check (``_adjust_weight_scale_for_int32_bias``) indexes the
bias by output channel and fails on a 2-D one ("The truth value of an array with more than one
element is ambiguous"): a Gemm whose C is ``[1, N]``, which its own ``quant_pre_process`` writes when
it fuses ``MatMul + Add([1, N])`` (magika's classifier head, tf2onnx's Dense). C becomes ``[N]``, the
same broadcast. (A LayerNormalization with ``[1, D]`` scale / bias fails the same check, but the
quantize step leaves layer norms float: not an int8 op type here.)"""
from __future__ import annotations

import onnx
from onnx import numpy_helper


def _flat(model, inits, node, idx: int) -> None:
    """Input ``idx`` of ``node`` as a 1-D initializer (a new one when others read the old)."""
    name = node.input[idx]
    arr = numpy_helper.to_array(inits[name]).reshape(-1)
    readers = sum(name in n.input for n in model.graph.node)
    if readers == 1:
        inits[name].CopyFrom(numpy_helper.from_array(arr, name))
        return
    new = f"{name}/vector"
    if new not in inits:
        t = numpy_helper.from_array(arr, new)
        model.graph.initializer.append(t)
        inits[new] = model.graph.initializer[-1]
    node.input[idx] = new


def vector_biases(model: onnx.ModelProto) -> int:
    """Rewrites ``model`` in place (see the module docstring); returns how many nodes changed."""
    inits = {t.name: t for t in model.graph.initializer}
    changed = 0
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type == "Gemm" and len(n.input) > 2 and n.input[2] in inits:
            dims = list(inits[n.input[2]].dims)
            if len(dims) == 2 and dims[0] == 1:
                _flat(model, inits, n, 2)
                changed += 1
    return changed
