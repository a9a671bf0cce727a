"""Memory of ``convert`` (issue #20): no stage keeps its own copy of the weights (stage snapshots are
rebuilt on read when the source can be read again, the Constants-JSON text is made from its array when
read or saved), measured as the peak resident memory of a child process; and what the memory work
changed is invisible: rebuilt snapshots and lazy texts equal what was kept before."""
import binascii
import copy
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl import json_stream
from onnx_mrvl.graph_index import extend_copies
from onnx_mrvl.emit.const_entry import ConstEntry
from onnx_mrvl.errors import MrvlError
from onnx_mrvl.stage_snapshots import StageSnapshots
from onnx_mrvl.testing.big_weights import big_fc_model
from onnx_mrvl.testing.models import resnet18_like

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import os, sys, tempfile
    sys.path.insert(0, {root!r})
    import onnx_mrvl.pipeline, onnx_mrvl.legalize, onnx_mrvl.fuse, onnx_mrvl.split, onnx_mrvl.emit
    import onnx_mrvl.save, onnx_mrvl.artifact, onnx.checker, onnx.shape_inference

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key + ":"))

    rss0 = status("VmRSS")
    result = onnx_mrvl.pipeline.convert({path!r})
    with tempfile.TemporaryDirectory() as tmp:
        result.save(os.path.join(tmp, "out"))
    print(status("VmHWM") - rss0)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc for VmHWM")
def test_peak_memory_of_convert_and_save_stays_under_3_5x_the_weights(tmp_path):
    """The peak resident memory convert + save adds stays under 3.5x the model file (~150 MB of
    weights): 8.1x before issue #20's memory work; every stage that copied the weights again would
    add about 1x."""
    path = str(tmp_path / "big.onnx")
    onnx.save(big_fc_model(fc_width=2048), path)
    size = os.path.getsize(path)
    assert size > 100e6
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, path=path)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    added = int(out.stdout.strip().splitlines()[-1])
    assert added / size < 3.5, f"convert + save added {added / 1e6:.0f} MB for a {size / 1e6:.0f} MB model"


def _serialized(stages):
    return {k: m.SerializeToString() for k, m in stages.items()}


def test_stage_snapshots_of_a_file_are_rebuilt_on_read_and_equal_kept_ones(tmp_path):
    """A model read from a file: the legalize and fuse snapshots are not held after convert and are
    rebuilt on first read, equal to the snapshots kept when the same model is passed as a ModelProto."""
    model = resnet18_like(seed=3, input_size=64)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    lazy = onnx_mrvl.convert(path)
    kept = onnx_mrvl.convert(model)
    assert isinstance(lazy.stages, StageSnapshots) and list(lazy.stages) == ["legalize", "fuse"]
    assert not lazy.stages.is_kept("legalize") and not lazy.stages.is_kept("fuse")
    assert kept.stages.is_kept("legalize") and kept.stages.is_kept("fuse")
    assert _serialized(lazy.stages) == _serialized(kept.stages)
    assert lazy.stages.is_kept("fuse") and lazy.stages["fuse"] is lazy.stages["fuse"]
    assert lazy.model.SerializeToString() != b"" and lazy.subgraphs[0].binary == kept.subgraphs[0].binary


def test_stages_written_by_save_are_those_of_a_kept_conversion(tmp_path):
    model = resnet18_like(seed=4, input_size=64)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    onnx_mrvl.convert(path).save(str(tmp_path / "a"), stages=True)
    onnx_mrvl.convert(model).save(str(tmp_path / "b"), stages=True)
    for name in ("stage-legalize.onnx", "stage-fuse.onnx"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_changed_source_file_cannot_rebuild_stages(tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(resnet18_like(seed=5, input_size=64), path)
    result = onnx_mrvl.convert(path)
    onnx.save(resnet18_like(seed=6, input_size=64), path)
    with pytest.raises(MrvlError, match="changed or went away"):
        result.stages["legalize"]


def test_stage_snapshots_read_like_a_dict():
    built = []

    def rebuild():
        built.append(1)
        return {"legalize": onnx.ModelProto(producer_name="L"), "fuse": onnx.ModelProto(producer_name="F")}
    s = StageSnapshots(rebuild=rebuild, lazy=("legalize", "fuse")).with_first("quantize", onnx.ModelProto())
    assert list(s) == ["quantize", "legalize", "fuse"] and len(s) == 3 and "fuse" in s and "x" not in s
    assert not built and s["quantize"] is not None and not built
    assert s["fuse"].producer_name == "F" and s["legalize"].producer_name == "L" and built == [1]
    del s["quantize"]
    s["extra"] = onnx.ModelProto()
    assert list(s) == ["legalize", "fuse", "extra"]
    with pytest.raises(KeyError):
        s["missing"]


def _entry(arr):
    return ConstEntry({"shape": list(arr.shape), "dtype": "float32", "min": "0", "max": "1",
                       "data_base64": ""}).attach_lazy(arr)


def test_lazy_constants_text_is_the_text_everywhere():
    rng = np.random.default_rng(0)
    arr = rng.standard_normal((7, 3 << 18)).astype(np.float32)   # several CHUNKs
    arr.flags.writeable = False
    text = binascii.b2a_base64(arr.tobytes(), newline=False).decode("ascii")
    plain = {"shape": [7, 3 << 18], "dtype": "float32", "min": "0", "max": "1", "data_base64": text}
    consts = {"c0": _entry(arr), "c1": _entry(arr[:0])}
    want = {"c0": plain, "c1": dict(plain, shape=[0, 3 << 18], data_base64="")}
    f = io.BytesIO()
    json_stream.dump_json(consts, f)
    assert f.getvalue() == (json.dumps(want, indent=1) + "\n").encode()
    assert consts["c0"].known_bytes() is not None and dict.get(consts["c0"], "data_base64") is not text
    assert json.dumps(consts, indent=1) == json.dumps(want, indent=1) and json.dumps(consts) == json.dumps(want)
    for e, w in ((_entry(arr), plain),):
        assert dict(e) == w and {**e} == w and e.copy() == w and e == w and copy.deepcopy(e) == w
        assert pickle.loads(pickle.dumps(e)) == w and list(e.values())[-1] == text
    e = _entry(arr)
    assert e["data_base64"] == text and e.get("data_base64") == text
    assert e.known_bytes() is not None          # the text made from the array: still its bytes
    e.detach()
    assert e.known_bytes() is None and e["data_base64"] == text
    e = _entry(arr)
    e["data_base64"] = "AAAA"                     # an edited entry is decoded from its text
    assert e.known_bytes() is None
    e = _entry(arr)
    e.detach()                                    # never read: keeps its array (it is the data)
    assert e.known_bytes() is not None and e["data_base64"] == text


def test_convert_keeps_constants_as_arrays_until_saved(tmp_path):
    result = onnx_mrvl.convert(resnet18_like(seed=1, input_size=64))
    entries = [e for sg in result.subgraphs for e in sg.consts_json.values()]
    assert entries and all(type(dict.get(e, "data_base64")).__name__ == "Base64Text" for e in entries)
    result.save(str(tmp_path / "out"))
    assert all(type(dict.get(e, "data_base64")).__name__ == "Base64Text" for e in entries)   # save made no text


def test_extend_copies_is_extend():
    model = resnet18_like(seed=2, input_size=32)
    a, b = onnx.GraphProto(), onnx.GraphProto()
    a.initializer.extend(model.graph.initializer)
    extend_copies(b.initializer, model.graph.initializer)
    assert a.SerializeToString() == b.SerializeToString()


RETRY = {"exclude": ["layer4_0_downsample_conv", "layer4_1_conv1", "layer4_1_conv2"]}   # a second fuse pass


@pytest.mark.parametrize("name,options", [("resnet18_like", {}), ("resnet18_like", RETRY),
                                          ("resnet18_like", {"partition": "cost"}), ("yolo_like", {}),
                                          ("detection_like", {}), ("mobilenetv2_like", {})])
def test_giving_up_weights_changes_no_artifact(tmp_path, monkeypatch, name, options):
    """With every model above the size at which convert gives up the source's and legal's weights
    (RELEASE_BYTES = 0; a retry then legalizes again), a conversion from a file writes the region
    files, decisions and stage snapshots of a conversion that keeps everything (a ModelProto)."""
    from onnx_mrvl import pipeline
    from onnx_mrvl.testing.models import all_models
    model = all_models()[name](seed=0)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    kept = onnx_mrvl.convert(model, **options)
    monkeypatch.setattr(pipeline, "RELEASE_BYTES", 0)
    passes = []
    real_legalize = pipeline.legalize
    monkeypatch.setattr(pipeline, "legalize", lambda *a, **k: passes.append(1) or real_legalize(*a, **k))
    lazy = onnx_mrvl.convert(path, **options)
    assert len(passes) == (2 if "exclude" in options else 1)   # legalized again for the retry
    assert [sg.name for sg in lazy.subgraphs] == [sg.name for sg in kept.subgraphs]
    for a, b in zip(lazy.subgraphs, kept.subgraphs):
        assert a.binary == b.binary and a.nodes_json == b.nodes_json and a.consts_json == b.consts_json
    assert lazy.report.to_dict()["nodes"] == kept.report.to_dict()["nodes"]
    assert _serialized(lazy.stages) == _serialized(kept.stages)
    lazy.save(str(tmp_path / "a"))
    kept.save(str(tmp_path / "b"))
    for f in os.listdir(tmp_path / "b"):
        if f.endswith((".bin", ".json")) and f not in ("report.json", "manifest.json"):
            assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
