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
