"""``manifest.json``: what one ``convert`` output folder holds, so readers can tell a folder whose files
do not belong together (files of an earlier conversion beside the new ones, a binary replaced, a file
missing) from a sound one.

The manifest lists every file of the conversion with its size and sha256, the files deliberately not
written (``skipped``, e.g. the Constants-JSON with ``consts_json=False``), the converter version and
the source model's digest. Readers (``run``, ``report``, ``compile``, ``onnx_mrvl.InferenceSession``)
call :func:`check_folder`; a folder without a manifest (written before onnx_mrvl 0.1.0 recorded one,
or a model file alone) is not checked. Knows no ONNX: ``ep/`` may import it.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from typing import Dict, Iterable, List, Optional

from ..errors import ArtifactError

MANIFEST = "manifest.json"
FORMAT = "onnx_mrvl.output-folder"
FORMAT_VERSION = 1
REGION_PREFIX = "mrvl_region_"        # every file of a region starts with its name (split names them)
CHUNK = 1 << 22
REDO = ("re-run onnx-mrvl convert --overwrite into this folder (one conversion per folder); to use files "
        f"you changed on purpose, delete its {MANIFEST} (the folder is then not checked)")


def file_digest(path: str) -> str:
    """sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def build(files: Dict[str, dict], *, model: str, converter: dict, source: dict,
          skipped: Optional[Dict[str, str]] = None) -> dict:
    """The manifest of a folder: ``files`` maps file name -> {"size", "sha256"}; ``skipped`` maps a
    file name a conversion normally writes to why it was not written."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "converter": converter, "model": model,
            "source": source, "files": {k: files[k] for k in sorted(files)}, "skipped": dict(skipped or {})}


def read(folder: str) -> Optional[dict]:
    """The manifest of ``folder``, or None when it has none. A manifest that cannot be read or is not
    ours raises ``ArtifactError``."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"'{path}' cannot be read ({exc})",
                            hint="re-run onnx-mrvl convert --overwrite into this folder") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(files, dict):
        raise ArtifactError(f"'{path}' is not an onnx_mrvl manifest",
                            hint="re-run onnx-mrvl convert --overwrite into this folder")
    if int(data.get("format_version", 0)) > FORMAT_VERSION:
        raise ArtifactError(f"'{path}' has manifest version {data.get('format_version')}, newer than this "
                            f"onnx_mrvl reads ({FORMAT_VERSION})", hint="upgrade onnx_mrvl")
    return data


def is_region_file(name: str) -> bool:
    """A file a conversion writes per region (``mrvl_region_<i>.bin``, ``-nodes.json``, ``-consts.json``)."""
    return name.startswith(REGION_PREFIX) and name.endswith((".bin", "-nodes.json", "-consts.json"))


def check_model_file(folder: str, model: str) -> Optional[dict]:
    """Only the model file ``model`` against ``folder``'s manifest (when it names that model): the
    first check of a reader whose other files are verified by the model itself (region binaries by
    their sha256 attributes); :func:`check_folder` checks the rest afterwards."""
    manifest = read(folder)
    if manifest is not None and manifest.get("model") == model:
        _check_entries(folder, {model: manifest["files"].get(model)}, [model])
    return manifest


def check_folder(folder: str, *, verify: Iterable[str] = (), model: Optional[str] = None) -> Optional[dict]:
    """Check that ``folder`` holds exactly one conversion: every file of its manifest present with its
    size, the files named in ``verify`` (those the caller reads; shell patterns such as ``"*.bin"``)
    also with their sha256, and no region file the manifest does not list. With ``model`` (a file
    name), only a folder whose manifest names that model is checked (another model in the folder is
    not this conversion).
    Returns the manifest, or None when the folder has none. Raises ``ArtifactError`` naming the file."""
    manifest = read(folder)
    if manifest is None or (model is not None and manifest.get("model") != model):
        return manifest
    files: Dict[str, dict] = manifest["files"]
    _check_entries(folder, files, list(verify))
    for name in sorted(os.listdir(folder)):
        if is_region_file(name) and name not in files:
            why = (f"the conversion skipped it ({manifest['skipped'][name]}): this one is another conversion's"
                   if name in (manifest.get("skipped") or {}) else
                   "not listed: left from another conversion, or added later")
            raise ArtifactError(f"'{name}' in '{folder}' does not belong to the conversion its {MANIFEST} "
                                f"describes ({why})", hint=f"remove '{name}' from the folder, or {REDO}")
    return manifest


def _check_entries(folder: str, files: Dict[str, dict], patterns: List[str]) -> None:
    redo = REDO
    for name in sorted(files):
        entry = files[name]
        path = os.path.join(folder, name)
        if os.path.basename(name) != name or name in (".", "..") or not isinstance(entry, dict):
            raise ArtifactError(f"{MANIFEST} of '{folder}' lists '{name}' wrongly (not a file name "
                                f"with its size and sha256)", hint=redo)
        try:
            size = os.path.getsize(path)
        except OSError:
            raise ArtifactError(f"'{name}' is missing from '{folder}' (listed in its {MANIFEST})",
                                hint=redo) from None
        if size != entry.get("size"):
            raise ArtifactError(f"'{name}' in '{folder}' has {size:,} bytes, its {MANIFEST} says "
                                f"{entry.get('size')}: it was replaced or truncated after conversion",
                                hint=redo)
        if any(fnmatch.fnmatchcase(name, p) for p in patterns) and file_digest(path) != entry.get("sha256"):
            raise ArtifactError(f"'{name}' in '{folder}' does not match the sha256 in its {MANIFEST}: "
                                f"it was replaced or changed after conversion", hint=redo)
