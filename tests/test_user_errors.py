"""Mistakes a user new to the tool makes, each answered by our exception family (onnx_mrvl.errors)
naming the file / input / node and what to do, a documented exit code (never 0, never a traceback),
and with ``--json`` a JSON error object on stdout (README "Exit codes")."""
import json
import os
import shutil

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import ModelError, UsageError

from test_cli_errors import EXAMPLE, out  # noqa: F401 - the converted example (fixture), input 'input' [1, 1, 28, 28]


def _cli(argv, capsys):
    """(exit code, stderr, the --json run's error object) of ``argv``, run without and with --json."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert main([*argv, "--json"]) == code
    got = capsys.readouterr()
    assert "Traceback" not in err + got.err
    return code, err, (json.loads(got.out)["error"] if code not in (0, 1) else json.loads(got.out))


@pytest.mark.parametrize("command", ["convert", "diff"])
def test_a_folder_given_for_a_model_file_is_named_as_a_folder(out, command, capsys):
    argv = {"convert": ["convert", str(out / "out"), "-o", str(out / "c")],
            "diff": ["diff", EXAMPLE, str(out / "out")]}[command]
    code, err, error = _cli(argv, capsys)
    assert code == 3 and "folder, not a model file" in err and "OUT_DIR/model.onnx" in err   # was: "does not exist"
    assert error["type"] == "ModelError" and "OUT_DIR/model.onnx" in error["fix"]
    with pytest.raises(ModelError, match="is a folder"):
        onnx_mrvl.convert(str(out / "out"))


def test_run_takes_the_output_folder_and_names_a_folder_without_a_model(out, tmp_path, capsys):
    code, _, doc = _cli(["run", str(out / "out"), "--inputs", str(out / "in.npz")], capsys)
    assert code == 0 and doc["outputs"]                        # as compare and report take it
    (tmp_path / "empty").mkdir()
    code, err, error = _cli(["run", str(tmp_path / "empty")], capsys)
    assert code == 3 and "holding no model.onnx" in err and error["fix"]


def test_compare_inputs_of_the_wrong_dtype_get_our_message(out, tmp_path, capsys):
    """float64 arrays: the message names the input and how to save it (was: onnxruntime's
    INVALID_ARGUMENT and a hint about --input-shape)."""
    np.savez(tmp_path / "in64.npz", input=np.zeros((1, 1, 28, 28)))
    code, err, error = _cli(["compare", EXAMPLE, str(out / "out"), "--inputs", str(tmp_path / "in64.npz")], capsys)
    assert code == 3 and "input 'input'" in err and "float64" in err and "astype(np.float32)" in err
    assert "ONNXRuntimeError" not in err and error["type"] == "UsageError"


def test_sim_outputs_by_default_leave_the_conversion_folder_usable(out, tmp_path, capsys):
    """``sim -m OUT/mrvl_region_0.bin`` without -o wrote OUT/mrvl_region_0-0.bin: a region file the
    manifest does not list, so run / InferenceSession then refused the folder (exit 3)."""
    folder = tmp_path / "o"
    shutil.copytree(out / "out", folder)
    assert main(["sim", "-m", str(folder / "mrvl_region_0.bin"), "--inputs", str(out / "in.npz")]) == 0
    assert (folder / "sim-mrvl_region_0-0.npy").exists() and not (folder / "mrvl_region_0-0.bin").exists()
    capsys.readouterr()
    assert main(["run", str(folder / "model.onnx"), "--inputs", str(out / "in.npz")]) == 0


@pytest.mark.parametrize("argv,words", [
    (["convert", EXAMPLE, "-o", "OUT", "--quantize", "int4"], "invalid choice: 'int4'"),
    (["convert", EXAMPLE], "-o"),
    (["run", "M", "--repeat", "0"], "--repeat"),
])
def test_usage_errors_with_json_print_a_json_error(argv, words, capsys):
    assert main([*argv, "--json"]) == 2
    got = capsys.readouterr()
    error = json.loads(got.out)["error"]
    assert error["exit_code"] == 2 and error["type"] == "usage" and words in error["message"]
    assert "usage:" in got.err and error["command"] == argv[0]


def test_interrupted_convert_leaves_nothing_half_written(out, tmp_path, monkeypatch, capsys):
    """Ctrl-C while the files are written: exit 130 (with --json an error object), no output folder
    (it was left behind empty: the target was made before the work), no parent folder the save made
    and no staging folder beside it; an earlier conversion being replaced (--overwrite) stays whole."""
    import onnx_mrvl.save as save

    def interrupted(model):
        def write(f):
            f.write(b"partial")
            raise KeyboardInterrupt
        return write
    monkeypatch.setattr(save, "_model", interrupted)
    target = tmp_path / "new"
    assert main(["convert", EXAMPLE, "-o", str(target)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    assert main(["convert", EXAMPLE, "-o", str(tmp_path / "a" / "b" / "new")]) == 130
    assert os.listdir(tmp_path) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["convert", EXAMPLE, "-o", str(empty)]) == 130
    assert os.listdir(tmp_path) == ["empty"] and os.listdir(empty) == []
    empty.rmdir()
    old = tmp_path / "old"
    shutil.copytree(out / "out", old)
    before = {p: (old / p).read_bytes() for p in os.listdir(old)}
    assert main(["convert", EXAMPLE, "-o", str(old), "--overwrite", "--json"]) == 130
    assert json.loads(capsys.readouterr().out)["error"]["exit_code"] == 130
    assert {p: (old / p).read_bytes() for p in os.listdir(old)} == before
    assert sorted(os.listdir(tmp_path)) == ["old"]


def test_a_failed_save_leaves_a_new_target_absent(tmp_path, monkeypatch):
    """An exception while the files are written (a full disk): the API's save leaves no folder."""
    import onnx_mrvl.save as save
    result = onnx_mrvl.convert(EXAMPLE)

    def full(model):
        def write(f):
            raise OSError(28, "No space left on device")
        return write
    monkeypatch.setattr(save, "_model", full)
    with pytest.raises(OSError, match="No space"):
        result.save(str(tmp_path / "x" / "out"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("signame,code", [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_a_convert_killed_mid_save_leaves_nothing(out, tmp_path, signame, code):
    """The child process signalled while it writes model.onnx: exit 128 + the signal, the target
    absent (or an earlier conversion untouched) and no staging folder beside it (SIGTERM ended the
    process without cleanup: a '.new.onnx_mrvl-new-*' folder with the written files stayed)."""
    import signal
    import time
    from onnx_mrvl.testing.cli_run import start_cli
    marker = tmp_path / "writing"
    prelude = (f"import time, onnx_mrvl.save as s\n"
               f"def _model(model):\n"
               f"    def write(f):\n"
               f"        f.write(b'partial'); open({str(marker)!r}, 'w').close(); time.sleep(120)\n"
               f"    return write\n"
               f"s._model = _model")
    work = tmp_path / "work"
    work.mkdir()
    old = work / "old"
    shutil.copytree(out / "out", old)
    before = {p: (old / p).read_bytes() for p in os.listdir(old)}
    for argv in (["-o", str(work / "new")], ["-o", str(old), "--overwrite"]):
        child = start_cli("convert", EXAMPLE, *argv, prelude=prelude)
        deadline = time.monotonic() + 300
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), child.communicate()
        marker.unlink()
        child.send_signal(getattr(signal, signame))
        _, err = child.communicate(timeout=120)
        assert child.returncode == code, err
        assert "Traceback" not in err and ("interrupted" in err or f"terminated ({signame})" in err)
        assert sorted(os.listdir(work)) == ["old"]
        assert {p: (old / p).read_bytes() for p in os.listdir(old)} == before


def test_inference_session_run_refuses_feeds_that_do_not_fit(out):
    """float64 for float32, a wrong shape, a misspelt or missing input, an unknown output name: our
    UsageError naming the input and what it takes (was: onnxruntime's InvalidArgument / ValueError)."""
    sess = onnx_mrvl.InferenceSession(str(out / "out" / "model.onnx"))
    x = np.zeros((1, 1, 28, 28), np.float32)
    cases = [({"input": x.astype(np.float64)}, None, "float64, the model takes float32"),
             ({"input": x[..., :14]}, None, r"shape \[1, 1, 28, 14\], the model takes \[1, 1, 28, 28\]"),
             ({"image": x}, None, r"missing \['input'\]; unknown \['image'\]"),
             ({}, None, r"missing \['input'\]"),
             ({"input": x}, ["nope"], r"output name\(s\) \['nope'\]")]
    for feed, names, match in cases:
        with pytest.raises(UsageError, match=match) as info:
            sess.run(names, feed)
        assert info.value.hint
    with pytest.raises(UsageError, match="not a dict"):
        sess.run(None, [x])
    want = sess.run(None, {"input": x})[0]
    np.testing.assert_array_equal(sess.run(None, {"input": x.tolist()})[0], want)   # lists as before
    with pytest.raises(UsageError, match="input 'input'"):
        sess.run(None, {"input": [[1.0, 2.0], [3.0]]})   # a ragged list


def test_inference_session_run_leaves_sequence_inputs_to_onnxruntime():
    """A sequence input takes a list of arrays of different shapes (conformance's SequenceMap cases):
    the feed check leaves it to onnxruntime instead of making one array of it."""
    from onnx import TensorProto, helper
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "seq", [seq],
                          [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = onnx_mrvl.InferenceSession(m)
    got = sess.run(None, {"s": [np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)]})[0]
    assert int(got) == 2


def test_fp16_layers_takes_a_bare_string_as_one_name():
    """``fp16_layers="conv1"`` is one name (as exclude takes it), not the letters c, o, n, ..."""
    x = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    with pytest.raises(UsageError, match="'nope' is no node name"):
        onnx_mrvl.convert(EXAMPLE, quantize="int8", calibration=[{"input": x}], fp16_layers="nope")
    conv = onnx.load(EXAMPLE).graph.node[0]
    assert conv.op_type == "Conv"
    r = onnx_mrvl.convert(EXAMPLE, quantize="int8", calibration=[{"input": x * s} for s in (0.5, 1, 2)],
                          fp16_layers=conv.name)
    assert r.report.quantization["fp16_layers"] == [conv.name]


@pytest.mark.parametrize("command", ["report", "compile"])
def test_an_output_file_that_is_a_folder_is_a_user_error(out, tmp_path, command, capsys):
    """``report --html DIR`` ended in an internal error (exit 4, IsADirectoryError of the rename)."""
    o = out / "out"
    argv = {"report": ["report", str(o), "--html", str(tmp_path)],
            "compile": ["compile", "--nodes", str(o / "mrvl_region_0-nodes.json"),
                        "--consts", str(o / "mrvl_region_0-consts.json"), "-o", str(tmp_path)]}[command]
    code, err, error = _cli(argv, capsys)
    assert code == 3 and "is a folder" in err and "please report" not in err
    assert error["type"] == "UsageError" and error["fix"]


def test_api_mistakes_of_type_are_our_errors():
    """``exclude=[3]`` (an AttributeError inside before) and bytes that are no model given to
    InferenceSession (protobuf's DecodeError before)."""
    with pytest.raises(UsageError, match=r"node names must be strings, got \[3\]"):
        onnx_mrvl.convert(EXAMPLE, exclude=[3])
    with pytest.raises(ModelError, match="not an ONNX model"):
        onnx_mrvl.InferenceSession(b"garbage")


@pytest.mark.parametrize("kwargs,words", [
    ({"exclud": ["conv1"]}, "did you mean 'exclude' for 'exclud'?"),           # was Python's TypeError
    ({"target": "mlip"}, "target must be None, a Target or a dict"),            # was TypeError
    ({"target": {"arch": {"num_tile": 2}}}, "did you mean 'num_tiles' for 'num_tile'?"),   # was TypeError
    ({"target": {"max_batc": 2}}, "did you mean 'max_batch'"),
])
def test_misspelt_options_of_convert_are_usage_errors(kwargs, words):
    with pytest.raises(UsageError) as info:
        onnx_mrvl.convert(EXAMPLE, **kwargs)
    assert words in str(info.value)
    assert onnx_mrvl.convert(EXAMPLE, target={"arch": {"num_tiles": 2}}).subgraphs


def test_inference_session_run_takes_a_numpy_scalar_as_a_python_number(out):
    """``np.float32(1)`` for a [1, 1, 28, 28] input: our UsageError naming the input and its shape (was
    onnxruntime's RuntimeError "Unable to handle object of type <class 'numpy.float32'>")."""
    sess = onnx_mrvl.InferenceSession(str(out / "out" / "model.onnx"))
    with pytest.raises(UsageError, match=r"input 'input' .* has shape \[\], the model takes \[1, 1, 28, 28\]"):
        sess.run(None, {"input": np.float32(1.0)})


def test_dynamic_image_sizes_are_named_in_the_hint_not_guessed():
    """A model of input [N, 3, H, W] without input_shapes: the hint proposes 1 for the batch only and
    names H and W (it proposed [1, 3, 1, 1]: a 1x1 image for a user who copies it)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx_mrvl.errors import ShapeError
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with pytest.raises(ShapeError) as info:
        onnx_mrvl.convert(m)
    assert info.value.node == "x" and "input_shapes={'x': [1, 3, H, W]} with the real sizes of H, W" in info.value.hint
    assert "--input-shape x:1,3,H,W" in info.value.hint


@pytest.mark.parametrize("manifest", [True, False])
@pytest.mark.parametrize("kind", ["deleted", "truncated"])
def test_running_a_folder_whose_binary_was_deleted_or_truncated(out, tmp_path, kind, manifest, capsys):
    """With or without manifest.json: exit 3 naming the region's file and what to do (a deleted file
    is missing, a truncated one fails its sha256), never a run on a partial binary."""
    folder = tmp_path / "o"
    shutil.copytree(out / "out", folder)
    binary = folder / "mrvl_region_0.bin"
    if kind == "deleted":
        binary.unlink()
    else:
        binary.write_bytes(binary.read_bytes()[:1000])
    if not manifest:
        (folder / "manifest.json").unlink()
    code, err, error = _cli(["run", str(folder / "model.onnx"), "--inputs", str(out / "in.npz")], capsys)
    assert code == 3 and "mrvl_region_0" in err and error["fix"] and error["type"] == "ArtifactError"
    from onnx_mrvl.errors import ArtifactError
    with pytest.raises(ArtifactError, match="mrvl_region_0"):
        onnx_mrvl.InferenceSession(str(folder / "model.onnx"))


def test_compare_with_the_conversion_as_reference_says_so(out, capsys):
    """``compare OUT_DIR ORIGINAL`` (the order swapped): named as such (was: "cannot resolve
    'mrvl_region_0.bin' without the model's folder" and a hint about InferenceSession)."""
    code, err, error = _cli(["compare", str(out / "out"), EXAMPLE], capsys)
    assert code == 3 and "is a converted model" in err and "ORIGINAL.onnx OUT_DIR" in error["fix"]


def _conv_model(dims):
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("dims,given,words", [
    (["N", 3, "H", "W"], [1, 4, 16, 16], "input 'x': dimension 1 is 3 in the model (static), --input-shape "
                                         "x:1,4,16,16 (input_shapes) gives 4"),
    ([1, 3, 16, 16], [1, 3, 32, 32], "input 'x': dimension 2 is 16 in the model (static), --input-shape "
                                     "x:1,3,32,32 (input_shapes) gives 32"),
    (["N", 3, "H", "W"], [1, 3, 16], "has rank 3, the model's input has rank 4"),
    (["N", 3, "H", "W"], [1, 3, 0, 16], "every dimension must be a positive integer"),
    (["N", 3, "H", "W"], [1, 3, 16.5, 16], "every dimension must be a positive integer"),
])
def test_input_shapes_must_keep_the_models_static_dimensions(tmp_path, dims, given, words, capsys):
    """A static dimension may only be given its own value (was: accepted, the model converted for the
    given size: a 16x16 model converted as 32x32 without a word); the input and dimension are named."""
    m = _conv_model(dims)
    with pytest.raises(UsageError) as info:
        onnx_mrvl.convert(m, input_shapes={"x": given})
    assert words in str(info.value)
    assert info.value.node == "x" and info.value.hint
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    if all(isinstance(d, int) for d in given):
        spec = "x:" + ",".join(map(str, given))
        for extra in ([], ["--stage", "legalize"]):
            code, err, error = _cli(["convert", path, "-o", str(tmp_path / "o"), "--input-shape", spec, *extra], capsys)
            assert code == 3 and words in err and "Fix:" in err and error["type"] == "UsageError"
            assert error["node"] == "x" and not (tmp_path / "o").exists()
    ok = onnx_mrvl.convert(m, input_shapes={"x": [1, 3, 16, 16]}, embed=True)   # symbolic ones set, static kept
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    import onnxruntime as ort
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onnx_mrvl.InferenceSession(ok.model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_a_scalar_input_takes_an_empty_shape_and_only_that(tmp_path, capsys):
    """A 0-D input (silero_vad's ``sr``): ``[]`` is its full shape (was refused: "every dimension must
    be a positive integer"); ``[1]`` is rank 1 (was accepted: the converted model then took [1], not a
    scalar, unlike the original)."""
    from onnx import TensorProto, helper
    m = _conv_model(["N", 3, "H", "W"])
    m.graph.node.append(helper.make_node("Mul", ["y", "scale"], ["z"], name="mul"))
    m.graph.input.append(helper.make_tensor_value_info("scale", TensorProto.FLOAT, []))
    m.graph.output[0].name = "z"
    with pytest.raises(UsageError, match="has rank 1, the model's input has rank 0") as info:
        onnx_mrvl.convert(m, input_shapes={"x": [1, 3, 8, 8], "scale": [1]})
    assert "0-D (scalar) input takes no dimensions" in info.value.hint
    r = onnx_mrvl.convert(m, input_shapes={"x": [1, 3, 8, 8], "scale": []}, embed=True)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32),
             "scale": np.array(0.5, np.float32)}
    import onnxruntime as ort
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(onnx_mrvl.InferenceSession(r.model).run(None, feeds)[0], want, rtol=1e-2, atol=1e-2)
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    assert main(["convert", path, "-o", str(tmp_path / "o"), "--input-shape", "x:1,3,8,8",
                 "--input-shape", "scale:"]) == 0
    capsys.readouterr()


def test_input_shapes_of_the_wrong_type_or_name_are_usage_errors():
    m = _conv_model(["N", 3, "H", "W"])
    with pytest.raises(UsageError, match="must be a dict"):
        onnx_mrvl.convert(m, input_shapes=[1, 3, 16, 16])
    with pytest.raises(UsageError, match=r"names no input of the model \(inputs: \['x'\]\)"):
        onnx_mrvl.convert(m, input_shapes={"X": [1, 3, 16, 16]})
    with pytest.raises(UsageError, match=r"names an initializer \(a weight of the model, its shape fixed\)"):
        onnx_mrvl.convert(m, input_shapes={"w": [4, 3, 3, 3]})   # was "names no input": it is in graph.initializer
    with pytest.raises(UsageError, match="not a list of dimensions"):
        onnx_mrvl.convert(m, input_shapes={"x": "1,3,16,16"})


@pytest.mark.parametrize("argv", [
    ["run", "OUT", "--seed", "-1"],                       # was exit 4: numpy's "expected non-negative integer"
    ["compare", EXAMPLE, "OUT", "--seed", "-1"],
    ["compare", EXAMPLE, "OUT", "--rtol", "-1"],          # was exit 1: every tensor "failed"
    ["compare", EXAMPLE, "OUT", "--atol", "nan"],
    ["compare", EXAMPLE, "OUT", "--limit", "-1"],
    ["run", "OUT", "--compare", EXAMPLE, "--tolerance", "-1"],
    ["run", "OUT", "--compare", EXAMPLE, "--atol", "inf"],
])
def test_option_values_out_of_range_are_usage_errors(out, argv, capsys):
    argv = [str(out / "out") if a == "OUT" else a for a in argv]
    code, err, error = _cli(argv, capsys)
    assert code == 2 and error["type"] == "usage" and argv[-2] in error["message"]
    assert "internal error" not in err


def test_report_original_without_html_is_refused(out, tmp_path, capsys):
    """``--original`` only draws the HTML page: without --html it was ignored, exit 0, even for a
    file that is no model at all."""
    (tmp_path / "notes.txt").write_text("hello")
    code, err, error = _cli(["report", str(out / "out"), "--original", str(tmp_path / "notes.txt")], capsys)
    assert code == 3 and "no --html was given" in err and "--html OUT.html" in error["fix"]


@pytest.mark.parametrize("command", ["report", "diff", "sim", "convert"])
def test_an_output_path_below_a_file_is_named(out, tmp_path, command, monkeypatch, capsys):
    """An output path whose folder is a file: exit 3 naming it (report / diff --html and sim -o
    ended in an internal error, FileExistsError; convert found it after the whole conversion)."""
    import onnx_mrvl.pipeline as pipeline
    (tmp_path / "f").write_text("x")
    below = str(tmp_path / "f" / "sub" / "x")
    o = out / "out"
    argv = {"report": ["report", str(o), "--html", below + ".html"],
            "diff": ["diff", EXAMPLE, EXAMPLE, "--html", below + ".html"],
            "sim": ["sim", "-m", str(o / "mrvl_region_0.bin"), "--inputs", str(out / "in.npz"), "-o", below],
            "convert": ["convert", EXAMPLE, "-o", below]}[command]
    monkeypatch.setattr(pipeline, "convert", lambda *a, **k: pytest.fail("converted before the path check"))
    code, err, error = _cli(argv, capsys)
    assert code == 3 and str(tmp_path / "f") in err and "file" in err and error["type"] == "ArtifactError"
    assert error["fix"] and sorted(os.listdir(tmp_path)) == ["f"]


def test_api_arguments_of_the_wrong_kind_are_our_errors(out, tmp_path):
    """None / a number as the model or output folder, a folder as InferenceSession's model, a bare
    string as output_names (was: TypeError from os.fspath, "Is a directory", and the letters of the
    name taken as output names), str / None as a feed (was RuntimeError; None aborted the process,
    checked in a child process)."""
    import subprocess
    import sys
    for bad in (None, 3, ""):
        with pytest.raises(UsageError, match="the model is"):
            onnx_mrvl.convert(bad)
        with pytest.raises(UsageError, match="InferenceSession's model is"):
            onnx_mrvl.InferenceSession(bad)
    result = onnx_mrvl.convert(EXAMPLE)
    for bad in (None, 3, ""):
        with pytest.raises(UsageError, match="save\\(\\)'s output folder"):
            result.save(bad)
    with pytest.raises(ModelError, match="is a folder") as info:
        onnx_mrvl.InferenceSession(str(out / "out"))
    assert str(out / "out" / "model.onnx") in info.value.hint
    sess = onnx_mrvl.InferenceSession(str(out / "out" / "model.onnx"))
    x = np.zeros((1, 1, 28, 28), np.float32)
    with pytest.raises(UsageError, match="output_names is the string 'output'") as info:
        sess.run("output", {"input": x})
    assert "['output']" in info.value.hint
    with pytest.raises(UsageError, match="input 'input' .* is str"):
        sess.run(None, {"input": "abc"})
    code = (f"import onnx_mrvl\nfrom onnx_mrvl.errors import UsageError\n"
            f"s = onnx_mrvl.InferenceSession({str(out / 'out' / 'model.onnx')!r})\n"
            f"try:\n    s.run(None, {{'input': None}})\nexcept UsageError as e:\n    print('UsageError', e)\n")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert child.returncode == 0 and "UsageError input 'input'" in child.stdout and "NoneType" in child.stdout, child.stderr


@pytest.mark.parametrize("kw", [{"atol": -1}, {"rtol": float("nan")}, {"atol": "1e-3"}, {"seed": -1}])
def test_compare_models_refuses_tolerances_and_seeds_out_of_range(out, kw):
    """``compare_models(atol=-1)`` failed every tensor (a "difference"), seed=-1 raised numpy's
    ValueError: both are the argument's mistake, named."""
    from onnx_mrvl.inspection.compare import compare_models
    with pytest.raises(UsageError, match=f"{next(iter(kw))}=") as info:
        compare_models(EXAMPLE, str(out / "out" / "model.onnx"), **kw)
    assert info.value.hint


@pytest.mark.parametrize("below", ["", "sub"])
def test_convert_stage_into_a_file_is_named(tmp_path, below, capsys):
    """``convert --stage legalize -o FILE`` (or a folder below a file): exit 3 naming the folder
    (was exit 4: FileExistsError / NotADirectoryError of os.makedirs)."""
    (tmp_path / "f").write_text("x")
    target = str(tmp_path / "f" / below) if below else str(tmp_path / "f")
    code, err, error = _cli(["convert", EXAMPLE, "-o", target, "--stage", "legalize"], capsys)
    assert code == 3 and "-o OUT_DIR: cannot create the folder" in err and error["type"] == "ArtifactError"


def test_convert_into_a_read_only_place_fails_before_converting(tmp_path, monkeypatch, capsys):
    """A new output folder whose nearest existing folder is not writable (a read-only mount; root
    ignores permission bits, so os.access is made to say so): exit 3 naming it, before the
    conversion (was: after it, from the staging folder's mkdtemp)."""
    import onnx_mrvl.artifact.folder as folder
    import onnx_mrvl.pipeline as pipeline
    ro = str(tmp_path / "ro")
    os.mkdir(ro)
    real_access = os.access
    monkeypatch.setattr(folder.os, "access", lambda p, mode: False if p == ro else real_access(p, mode))
    monkeypatch.setattr(pipeline, "convert", lambda *a, **k: pytest.fail("converted before the path check"))
    code, err, error = _cli(["convert", EXAMPLE, "-o", os.path.join(ro, "a", "out")], capsys)
    assert code == 3 and f"'{ro}' is not writable" in err and error["type"] == "ArtifactError"
    assert os.listdir(ro) == []
