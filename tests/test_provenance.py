"""A conversion records where it came from: the source model (path, sha256, its producer), the convert
options, the target and the converter version, in model.onnx (producer + metadata_props), report.json
and manifest.json; ``report --original`` accepts only the model the folder was converted from."""
import hashlib
import json
import os

import onnx
import pytest
from onnx_mrvl.testing.models import tiny_cnn

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import UsageError
from onnx_mrvl.inspection.offload import offload_report
from onnx_mrvl.inspection.report_html import render_report_html
from onnx_mrvl.stamp import read_provenance


def _meta(model):
    return {p.key: p.value for p in model.metadata_props}


@pytest.fixture
def source(tmp_path):
    m = tiny_cnn()
    m.producer_name, m.producer_version = "pytorch", "2.3.0"
    m.metadata_props.add(key="author", value="someone")
    path = tmp_path / "src.onnx"
    onnx.save(m, str(path))
    return str(path)


def test_model_and_report_record_the_source_options_target_and_converter(source, tmp_path):
    r = onnx_mrvl.convert(source, exclude=["conv2"], num_tiles=2, ocm_size=512 * 1024, partition="single")
    out = tmp_path / "out"
    r.save(str(out))
    saved = onnx.load(str(out / "model.onnx"))
    assert (saved.producer_name, saved.producer_version) == ("onnx_mrvl", onnx_mrvl.__version__)
    meta = _meta(saved)
    assert meta["author"] == "someone"                              # the user's metadata stays
    digest = hashlib.sha256(open(source, "rb").read()).hexdigest()
    src = json.loads(meta["mrvl.source"])
    assert src == {"path": os.path.abspath(source), "sha256": digest, "digest": "file",
                   "size": os.path.getsize(source), "producer_name": "pytorch", "producer_version": "2.3.0"}
    opts = json.loads(meta["mrvl.options"])
    assert opts["exclude"] == ["conv2"] and opts["partition"] == "single" and opts["num_tiles"] == 2
    target = json.loads(meta["mrvl.target"])
    assert target["arch"]["num_tiles"] == 2 and target["arch"]["ocm_size"] == 512 * 1024 and target["name"]
    assert json.loads(meta["mrvl.converter"]) == {"name": "onnx_mrvl", "version": onnx_mrvl.__version__}
    report = json.loads((out / "report.json").read_text())
    assert report["provenance"] == read_provenance(saved) == r.report.provenance
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == src and manifest["converter"]["version"] == onnx_mrvl.__version__
    rep = offload_report(str(out))
    assert rep.provenance["source"]["sha256"] == digest
    assert f"converted from {os.path.abspath(source)}" in rep.to_text()
    assert rep.to_dict()["provenance"]["options"]["exclude"] == ["conv2"]


def test_defaults_recorded_and_the_input_proto_untouched():
    m = tiny_cnn()
    before = m.SerializeToString()
    r = onnx_mrvl.convert(m)
    assert m.SerializeToString() == before
    prov = r.report.provenance
    assert prov["source"]["path"] is None and prov["source"]["digest"] == "canonical"
    assert prov["source"]["sha256"] == hashlib.sha256(m.SerializeToString(deterministic=True)).hexdigest()
    assert prov["target"]["arch"]["num_tiles"] == 4 and prov["options"]["num_tiles"] is None
    assert r.model.producer_name == "onnx_mrvl"


def test_cpu_only_fallback_is_stamped_too(monkeypatch):
    import onnx_mrvl.pipeline as pipeline

    def boom(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(pipeline, "_convert", boom)
    with pytest.raises(RuntimeError):              # internal errors raise by default
        onnx_mrvl.convert(tiny_cnn())
    r = onnx_mrvl.convert(tiny_cnn(), fallback=True)
    assert r.subgraphs == [] and r.model.producer_name == "onnx_mrvl"
    assert r.report.provenance["source"]["sha256"]


def test_report_original_must_be_the_source(source, tmp_path, capsys):
    out = tmp_path / "out"
    onnx_mrvl.convert(source).save(str(out))
    html = str(tmp_path / "r.html")
    assert main(["report", str(out), "--html", html, "--original", source]) == 0
    assert os.path.getsize(html) > 0
    capsys.readouterr()
    other = tmp_path / "other.onnx"
    onnx.save(tiny_cnn(seed=1), str(other))                  # same graph, other weights
    os.remove(html)
    code = main(["report", str(out), "--html", html, "--original", str(other)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "is not the model" in err and os.path.abspath(source) in err and "Fix:" in err
    assert not os.path.exists(html)
    assert main(["report", str(out), "--html", html, "--original", str(tmp_path / "missing.onnx")]) == 3


def test_report_original_of_a_proto_conversion_accepts_the_saved_model(tmp_path):
    """Converted from a ModelProto: the canonical digest; the same model saved to a file matches."""
    m = tiny_cnn()
    out = tmp_path / "out"
    onnx_mrvl.convert(m).save(str(out))
    onnx.save(m, str(tmp_path / "orig.onnx"))
    rep = offload_report(str(out))
    assert "<svg" in render_report_html(rep, original=str(tmp_path / "orig.onnx"))
    assert "<svg" in render_report_html(rep, original=m)
    with pytest.raises(UsageError, match="not the model"):
        render_report_html(rep, original=tiny_cnn(seed=2))


def test_report_original_without_a_recorded_digest_is_refused(tmp_path, capsys):
    """A folder from before provenance (no digest in model.onnx or report.json) cannot be checked."""
    m = tiny_cnn()
    out = tmp_path / "out"
    onnx_mrvl.convert(m).save(str(out))
    os.remove(out / "manifest.json")                          # edited on purpose below
    model = onnx.load(str(out / "model.onnx"))
    keep = [(p.key, p.value) for p in model.metadata_props if not p.key.startswith("mrvl.")]
    del model.metadata_props[:]
    for k, v in keep:
        model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(out / "model.onnx"))
    rep = json.loads((out / "report.json").read_text())
    del rep["provenance"]
    (out / "report.json").write_text(json.dumps(rep))
    onnx.save(m, str(tmp_path / "orig.onnx"))
    code = main(["report", str(out), "--html", str(tmp_path / "r.html"), "--original", str(tmp_path / "orig.onnx")])
    err = capsys.readouterr().err
    assert code == 3 and "records no digest" in err and "Fix:" in err
