"""One conversion per output folder: save() builds the folder beside the target and swaps it in whole,
refuses a non-empty folder without overwrite, writes manifest.json; run / report / compile refuse a
folder whose files do not belong together; consts_json=False skips the Constants-JSON; progress."""
import hashlib
import io
import json
import os
import shutil

import numpy as np
import pytest
from onnx_mrvl.testing.models import tiny_cnn

import onnx_mrvl
import onnx_mrvl.save as save_module
from onnx_mrvl.artifact import folder as folder_module
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import ArtifactError, UsageError
from onnx_mrvl.modelio import dump_json


@pytest.fixture(scope="module")
def results():
    """A 2-region and a 1-region conversion of tiny_cnn (and a 1-region one with other weights)."""
    return {"two": onnx_mrvl.convert(tiny_cnn(), exclude=["conv2"]),
            "one": onnx_mrvl.convert(tiny_cnn()),
            "other": onnx_mrvl.convert(tiny_cnn(seed=7))}


def _tree(folder):
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}


def _region_files(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith("mrvl_region_"))


def _err(capsys):
    return capsys.readouterr().err


# ---- save: one conversion per folder --------------------------------------------------------------

def test_resave_needs_overwrite_and_leaves_only_the_new_conversion(results, tmp_path):
    """Regression: a 1-region conversion saved over a 2-region one kept mrvl_region_1.* beside it."""
    out = tmp_path / "out"
    results["two"].save(str(out))
    assert len(_region_files(out)) == 6
    with pytest.raises(UsageError, match="not empty: it holds an earlier onnx_mrvl conversion") as e:
        results["one"].save(str(out))
    assert "--overwrite" in e.value.hint
    assert len(_region_files(out)) == 6                    # refused: untouched
    results["one"].save(str(out), overwrite=True)
    assert _region_files(out) == ["mrvl_region_0-consts.json", "mrvl_region_0-nodes.json", "mrvl_region_0.bin"]
    assert sorted(os.listdir(out)) == sorted(_region_files(out) + ["model.onnx", "report.json", "manifest.json"])
    assert os.listdir(tmp_path) == ["out"]                 # no staging or old folder left beside it
    manifest = json.loads((out / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (out / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert set(manifest["files"]) == set(os.listdir(out)) - {"manifest.json"}
    assert manifest["converter"] == {"name": "onnx_mrvl", "version": onnx_mrvl.__version__}
    assert manifest["model"] == "model.onnx" and manifest["skipped"] == {}


def test_swap_without_renameat2(results, tmp_path, monkeypatch):
    """Where the atomic exchange is unavailable the old folder is renamed aside, then removed."""
    monkeypatch.setattr(folder_module, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    results["two"].save(str(out))
    results["one"].save(str(out), overwrite=True)
    assert len(_region_files(out)) == 3 and os.listdir(tmp_path) == ["out"]


def test_a_folder_with_other_files_is_refused_even_with_overwrite(results, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        results["one"].save(str(out))
    with pytest.raises(UsageError, match="notes.txt") as e:
        results["one"].save(str(out), overwrite=True)
    assert "will not delete" in str(e.value) and e.value.hint
    assert os.listdir(out) == ["notes.txt"]
    results["one"].save(str(tmp_path / "new" / "deeper"))   # a new folder (and its parents) is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    results["one"].save(str(empty))                         # so is an empty one
    assert "model.onnx" in os.listdir(empty)


def test_overwrite_never_replaces_the_folder_holding_the_source_model(tmp_path):
    import onnx
    out = tmp_path / "out"
    out.mkdir()
    onnx.save(tiny_cnn(), str(out / "model.onnx"))           # the user's model, named like ours
    (out / "report.json").write_text(json.dumps({"partition": "max", "nodes": []}))
    r = onnx_mrvl.convert(str(out / "model.onnx"))
    with pytest.raises(UsageError, match="source model"):
        r.save(str(out), overwrite=True)
    assert sorted(os.listdir(out)) == ["model.onnx", "report.json"]


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
@pytest.mark.parametrize("fail_on", ["mrvl_region_0-consts.json", "report.json"])
def test_interrupted_save_leaves_the_previous_folder_intact(results, tmp_path, monkeypatch, exc, fail_on):
    out = tmp_path / "out"
    results["two"].save(str(out))
    before = _tree(out)
    real = save_module.dump_json

    def dying(obj, f):
        is_report = isinstance(obj, dict) and "partition" in obj and "nodes" in obj
        if obj is results["one"].subgraphs[0].consts_json if fail_on != "report.json" else is_report:
            f.write(b'{\n "half": ')                          # in the middle of a file
            raise exc
        return real(obj, f)
    monkeypatch.setattr(save_module, "dump_json", dying)
    with pytest.raises(type(exc)):
        results["one"].save(str(out), overwrite=True)
    assert _tree(out) == before                              # every file, byte for byte
    assert os.listdir(tmp_path) == ["out"]                   # the half-built folder is gone
    monkeypatch.setattr(save_module, "dump_json", real)
    assert main(["run", str(out / "model.onnx")]) == 0


def test_failed_rename_puts_the_previous_folder_back(results, tmp_path, monkeypatch):
    out = tmp_path / "out"
    results["two"].save(str(out))
    before = _tree(out)
    monkeypatch.setattr(folder_module, "_exchange", lambda a, b: False)
    real = os.rename

    def rename(src, dst):
        if ".onnx_mrvl-new-" in os.path.basename(src):
            raise OSError(5, "Input/output error")
        return real(src, dst)
    monkeypatch.setattr(folder_module.os, "rename", rename)
    with pytest.raises(OSError):
        results["one"].save(str(out), overwrite=True)
    assert _tree(out) == before and os.listdir(tmp_path) == ["out"]


# ---- readers: a folder whose files do not belong together ---------------------------------------

@pytest.fixture
def saved(results, tmp_path):
    out = tmp_path / "out"
    results["two"].save(str(out))
    return out


def _mix(out, results, tmp_path, how):
    """Break ``out`` the way a second conversion or a hand edit does; returns the file to be named."""
    if how == "extra_region":          # left from an earlier conversion with more regions
        shutil.copy(out / "mrvl_region_1.bin", out / "mrvl_region_7.bin")
        return "mrvl_region_7.bin"
    if how == "missing":
        os.remove(out / "mrvl_region_1-nodes.json")
        return "mrvl_region_1-nodes.json"
    if how == "binary_replaced":       # another conversion's binary of the same region
        other = tmp_path / "other"
        results["other"].save(str(other))
        shutil.copy(other / "mrvl_region_0.bin", out / "mrvl_region_0.bin")
        return "mrvl_region_0"
    if how == "model_replaced":
        other = tmp_path / "other"
        results["one"].save(str(other))
        shutil.copy(other / "model.onnx", out / "model.onnx")
        return "model.onnx"
    if how == "json_edited":
        p = out / "mrvl_region_0-nodes.json"
        p.write_text(p.read_text().replace("tvmgen", "tvmgeN"))
        return "mrvl_region_0-nodes.json"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["extra_region", "missing", "binary_replaced", "model_replaced"])
def test_run_refuses_a_mixed_folder(saved, results, tmp_path, how, capsys):
    name = _mix(saved, results, tmp_path, how)
    code = main(["run", str(saved / "model.onnx")])
    err = _err(capsys)
    assert code == 3, err
    assert name in err and "Fix:" in err and "please report" not in err
    with pytest.raises((ArtifactError, UsageError)):
        onnx_mrvl.InferenceSession(str(saved / "model.onnx"))


@pytest.mark.parametrize("how", ["extra_region", "missing", "binary_replaced", "model_replaced"])
def test_report_refuses_a_mixed_folder(saved, results, tmp_path, how, capsys):
    name = _mix(saved, results, tmp_path, how)
    code = main(["report", str(saved)])
    err = _err(capsys)
    assert code == 3, err
    assert name in err and "Fix:" in err and "manifest.json" in err


@pytest.mark.parametrize("how", ["extra_region", "json_edited"])
def test_compile_refuses_a_mixed_folder(saved, results, tmp_path, how, capsys):
    name = _mix(saved, results, tmp_path, how)
    code = main(["compile", "--nodes", str(saved / "mrvl_region_0-nodes.json"),
                 "--consts", str(saved / "mrvl_region_0-consts.json"), "-o", str(tmp_path / "x.bin")])
    err = _err(capsys)
    assert code == 3, err
    assert name in err and "Fix:" in err


def test_compile_refuses_the_json_of_two_regions(saved, tmp_path, capsys):
    code = main(["compile", "--nodes", str(saved / "mrvl_region_0-nodes.json"),
                 "--consts", str(saved / "mrvl_region_1-consts.json"), "-o", str(tmp_path / "x.bin")])
    assert code == 3 and "different regions" in _err(capsys)


def test_a_sound_folder_and_files_added_by_the_user_pass(saved, tmp_path, capsys):
    (saved / "inputs.npz").write_bytes(b"not ours, not a region file")
    assert main(["run", str(saved / "model.onnx")]) == 0
    assert main(["report", str(saved), "--json"]) == 0
    assert main(["compile", "--nodes", str(saved / "mrvl_region_0-nodes.json"),
                 "--consts", str(saved / "mrvl_region_0-consts.json"), "-o", str(tmp_path / "x.bin")]) == 0
    assert (tmp_path / "x.bin").read_bytes() == (saved / "mrvl_region_0.bin").read_bytes()


# ---- the command line ------------------------------------------------------------------------------

def test_cli_convert_into_a_non_empty_folder(tmp_path, capsys, monkeypatch):
    import onnx
    src = tmp_path / "m.onnx"
    onnx.save(tiny_cnn(), str(src))
    out = tmp_path / "out"
    assert main(["convert", str(src), "-o", str(out)]) == 0
    capsys.readouterr()
    import onnx_mrvl.pipeline as pipeline

    def no_convert(*a, **k):
        raise AssertionError("the folder is checked before converting")
    with monkeypatch.context() as m:
        m.setattr(pipeline, "convert", no_convert)
        assert main(["convert", str(src), "-o", str(out)]) == 3
    err = _err(capsys)
    assert "not empty" in err and "Fix:" in err and "--overwrite" in err
    assert main(["convert", str(src), "-o", str(out), "--overwrite", "--exclude", "conv2"]) == 0
    assert len(_region_files(out)) == 6
    assert main(["convert", str(src), "-o", str(out), "--overwrite"]) == 0
    assert len(_region_files(out)) == 3
    (out / "keep.txt").write_text("x")
    assert main(["convert", str(src), "-o", str(out), "--overwrite"]) == 3
    assert "keep.txt" in _err(capsys)


# ---- Constants-JSON: opt-out, progress, streaming --------------------------------------------------

def test_no_consts_json(results, tmp_path, capsys):
    out = tmp_path / "out"
    results["two"].save(str(out), consts_json=False)
    assert not [n for n in os.listdir(out) if n.endswith("-consts.json")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["skipped"]) == {"mrvl_region_0-consts.json", "mrvl_region_1-consts.json"}
    assert "binary" in manifest["skipped"]["mrvl_region_0-consts.json"]
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    import onnx
    onnx.save(tiny_cnn(), str(tmp_path / "orig.onnx"))
    assert main(["run", str(out / "model.onnx"), "--inputs", str(tmp_path / "in.npz"),
                 "--compare", str(tmp_path / "orig.onnx")]) == 0     # the binary is the deployable artifact
    assert main(["report", str(out)]) == 0
    capsys.readouterr()
    code = main(["compile", "--nodes", str(out / "mrvl_region_0-nodes.json"),
                 "--consts", str(out / "mrvl_region_0-consts.json"), "-o", str(tmp_path / "x.bin")])
    err = _err(capsys)
    assert code == 3 and "skipped" in err and "--no-consts-json" in err
    # a Constants-JSON the manifest says was skipped is another conversion's
    (out / "mrvl_region_1-consts.json").write_text("{}")
    assert main(["run", str(out / "model.onnx")]) == 3
    assert "mrvl_region_1-consts.json" in _err(capsys)


def test_cli_no_consts_json_and_progress(tmp_path, capsys):
    import onnx
    src = tmp_path / "m.onnx"
    onnx.save(tiny_cnn(), str(src))
    out = tmp_path / "out"
    assert main(["convert", str(src), "-o", str(out), "--no-consts-json", "--exclude", "conv2", "-v"]) == 0
    err = _err(capsys)
    assert "wrote region 1 of 2: mrvl_region_0 (nodes.json" in err and "wrote region 2 of 2" in err
    assert sorted(os.listdir(out)) == ["manifest.json", "model.onnx", "mrvl_region_0-nodes.json",
                                       "mrvl_region_0.bin", "mrvl_region_1-nodes.json", "mrvl_region_1.bin",
                                       "report.json"]


def test_save_progress_per_region(results, tmp_path):
    lines = []
    results["two"].save(str(tmp_path / "out"), progress=lines.append)
    heads = [line.split(":")[0] for line in lines]
    # a region binary is written on a thread of its own (file_writes.py), so region 2 may start before
    # region 1's binary is done: each region is announced before it is reported, both in region order
    assert sorted(heads) == ["writing region 1 of 2", "writing region 2 of 2", "wrote region 1 of 2",
                             "wrote region 2 of 2"]
    for i in (1, 2):
        assert heads.index(f"writing region {i} of 2") < heads.index(f"wrote region {i} of 2")
    assert heads.index("writing region 1 of 2") < heads.index("writing region 2 of 2")
    assert heads.index("wrote region 1 of 2") < heads.index("wrote region 2 of 2")
    wrote = lines[heads.index("wrote region 1 of 2")]
    assert "consts.json" in wrote and "bin" in wrote


def test_json_writer_streams():
    """The Constants-JSON writer never holds the document, nor a bytes copy of one long base64 string,
    in memory: it writes slices of at most STRING_CHUNK characters and chunks of ~1 MiB, and the
    bytes are json.dumps's."""
    import base64
    import tracemalloc

    from onnx_mrvl.modelio import STRING_CHUNK
    rng = np.random.default_rng(0)
    big = base64.b64encode(rng.standard_normal(1 << 22).astype(np.float32).tobytes()).decode()   # 22 M chars
    doc = {"w": {"shape": [1 << 22], "data_base64": big},
           "b": {"shape": [1, 64], "data_base64": base64.b64encode(bytes(256)).decode()}}
    doc.update({f"small{i}": {"shape": [1], "dtype": "float32", "min": "0.5"} for i in range(20000)})
    sizes = []

    class Sink:
        def write(self, b):
            sizes.append(len(b))
            return len(b)
    tracemalloc.start()
    try:
        dump_json(doc, Sink())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert max(sizes) <= max(STRING_CHUNK, (1 << 20) + 4096)
    assert peak < 3 * STRING_CHUNK + (2 << 20) < len(big), peak   # slices, not a copy of the 22 MB string
    sink = io.BytesIO()
    dump_json(doc, sink)
    assert sink.getvalue() == (json.dumps(doc, indent=1) + "\n").encode()
    doc["w"]["data_base64"] = big[:100000] + '"' + "\u00e9"      # escapes needed: json's own encoding
    sink = io.BytesIO()
    dump_json(doc, sink)
    assert sink.getvalue() == (json.dumps(doc, indent=1) + "\n").encode()


# ---- a target that cannot be renamed (a mount point): filled in place ----------------------------

def test_mount_point_target_is_filled_in_place(results, tmp_path, monkeypatch):
    monkeypatch.setattr(folder_module, "_must_stage_inside", lambda real, parent: True)
    out = tmp_path / "out"
    results["two"].save(str(out))
    assert len(_region_files(out)) == 6 and not [n for n in os.listdir(out) if n.startswith(".")]
    before = _tree(out)
    real = save_module.dump_json

    def dying(obj, f):
        if obj is results["one"].subgraphs[0].consts_json:
            raise OSError(28, "No space left on device")
        return real(obj, f)
    monkeypatch.setattr(save_module, "dump_json", dying)
    with pytest.raises(OSError):
        results["one"].save(str(out), overwrite=True)
    assert _tree(out) == before and os.listdir(tmp_path) == ["out"]
    monkeypatch.setattr(save_module, "dump_json", real)
    real_rename = os.rename
    calls = []

    def rename(src, dst):                     # fail while moving the new files up
        calls.append(src)
        if ".onnx_mrvl-new-" in src and len([c for c in calls if ".onnx_mrvl-new-" in c]) == 2:
            raise OSError(5, "Input/output error")
        return real_rename(src, dst)
    with monkeypatch.context() as m:
        m.setattr(folder_module.os, "rename", rename)
        with pytest.raises(OSError):
            results["one"].save(str(out), overwrite=True)
    assert _tree(out) == before
    results["one"].save(str(out), overwrite=True)
    assert _region_files(out) == ["mrvl_region_0-consts.json", "mrvl_region_0-nodes.json", "mrvl_region_0.bin"]
    assert main(["run", str(out / "model.onnx")]) == 0


def test_leftover_of_a_killed_save_is_replaced_with_overwrite(results, tmp_path):
    out = tmp_path / "out"
    (out / ".onnx_mrvl-new-abc").mkdir(parents=True)
    (out / ".onnx_mrvl-new-abc" / "model.onnx").write_bytes(b"half")
    with pytest.raises(UsageError, match="not empty"):
        results["one"].save(str(out))
    results["one"].save(str(out), overwrite=True)
    assert ".onnx_mrvl-new-abc" not in os.listdir(out)


def test_save_into_the_working_directory_keeps_it(results, tmp_path, monkeypatch):
    """Replacing the process's working directory by a rename would leave it in a deleted folder."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    path = results["two"].save(".")
    results["one"].save(".", overwrite=True)
    assert os.path.samefile(os.getcwd(), here) and os.path.isfile(path)
    assert _region_files(".") == ["mrvl_region_0-consts.json", "mrvl_region_0-nodes.json", "mrvl_region_0.bin"]
    assert sorted(os.listdir(tmp_path)) == ["here"]
    assert main(["run", path]) == 0
