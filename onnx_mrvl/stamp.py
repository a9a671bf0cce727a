"""What a conversion records about itself: the source model (path, sha256, its producer), the convert
options, the target and the converter version. ``convert()`` stamps it on the deployable model
(``producer_name`` "onnx_mrvl", ``producer_version``, ``metadata_props`` ``mrvl.converter``,
``mrvl.source``, ``mrvl.options``, ``mrvl.target``, each a JSON string) and on ``report.json``
(``"provenance"``); ``report --original`` checks its model against the recorded digest.

Source digest: the sha256 of the model file's bytes when ``convert`` read a file (or was given bytes;
``"digest": "file"``), else of the ModelProto serialized deterministically (``"canonical"``:
``SerializeToString(deterministic=True)`` with external data loaded). A model is taken as the source
when either digest of it matches.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import os
from typing import Any, Dict, Optional

import onnx

from . import file_weights
from .errors import UsageError
from .modelio import loaded_sha256

CONVERTER = "onnx_mrvl"
KEYS = ("converter", "source", "options", "target")     # metadata_props "mrvl.<key>" = JSON
NOT_OPTIONS = ("model", "target", "progress")


def converter_info() -> Dict[str, str]:
    from . import __version__
    return {"name": CONVERTER, "version": __version__}


def file_sha256(path: str) -> str:
    known = loaded_sha256(path)     # the file convert just read, hashed as it was read
    if known is not None:
        return known
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _canonical(model: onnx.ModelProto) -> Optional[bytes]:
    try:
        return file_weights.serialized(model, deterministic=True)
    except Exception:  # noqa: BLE001 - protobuf raises ValueError / EncodeError past 2 GB
        return None


def canonical_sha256(model: onnx.ModelProto) -> Optional[str]:
    """sha256 of ``model`` serialized deterministically; None when protobuf cannot (over 2 GB)."""
    data = _canonical(model)
    return None if data is None else hashlib.sha256(data).hexdigest()


def source_info(model) -> Dict[str, Any]:
    """The ``source`` record of what was passed to ``convert`` (path, bytes or ModelProto)."""
    if isinstance(model, onnx.ModelProto):
        data = _canonical(model)
        if data is None:
            return {"path": None, "sha256": None, "digest": "unavailable (over 2 GB)", "size": None}
        return {"path": None, "sha256": hashlib.sha256(data).hexdigest(), "digest": "canonical", "size": len(data)}
    if isinstance(model, (bytes, bytearray)):
        return {"path": None, "sha256": hashlib.sha256(model).hexdigest(), "digest": "file", "size": len(model)}
    path = os.path.abspath(os.fspath(model))
    return {"path": path, "sha256": file_sha256(path), "digest": "file", "size": os.path.getsize(path)}


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in (sorted(value, key=str) if isinstance(value, (set, frozenset)) else value)]
    return repr(value)


def target_info(target) -> Dict[str, Any]:
    return {"name": target.name, "arch": dataclasses.asdict(target.arch), "cpu_profile": target.cpu.source}


def stamp(result, source: Dict[str, Any], options: Dict[str, Any], target) -> None:
    """Record the conversion on ``result.model`` and ``result.report.provenance``."""
    model = result.model
    source = dict(source, producer_name=model.producer_name, producer_version=model.producer_version)
    prov = {"converter": converter_info(), "source": source, "options": _jsonable(options),
            "target": target_info(target)}
    result.report.provenance = prov
    model.producer_name, model.producer_version = CONVERTER, prov["converter"]["version"]
    keep = [(p.key, p.value) for p in model.metadata_props if p.key not in {f"mrvl.{k}" for k in KEYS}]
    del model.metadata_props[:]
    for k, v in keep:
        model.metadata_props.add(key=k, value=v)
    for k in KEYS:
        model.metadata_props.add(key=f"mrvl.{k}", value=json.dumps(prov[k], sort_keys=True))


def stamped(convert):
    """Decorate ``convert(model, *, target=None, num_tiles=None, ocm_size=None, ...)`` so that its
    result carries its provenance (every keyword but ``model``, ``target`` and ``progress`` is an option)."""
    signature = inspect.signature(convert)

    @functools.wraps(convert)
    def wrapper(*args, **kwargs):
        from .target import get_target
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:   # a misspelt option: ours to name (close matches), not Python's TypeError
            from .errors import UsageError
            from .options import suggest
            close = suggest([k for k in kwargs if k not in signature.parameters], signature.parameters)
            raise UsageError(f"{convert.__name__}(): {exc}", hint=(close + " " if close else "")
                             + f"see help(onnx_mrvl.{convert.__name__}) for its options") from None
        bound.apply_defaults()
        result = convert(*args, **kwargs)
        a = bound.arguments
        target = get_target(a.get("target"))
        arch = {k: a.get(k) for k in ("num_tiles", "ocm_size") if a.get(k)}
        if arch:
            target = target.with_arch(**arch)
        options = {k: v for k, v in a.items() if k not in NOT_OPTIONS}
        if options.get("calibration") is not None:   # the data itself is no option: where it came from
            options["calibration"] = (getattr(result.report, "quantization", None) or {}).get("calibration")
        stamp(result, source_info(a["model"]), options, target)
        return result
    return wrapper


def read_provenance(model: onnx.ModelProto) -> Dict[str, Any]:
    """The provenance a converted model records in its ``metadata_props`` ({} when none)."""
    out = {}
    for p in model.metadata_props:
        if p.key.startswith("mrvl.") and p.key[5:] in KEYS:
            try:
                out[p.key[5:]] = json.loads(p.value)
            except ValueError:
                pass
    return out


def check_original(provenance: Dict[str, Any], original, where: str) -> None:
    """Raise ``UsageError`` unless ``original`` (a path or ModelProto) is the model the conversion
    ``where`` recorded as its source (by either digest, see the module docstring)."""
    from .modelio import load_model

    source = (provenance or {}).get("source") or {}
    want = source.get("sha256")
    name = f"'{os.fspath(original)}'" if not isinstance(original, onnx.ModelProto) else "the ModelProto"
    if not want:
        raise UsageError(f"{where} records no digest of the model it was converted from (converted by an older "
                         f"onnx_mrvl, or from a model over 2 GB), so --original {name} cannot be checked",
                         hint="re-run onnx-mrvl convert on the original model, or omit --original")
    if not isinstance(original, onnx.ModelProto):
        path = os.fspath(original)
        if os.path.isfile(path) and file_sha256(path) == want:
            return
        original = load_model(path)          # a missing or broken file: its own ModelError
    if canonical_sha256(original) == want:
        return
    was = source.get("path") or "a ModelProto"
    raise UsageError(f"--original {name} is not the model {where} was converted from (that was {was}, "
                     f"sha256 {want[:16]}...)",
                     hint=f"pass the model the folder was converted from ({was})" if source.get("path")
                     else "pass the model the folder was converted from")
