"""legalize(consume=True) builds its result in a new protobuf model when most of the given model's
weights die (legalize/fresh_arena.py) or are float16 (converted to float32: legalize/fp16.py): the
result is the one legalize gives on a copy, the given model's memory is freed (measured in a child
process), and a model whose weights survive is legalized in place as before."""
import os
import subprocess
import sys
import textwrap

import onnx
import pytest

from onnx_mrvl.legalize import fp16, fresh_arena, legalize
from onnx_mrvl.testing.big_weights import big_conv_bn_model, big_fc_model
from onnx_mrvl.testing.models import resnet18_like, tiny_cnn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spy(monkeypatch):
    calls = []
    real = fresh_arena.rebuilt
    monkeypatch.setattr(fresh_arena, "rebuilt", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("build", [lambda: resnet18_like(seed=3, input_size=32),
                                   lambda: big_conv_bn_model(layers=3, channels=128)])
def test_a_consumed_model_with_folded_weights_is_rebuilt_and_legalizes_the_same(monkeypatch, build):
    calls = _spy(monkeypatch)
    kept = legalize(build())
    assert not calls   # not consumed: never rebuilt
    given = build()
    consumed = legalize(given, consume=True)
    del given
    assert calls == [1]
    assert consumed.model.SerializeToString() == kept.model.SerializeToString()
    assert consumed.report.applied == kept.report.applied


def test_a_consumed_model_whose_weights_survive_is_legalized_in_place(monkeypatch):
    calls = _spy(monkeypatch)
    given = big_fc_model(fc_width=256)   # one small BN fold; the FC kernels stay
    expected = legalize(given).model.SerializeToString()
    consumed = legalize(given, consume=True)
    assert not calls
    assert consumed.model is given
    assert consumed.model.SerializeToString() == expected


def test_dead_bytes_below_the_minimum_keep_the_model(monkeypatch):
    calls = _spy(monkeypatch)
    legalize(tiny_cnn(), consume=True)
    assert not calls


CHILD = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, {root!r})
    import onnx
    from onnx_mrvl.legalize import legalize
    libc = ctypes.CDLL("libc.so.6")

    def live():   # resident memory once malloc gave back what is free
        libc.malloc_trim(0)
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    given = onnx.load({path!r})
    before = live()
    result = legalize(given, consume=True)
    del given
    print(before, live())
""")


@pytest.mark.parametrize("bn", [False, True])
def test_a_consumed_float16_model_is_converted_into_a_new_model(monkeypatch, bn):
    calls = []
    real = fp16._converted_into_new
    monkeypatch.setattr(fp16, "_converted_into_new", lambda m: calls.append(1) or real(m))
    build = lambda: big_conv_bn_model(layers=4, channels=128, bn=bn, half=True)   # noqa: E731
    kept = legalize(build())
    assert not calls
    consumed = legalize(build(), consume=True)
    assert calls == [1]
    assert consumed.model.SerializeToString() == kept.model.SerializeToString()
    assert not any(t.data_type == onnx.TensorProto.FLOAT16 for t in consumed.model.graph.initializer)


def _legalize_memory(tmp_path, model):
    """(the saved model's file size, the resident memory a child process's legalize(consume=True)
    of it added), measured by CHILD."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, path=path)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = map(int, out.stdout.split())
    return os.path.getsize(path), after - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim and /proc")
def test_the_float16_weights_of_a_consumed_model_are_freed(tmp_path):
    """A float16 model legalized in float32 holds its weights once, in float32 (2x the file), not the
    float16 bytes beside them as well (3x)."""
    size, added = _legalize_memory(tmp_path, big_conv_bn_model(layers=24, channels=256, bn=False, half=True))
    assert added < 1.7 * size, f"legalize added {added / 1e6:.0f} MB to a {size / 1e6:.0f} MB model"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim and /proc")
def test_the_given_models_memory_is_freed(tmp_path):
    """Legalizing a model whose every Conv folds a BatchNormalization adds about nothing once the
    given model is freed; before fresh_arena, its dead weights stayed (+1x the weights)."""
    size, added = _legalize_memory(tmp_path, big_conv_bn_model(layers=24, channels=256))
    assert added < 0.25 * size, f"legalize kept {added / 1e6:.0f} MB of a {size / 1e6:.0f} MB model"
