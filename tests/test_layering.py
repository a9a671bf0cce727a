"""The package's layering, checked on the source (AST): the stages import one way
(legalize -> fuse -> split -> emit), the simulator knows no ONNX, the runtime shim knows no
rewriting stage, and no module imports another module's private names."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "onnx_mrvl"

# importer prefix -> imported prefixes it must not use
FORBIDDEN = {
    "onnx_mrvl.legalize": ("onnx_mrvl.fuse", "onnx_mrvl.split", "onnx_mrvl.emit", "onnx_mrvl.sim",
                           "onnx_mrvl.ep", "onnx_mrvl.inspection", "onnx_mrvl.pipeline", "onnx_mrvl.cli"),
    "onnx_mrvl.fuse": ("onnx_mrvl.split", "onnx_mrvl.emit", "onnx_mrvl.sim", "onnx_mrvl.ep",
                       "onnx_mrvl.inspection", "onnx_mrvl.pipeline", "onnx_mrvl.cli"),
    "onnx_mrvl.split": ("onnx_mrvl.sim", "onnx_mrvl.ep", "onnx_mrvl.inspection", "onnx_mrvl.pipeline",
                        "onnx_mrvl.cli"),
    "onnx_mrvl.emit": ("onnx_mrvl.legalize", "onnx_mrvl.fuse", "onnx_mrvl.split", "onnx_mrvl.sim",
                       "onnx_mrvl.ep", "onnx_mrvl.inspection", "onnx_mrvl.pipeline", "onnx_mrvl.cli"),
    "onnx_mrvl.sim": ("onnx", "onnxruntime", "onnx_graphsurgeon", "onnx_mrvl.legalize", "onnx_mrvl.fuse",
                      "onnx_mrvl.split", "onnx_mrvl.emit", "onnx_mrvl.ep", "onnx_mrvl.inspection",
                      "onnx_mrvl.pipeline", "onnx_mrvl.cli", "onnx_mrvl.opset"),
    "onnx_mrvl.artifact": ("onnx", "onnxruntime", "onnx_mrvl.legalize", "onnx_mrvl.fuse", "onnx_mrvl.split",
                           "onnx_mrvl.emit", "onnx_mrvl.sim", "onnx_mrvl.ep", "onnx_mrvl.inspection",
                           "onnx_mrvl.pipeline", "onnx_mrvl.cli"),
    "onnx_mrvl.ep": ("onnx_mrvl.legalize", "onnx_mrvl.fuse", "onnx_mrvl.split", "onnx_mrvl.emit",
                     "onnx_mrvl.inspection", "onnx_mrvl.pipeline", "onnx_mrvl.cli"),
}


# the seeded model builders and harnesses of the tests, tools and benchmarks: nothing else imports them
TESTING = "onnx_mrvl.testing"


def _module_name(path, root=ROOT):
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return (rel[: -len(".__init__")], True) if rel.endswith(".__init__") else (rel, False)


def _imports(path, root=ROOT):
    """(imported module, imported name or '') for every import statement of the file."""
    mod, is_pkg = _module_name(path, root)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                yield target, a.name


def _sources(root=ROOT):
    for dirpath, _, files in os.walk(os.path.join(root, PKG)):
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


def _under(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def violations(root=ROOT):
    """Every import against the layering, as readable strings."""
    out = []
    for path in _sources(root):
        mod, _ = _module_name(path, root)
        for target, name in _imports(path, root):
            full = f"{target}.{name}" if name else target
            for importer, banned in FORBIDDEN.items():
                if _under(mod, importer):
                    for b in banned:
                        if _under(target, b) or (target == PKG and _under(full, b)):
                            out.append(f"{mod} imports {full} ({importer} must not import {b})")
            if not _under(mod, TESTING) and (_under(target, TESTING) or (target == PKG and _under(full, TESTING))):
                out.append(f"{mod} imports {full} (only tests, tools and benchmarks use {TESTING})")
            if name.startswith("_") and not name.startswith("__") and _under(target, PKG) and target != mod:
                sub = f"{target}.{name}"
                is_module = os.path.exists(os.path.join(root, *sub.split("."))) or \
                    os.path.exists(os.path.join(root, *sub.split(".")) + ".py")
                if not (is_module and target == mod.rsplit(".", 1)[0]):
                    out.append(f"{mod} imports private {target}.{name}")
    return out


def test_layering_holds():
    bad = violations()
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


@pytest.mark.parametrize("importer,line", [
    ("onnx_mrvl/legalize/_probe.py", "from ..fuse import fuse\n"),
    ("onnx_mrvl/split/_probe.py", "from ..sim import perf\n"),
    ("onnx_mrvl/sim/_probe.py", "import onnx\n"),
    ("onnx_mrvl/ep/_probe.py", "from ..legalize import legalize\n"),
    ("onnx_mrvl/fuse/_probe.py", "from .groups import _private_helper\n"),
    ("onnx_mrvl/_probe.py", "from .testing.models import GraphBuilder\n"),
])
def test_an_arrow_against_the_layering_fails(tmp_path, importer, line):
    """The check is real: adding one import against it is found."""
    import shutil
    shutil.copytree(os.path.join(ROOT, PKG), tmp_path / PKG)
    (tmp_path / importer).write_text(line)
    bad = violations(str(tmp_path))
    assert any(importer.replace("/", ".")[:-3] in b for b in bad), bad


def test_stage_entry_points_return_a_stage_result():
    """The one stage contract (onnx_mrvl/stage.py): legalize, fuse, split and emit each return a
    StageResult subclass and leave their arguments (model and decisions) unchanged."""
    import typing

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnx_mrvl.emit import emit
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.split import split
    from onnx_mrvl.stage import StageResult

    for fn in (legalize, fuse, split, emit):
        ret = typing.get_type_hints(fn)["return"]
        assert issubclass(ret, StageResult), (fn.__module__, ret)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], "relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    before = model.SerializeToString()
    legal = legalize(model)
    legal_bytes = legal.model.SerializeToString()
    fused = fuse(legal)
    assert legal.model.SerializeToString() == legal_bytes, "fuse changed its argument"
    fused_bytes = fused.model.SerializeToString()
    decisions = {k: v.to_dict() for k, v in fused.decisions.items()}
    parts = split(fused)
    region_bytes = parts.regions[0].model.SerializeToString()
    emitted = emit(parts.regions[0].model, parts.regions[0].name)
    assert parts.regions[0].model.SerializeToString() == region_bytes, "emit changed its argument"
    for r in (legal, fused, parts, emitted):
        assert isinstance(r, StageResult) and isinstance(r.model, onnx.ModelProto) and isinstance(r.log, list)
    assert model.SerializeToString() == before and fused.model.SerializeToString() == fused_bytes
    assert {k: v.to_dict() for k, v in fused.decisions.items()} == decisions, "split changed fuse's decisions"
    assert parts.decisions["conv"].subgraph == parts.regions[0].name and fused.decisions["conv"].subgraph is None
    assert fused.log and fused.log[0][1] == ["conv", "relu"]
    assert emitted.log and all(e[1] == ["conv", "relu"] for e in emitted.log)   # layout changes borrow them


def test_deprecated_stage_forms_warn_and_still_work():
    """The forms before the stage contract keep working, each with a DeprecationWarning."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnx_mrvl.emit import emit
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import LegalizeReport, legalize, legalize_with_report
    from onnx_mrvl.split import split

    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], "mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.warns(DeprecationWarning, match="legalize_with_report"):
        out, report = legalize_with_report(model)
    assert isinstance(out, onnx.ModelProto) and isinstance(report, LegalizeReport)
    result = legalize(model)
    with pytest.warns(DeprecationWarning, match=r"\.model"):
        nodes = result.graph.node
    assert [n.op_type for n in nodes] == [n.op_type for n in result.model.graph.node]
    parts = split(fuse(result))
    emitted = emit(parts.regions[0].model, parts.regions[0].name)
    with pytest.warns(DeprecationWarning, match="EmitResult"):
        nodes_json, consts_json = emitted
    assert nodes_json is emitted.nodes_json and consts_json is emitted.consts_json
