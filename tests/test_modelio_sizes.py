"""The initializers' raw_data lengths read from a model's bytes (onnx_mrvl/wire_sizes.py) instead of
copying every weight out of protobuf: they equal what the parsed model says, ``validate_model``
uses them (and still refuses a tensor whose raw_data is too short), and external data still loads."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_mrvl import model_checks, modelio, wire_sizes
from onnx_mrvl.errors import ModelError
from onnx_mrvl.testing.models import resnet18_like, tiny_cnn


def _parsed_sizes(model):
    return [len(t.raw_data) if t.HasField("raw_data") else -1 for t in model.graph.initializer]


def _mixed_model():
    """raw_data, float_data, an empty raw_data, an int64 shape: every kind of initializer."""
    model = tiny_cnn()
    g = model.graph
    g.initializer.append(helper.make_tensor("typed", onnx.TensorProto.FLOAT, [3], [1.0, 2.0, 3.0]))
    empty = numpy_helper.from_array(np.zeros((0,), np.float32), "empty")
    g.initializer.append(empty)
    g.initializer.append(numpy_helper.from_array(np.array([1, -1], np.int64), "shape"))
    return model


@pytest.fixture
def walk_all(monkeypatch):
    monkeypatch.setattr(wire_sizes, "MIN_BYTES", 0)


def test_walked_sizes_are_the_parsed_ones(walk_all):
    for model in (_mixed_model(), resnet18_like(seed=1, input_size=32)):
        data = model.SerializeToString()
        assert wire_sizes.raw_data_sizes(data) == _parsed_sizes(onnx.load_from_string(data))


def test_a_graph_field_given_twice_merges_as_in_parsing(walk_all):
    first = _mixed_model()
    extra = onnx.ModelProto()
    extra.graph.initializer.append(numpy_helper.from_array(np.ones((5, 7), np.float32), "late"))
    data = first.SerializeToString() + extra.SerializeToString()   # protobuf merges the two graphs
    assert wire_sizes.raw_data_sizes(data) == _parsed_sizes(onnx.load_from_string(data))


def test_a_raw_data_field_given_twice_counts_its_last_occurrence(walk_all):
    model = onnx.ModelProto()
    tensor = numpy_helper.from_array(np.ones(4, np.float32), "t").SerializeToString()
    tensor += numpy_helper.from_array(np.ones(9, np.float32), "t").SerializeToString()   # raw_data twice
    graph = b"\x2a" + _varint(len(tensor)) + tensor   # GraphProto.initializer (field 5)
    data = model.SerializeToString() + b"\x3a" + _varint(len(graph)) + graph   # ModelProto.graph (field 7)
    parsed = onnx.load_from_string(data)
    assert wire_sizes.raw_data_sizes(data) == _parsed_sizes(parsed) == [36]


def _varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def test_bytes_it_cannot_follow_give_none(walk_all):
    data = tiny_cnn().SerializeToString()
    assert wire_sizes.raw_data_sizes(data[:-3]) is None     # cut short
    assert wire_sizes.raw_data_sizes(b"\x0b" + data) is None   # a group (wire type 3)


def test_small_models_are_not_walked():
    assert wire_sizes.raw_data_sizes(tiny_cnn().SerializeToString()) is None


def test_read_model_gives_the_sizes_of_a_file_and_of_bytes(tmp_path, walk_all):
    model = _mixed_model()
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    for source in (path, model.SerializeToString()):
        proto, sizes = modelio.read_model(source)
        assert sizes == _parsed_sizes(proto)
    assert modelio.read_model(model)[1] is None   # a ModelProto: asked of the model


def test_external_tensors_get_no_walked_size(tmp_path, walk_all):
    model = tiny_cnn()
    os.makedirs(tmp_path / "in")
    path = str(tmp_path / "in" / "m.onnx")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)   # save_model(save_as_external_data=True) mutates its argument
    onnx.save_model(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=1024)
    proto, sizes = modelio.read_model(path)
    external = [t.name for t in onnx.load(path, load_external_data=False).graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external
    for t, size in zip(proto.graph.initializer, sizes):
        assert size == (None if t.name in external else _parsed_sizes_one(t))
    model_checks.validate_model(proto, sizes)
    assert [numpy_helper.to_array(t).tobytes() for t in proto.graph.initializer] == \
        [numpy_helper.to_array(t).tobytes() for t in model.graph.initializer]


def _parsed_sizes_one(t):
    return len(t.raw_data) if t.HasField("raw_data") else -1


def _short_weight_model():
    """A Conv whose weight's raw_data holds one float less than its dims say (over STRIP_BYTES)."""
    w = np.ones((64, 64, 3, 3), np.float32)
    t = numpy_helper.from_array(w, "w")
    t.raw_data = w.tobytes()[:-4]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64, 8, 8])], [t])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_validate_with_walked_sizes_still_refuses_a_short_raw_data(walk_all):
    data = _short_weight_model().SerializeToString()
    proto, sizes = modelio.read_model(data)
    assert sizes == [64 * 64 * 9 * 4 - 4]
    with pytest.raises(ModelError):
        model_checks.validate_model(proto)
    with pytest.raises(ModelError):
        model_checks.validate_model(proto, sizes)


def test_validate_takes_the_sizes_it_is_given():
    """The sizes are what the check reads (no copy of the weight): told the short tensor is whole,
    the check strips it and the checker sees nothing wrong."""
    proto = _short_weight_model()
    model_checks.validate_model(proto, [64 * 64 * 9 * 4])
    with pytest.raises(ModelError):
        model_checks.validate_model(proto, [None])   # unknown: asked of the model
