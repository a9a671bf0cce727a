"""Model zoo (onnx_mrvl/testing/zoo.py) on a subset fast enough for CI: every strategy converts, runs and
matches onnxruntime on the original; the full table is ``python -m onnx_mrvl.testing.zoo``."""
import json

import pytest

from onnx_mrvl.testing import zoo

# name -> minimum offload fraction (MACs) under partition=max
SUBSET = {"tiny_cnn": 1.0, "fashion_mnist": 1.0, "zoo/squeezenet": 0.99, "resnet18_like": 0.99}


@pytest.fixture(scope="module")
def rows():
    return zoo.run(list(SUBSET), zoo.STRATEGIES, runner="sim")   # no silent fp32 fallback


def test_every_model_and_strategy_matches_onnxruntime(rows):
    assert [(r.model, r.strategy) for r in rows] == [(m, s) for m in SUBSET for s in zoo.STRATEGIES]
    bad = [f"{r.model}/{r.strategy}: {r.status} {r.error}" for r in rows if r.status != "ok"]
    assert not bad, bad
    tol = zoo.TOLERANCE["sim"]
    for r in rows:
        assert r.max_rel_err <= tol and r.nodes > 0 and r.convert_s > 0


def test_offload_fraction(rows):
    for r in rows:
        if r.strategy == "max":
            assert r.offload_fraction >= SUBSET[r.model], (r.model, r.offload_fraction)
            assert r.regions >= 1
        assert 0.0 <= r.offload_fraction <= 1.0


def test_accelerator_path_is_really_used(rows):
    """With the simulator the fp16 path cannot be bit-exact with fp32 onnxruntime on conv nets."""
    assert all(r.max_abs_err > 0 for r in rows if r.offload_fraction > 0)


def test_markdown_and_json(rows, tmp_path, capsys):
    md = zoo.markdown(rows, "sim")
    assert md.count("\n| ") == len(rows) + 2 and f"{len(rows)} ok, 0 not ok" in md
    out = tmp_path / "zoo.json"
    assert zoo.main(["--only", "tiny_cnn", "--strategies", "max", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["rows"][0]["model"] == "tiny_cnn" and data["rows"][0]["status"] == "ok"


def test_a_failing_conversion_becomes_an_error_row(monkeypatch):
    import onnx_mrvl

    def boom(model, **kw):
        raise RuntimeError("injected")
    monkeypatch.setattr(onnx_mrvl, "convert", boom)
    rows = zoo.run(["tiny_cnn"], ["max"])
    assert rows[0].status == "error" and "RuntimeError: injected" in rows[0].error
