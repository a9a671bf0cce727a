"""The nine ONNX model-zoo architectures of the onnx wheel, with seeded random weights:
legalized, compared with the original in onnxruntime (outputs and pre-softmax logits), and
checked for the canonical forms the fusion stage relies on."""
import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.shapes import light_model
from onnx_mrvl.legalize.testing import rel_err, run
from onnx_mrvl.testing.randomize_weights import load_zoo, random_inputs, randomize_weights, zoo_model_paths

BIG = {"vgg19", "zfnet512", "bvlc_alexnet"}  # 240-575 MB of random weights each
NAMES = [pytest.param(n, marks=pytest.mark.slow) if n in BIG else n for n in
         sorted(zoo_model_paths())]
GONE = {"BatchNormalization", "Sum", "Flatten", "Dropout", "ConstantOfShape"}


def test_nine_zoo_models_available():
    assert sorted(zoo_model_paths()) == sorted(
        ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"])


def _check_canonical(out):
    consts = {t.name: t for t in out.graph.initializer}
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(out.graph.value_info) + list(out.graph.input)}
    ops = {n.op_type for n in out.graph.node}
    assert not ops & GONE, ops & GONE
    for n in out.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        if n.op_type == "Gemm":
            assert a.get("transB") == 1 and a.get("transA", 0) == 0
            assert a.get("alpha", 1.0) == 1.0 and a.get("beta", 1.0) == 1.0
            assert n.input[1] in consts and len(consts[n.input[1]].dims) == 2
            if len(n.input) > 2:
                assert n.input[2] in consts and list(consts[n.input[2]].dims) == \
                    [consts[n.input[1]].dims[0]]
        if n.op_type == "MatMul" and n.input[1] in consts:
            assert len(consts[n.input[1]].dims) != 2 or len(shapes.get(n.input[0], [])) != 2
        if n.op_type == "Conv":
            assert n.input[1] in consts and {"kernel_shape", "strides", "pads", "dilations"} <= \
                set(a) and "auto_pad" not in a
        if n.op_type == "Reshape":
            assert n.input[1] in consts


def _structure_check(out):
    if sum(len(t.raw_data) for t in out.graph.initializer) < 200 << 20:
        onnx.checker.check_model(out, full_check=True)
    else:  # same graph, weights declared instead of serialized (the checker copies the model)
        inputs = [i for i in out.graph.input]
        light = light_model(out, out.graph.node, {t.name: t for t in out.graph.initializer},
                            inputs, list(out.graph.output))
        light.graph.value_info.extend(out.graph.value_info)
        del light.graph.output[:]
        light.graph.output.extend(out.graph.output)
        light.ir_version = out.ir_version
        onnx.checker.check_model(light, full_check=True)
    names = [n.name for n in out.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert 4 <= out.ir_version <= 10
    assert all(d.dim_value > 0 for vi in out.graph.value_info
               for d in vi.type.tensor_type.shape.dim)


@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_legalizes_exactly(name):
    model = load_zoo(name, seed=0)
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if softmax:
        model.graph.output.append(helper.make_empty_tensor_value_info(softmax[-1].input[0]))
    res = legalize(model)
    out, report = res.model, res.report
    _structure_check(out)
    _check_canonical(out)
    assert report.opset == (9, 13)
    feeds = random_inputs(model, seed=0)
    ref, got = run(model, feeds), run(out, feeds)
    assert len(ref) == len(got) == (2 if softmax else 1)
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        assert rel_err(a, b) <= 1e-4, (name, rel_err(a, b))
    logits = ref[-1]
    assert np.std(logits) > 1e-3  # random weights: the classes differ


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1", "resnet50"])
def test_shipped_constant_weights_fold(name):
    # the shipped files build their weights with ConstantOfShape: those must end as initializers
    model = onnx.load(zoo_model_paths()[name])
    res = legalize(model)
    out, report = res.model, res.report
    _check_canonical(out)
    assert "fold_constants" in report.by_rule() or not any(
        n.op_type == "ConstantOfShape" for n in model.graph.node)
    feeds = random_inputs(model, seed=1)
    a, b = run(model, feeds)[0], run(out, feeds)[0]
    assert rel_err(a, b) <= 1e-4


def test_randomize_weights_changes_every_float_weight():
    model = onnx.load(zoo_model_paths()["squeezenet"])
    r1, r2 = randomize_weights(model, 0), randomize_weights(model, 0)
    assert r1.SerializeToString() == r2.SerializeToString()  # seeded
    assert not any(n.op_type == "ConstantOfShape" for n in r1.graph.node)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in r1.graph.initializer}
    floats = [v for v in inits.values() if v.dtype == np.float32]
    assert floats and all(v.size < 2 or np.std(v) > 0 for v in floats)
    assert randomize_weights(model, 1).SerializeToString() != r1.SerializeToString()
    onnx.checker.check_model(r1)


def test_randomize_cli(tmp_path):
    from onnx_mrvl.testing.randomize_weights import main
    dst = tmp_path / "sq.onnx"
    assert main(["squeezenet", "-o", str(dst), "--seed", "5"]) == 0
    model = onnx.load(str(dst))
    assert model.SerializeToString() == randomize_weights(
        onnx.load(zoo_model_paths()["squeezenet"]), 5).SerializeToString()
    feeds = random_inputs(model, 0)
    assert list(feeds) == ["data_0"] and feeds["data_0"].shape == (1, 3, 224, 224)


@pytest.mark.parametrize("name", ["inception_v1", "shufflenet"])
def test_zoo_model_strict_target(name):
    # a target that splits every kernel > 3, calibrates exclude-pad average pools
    from onnx_mrvl.target import Target
    model = load_zoo(name, seed=2)
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"][-1]
    model.graph.output.append(helper.make_empty_tensor_value_info(softmax.input[0]))
    res = legalize(model, Target(max_kernel=3, avgpool_exclude_pad=False))
    out, report = res.model, res.report
    _structure_check(out)
    _check_canonical(out)
    applied = report.by_rule()
    assert "avgpool_calibrate" in applied
    assert ("conv_kernel_split" in applied) == (name == "inception_v1")
    assert ("conv_group_split" in applied) == (name == "shufflenet")
    feeds = random_inputs(model, seed=3)
    for a, b in zip(run(model, feeds), run(out, feeds)):
        assert rel_err(a, b) <= 1e-4
