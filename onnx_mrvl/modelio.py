"""Reading models safely and writing artifacts atomically (temp name in the same folder, then rename)."""
from __future__ import annotations

import os
import tempfile
from typing import Union

import onnx
from google.protobuf.message import DecodeError

from .errors import ArtifactError, ModelError

MIN_OPSET = 7


def _check_external(model: onnx.ModelProto, base_dir: str) -> None:
    base = os.path.realpath(base_dir)
    for t in _all_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        full = os.path.realpath(os.path.join(base, loc))
        if os.path.isabs(loc) or os.path.commonpath([base, full]) != base:
            raise ModelError(f"initializer '{t.name}' points at external data '{loc}' outside the model's folder",
                             hint="keep external data files beside the model (relative locations only)")
        if not os.path.exists(full):
            raise ModelError(f"external data file '{loc}' of initializer '{t.name}' is missing",
                             hint=f"place it in {base}")


def _all_tensors(model: onnx.ModelProto):
    yield from model.graph.initializer
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def load_model(model: Union[str, os.PathLike, bytes, onnx.ModelProto]) -> onnx.ModelProto:
    """A private copy of ``model`` (path, bytes or ModelProto) with external data loaded."""
    if isinstance(model, onnx.ModelProto):
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise ModelError(f"not an ONNX model ({exc})", hint="pass a .onnx file") from None
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise ModelError(f"model file '{path}' does not exist")
    try:
        proto = onnx.load(path, load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as exc:
        raise ModelError(f"'{path}' is not an ONNX model ({type(exc).__name__}: {exc})",
                         hint="check that the file is a complete .onnx protobuf") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelError(f"'{path}' parsed as an empty model: not an ONNX file?")
    _check_external(proto, os.path.dirname(os.path.abspath(path)))
    try:
        onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(f"cannot read the external data of '{path}' ({exc})") from None
    return proto


def validate_model(model: onnx.ModelProto) -> None:
    """Checker, opset range and unique tensor names, with errors that say what to fix."""
    default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if default:
        from onnx import defs
        newest = defs.onnx_opset_version()
        if default[0] < MIN_OPSET:
            raise ModelError(f"opset {default[0]} is older than the oldest supported ({MIN_OPSET})",
                             hint="re-export the model at opset 7 or newer")
        if default[0] > newest:
            raise ModelError(f"opset {default[0]} is newer than the installed onnx knows ({newest})",
                             hint="upgrade onnx or export at an older opset")
    seen = {}
    for n in model.graph.node:
        for o in n.output:
            if o and o in seen:
                raise ModelError(f"tensor '{o}' is produced by two nodes ('{seen[o]}' and '{n.name}')",
                                 node=n.name, hint="tensor names must be unique (SSA)")
            if o:
                seen[o] = n.name
    big = model.ByteSize() > 2_000_000_000 if hasattr(model, "ByteSize") else False
    try:
        if big:
            return
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid model"
        raise ModelError(f"the model fails the ONNX checker: {first}",
                         hint="fix the exporter output (onnx.checker.check_model explains)") from None


def write_bytes_atomic(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path)) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=folder)
    except OSError as exc:
        raise ArtifactError(f"cannot write into '{folder}' ({exc.strerror})",
                            hint="choose a writable output folder") from None
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
