"""Recurrent layers with per-row lengths from a graph input (seeded weights, onnx.helper only).

``lens_model(cell, direction=...)``: ``x [T, B, I]``, ``lens [B]`` (int64, as PyTorch passes them)
-> ``Cast(int32)`` -> LSTM / GRU / RNN ``sequence_lens`` -> Y -> Transpose / Reshape [T, B, D*H] ->
MatMul (``head``), optionally also Y_h / Y_c as outputs.

``sorted_export=True``: PyTorch's TorchScript export of ``pack_padded_sequence(x, lens,
enforce_sorted=False) -> LSTM -> pad_packed_sequence`` (tools/survey_audio_models.py lstm_seqlens):
``TopK`` of the lengths (descending: values and the sorting permutation), ``Gather`` of x's batch
rows by it, the LSTM on the sorted lengths, and the rows put back by a ``Gather`` with the inverse
permutation (``ScatterElements(zeros, perm, arange)``) after the head's Transpose / Reshape, and
with ``state_outputs`` Y_h / Y_c put back the same way (``h_n.index_select(1, unsorted_indices)``).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .recurrent_models import recurrent_node


def lens_model(cell: str = "LSTM", *, direction: str = "bidirectional", steps: int = 10, batch: int = 3,
               feat: int = 8, hid: int = 12, seed: int = 0, sorted_export: bool = False, state_outputs: bool = False,
               initial: bool = False, no_lens: bool = False) -> onnx.ModelProto:
    """``no_lens``: the same layer without ``sequence_lens`` (the lengths input unread)."""
    rng = np.random.default_rng(seed)
    inits, nodes = {}, []
    dirs = 2 if direction == "bidirectional" else 1
    x, lens = "x", "lens32"
    nodes.append(helper.make_node("Cast", ["lens"], ["lens32"], name="cast_lens", to=TensorProto.INT32))
    if sorted_export:
        inits["k"] = np.array([batch], np.int64)
        nodes += [helper.make_node("TopK", ["lens", "k"], ["sorted", "perm"], name="sort", axis=-1, largest=1),
                  helper.make_node("Gather", ["x", "perm"], ["x_sorted"], name="gather_x", axis=1),
                  helper.make_node("Cast", ["sorted"], ["sorted32"], name="cast_sorted", to=TensorProto.INT32)]
        inits["zeros"] = np.zeros(batch, np.int64)
        inits["arange"] = np.arange(batch, dtype=np.int64)
        nodes.append(helper.make_node("ScatterElements", ["zeros", "perm", "arange"], ["inverse"], name="unsort", axis=0))
        x, lens = "x_sorted", "sorted32"
    outs = ["y", "y_h", "y_c"][:3 if cell == "LSTM" else 2] if state_outputs else ["y"]
    rnn_outs = [o + "_sorted" if sorted_export and o != "y" else o for o in outs]
    node = recurrent_node(rng, cell, "rnn", x, inits, feat=feat, hid=hid, batch=batch, direction=direction,
                          initial=initial, outputs=rnn_outs)
    while len(node.input) < 5:
        node.input.append("")
    node.input[4] = "" if no_lens else lens
    while node.input and not node.input[-1]:
        node.input.pop()
    nodes.append(node)
    inits["shape"] = np.array([steps, batch, dirs * hid], np.int64)
    inits["fc"] = rng.uniform(-0.3, 0.3, (dirs * hid, 6)).astype(np.float32)
    nodes += [helper.make_node("Transpose", ["y"], ["y_t"], name="dirs_last", perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["y_t", "shape"], ["y_flat"], name="concat_dirs")]
    flat = "y_flat"
    if sorted_export:
        nodes.append(helper.make_node("Gather", ["y_flat", "inverse"], ["y_unsorted"], name="gather_back", axis=1))
        flat = "y_unsorted"
        for o in outs[1:]:   # h_n.index_select(1, unsorted_indices)
            nodes.append(helper.make_node("Gather", [o + "_sorted", "inverse"], [o], name=f"{o}_back", axis=1))
    nodes.append(helper.make_node("MatMul", [flat, "fc"], ["out"], name="fc"))
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [steps, batch, 6])]
    outputs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, [dirs, batch, hid]) for o in outs[1:]]
    graph = helper.make_graph(nodes, "lens_model",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, feat]),
                               helper.make_tensor_value_info("lens", TensorProto.INT64, [batch])],
                              outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def lens_feeds(model: onnx.ModelProto, lens, seed: int = 1) -> dict:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    return {"x": x, "lens": np.asarray(lens, np.int64)}
