"""The shared graph helpers: the one attribute reader (onnx_mrvl/graph_index.attr) and the one encoding
of provenance lists (provenance.encode_origin / decode_origin)."""
import json

import numpy as np
import onnx
from onnx import helper

from onnx_mrvl.graph_index import attr
from onnx_mrvl.legalize.rules.base import attr as legalize_attr, str_attr
from onnx_mrvl.provenance import decode_origin, encode_origin, get_origin, set_origin


def test_attr_decodes_strings_and_string_lists_only():
    n = helper.make_node("LSTM", ["x"], ["y"], "lstm", direction="bidirectional", hidden_size=4,
                         activations=["Sigmoid", "Tanh"], activation_alpha=[0.5, 1.0],
                         value=onnx.numpy_helper.from_array(np.zeros(2, np.float32)))
    assert attr(n, "direction") == "bidirectional" and isinstance(attr(n, "direction"), str)
    assert attr(n, "activations") == ["Sigmoid", "Tanh"]
    assert attr(n, "hidden_size") == 4
    assert attr(n, "activation_alpha") == [0.5, 1.0]
    assert isinstance(attr(n, "value"), onnx.TensorProto)
    assert attr(n, "missing") is None and attr(n, "missing", b"x") == b"x"   # the default as given
    assert legalize_attr is attr and str_attr is attr   # legalize reads attributes the same way


def test_one_encoding_of_origin_lists():
    names = ["conv 1", "relu/\u00e9", 'a"b']
    text = encode_origin(names)
    assert text == json.dumps(names)                    # the bytes written before the helper existed
    assert decode_origin(text) == names and decode_origin(text.encode()) == names
    assert decode_origin(names) == names and decode_origin("not json") == ["not json"]
    node = set_origin(helper.make_node("Relu", ["x"], ["y"], "r"), names + ["conv 1", ""])
    assert get_origin(node) == names                     # set_origin drops repeats and empty names
    sub = helper.make_node("Subgraph_1x1", ["x"], ["y"], "s", domain="mrvl", origin=encode_origin(names))
    assert decode_origin(sub.attribute[0].s) == names
