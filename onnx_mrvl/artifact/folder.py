"""One conversion per output folder: the folder is built beside its target and swapped in whole.

``write_folder(target, files, manifest=...)`` writes every file into a new folder in the target's
parent (hashing each as it is written), adds ``manifest.json``, then puts the new folder in the
target's place: into an empty or new target by a rename; over a non-empty one (only with
``overwrite=True``, and only when everything in it is something onnx_mrvl writes) by an atomic
exchange (Linux ``renameat2``), or by renaming the old folder aside first and back on failure. The
old folder is removed only once the new one is in place, so an interrupted save leaves the previous
folder as it was (a new target absent, with the parent folders the save created) and no half-written
target. A target that cannot be renamed (a mount point, e.g. a
container's volume, or one whose parent is read-only) is staged inside itself instead and its
entries are exchanged file by file (old ones moved aside, new ones moved up, moved back on failure).
"""
from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import uuid
from typing import BinaryIO, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import ArtifactError, UsageError
from .file_writes import Writer, write_files
from .manifest import MANIFEST, is_region_file, read

log = logging.getLogger(__name__)
OUR_NAMES = {"model.onnx", "report.json", MANIFEST, "legalize.onnx", "fuse.onnx"}   # + region and stage files
_STAGE = re.compile(r"^stage-[A-Za-z0-9_]+\.onnx$")
LEFTOVER = ".onnx_mrvl-"        # staging / old folders of a save (left only when the process was killed)
OVERWRITE_HINT = ("pass --overwrite (Python: save(..., overwrite=True)) to replace it with this conversion, "
                  "or choose a new or empty folder")


def _is_ours(folder: str, names: Sequence[str]) -> Tuple[bool, List[str]]:
    """(the folder holds an earlier onnx_mrvl conversion, the entries onnx_mrvl did not write)."""
    try:
        manifest = read(folder)
    except ArtifactError:
        manifest = None
    listed = set()
    if manifest is not None:
        listed = set(manifest["files"]) | set(manifest.get("skipped") or {})
        earlier = True
    else:   # written before manifests: report.json of ours beside model.onnx
        earlier = _our_report(os.path.join(folder, "report.json"))
    foreign = []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(LEFTOVER):
            continue
        plain = os.path.isfile(path) or os.path.islink(path)
        ours = plain and earlier and (name in listed or name in OUR_NAMES or is_region_file(name)
                                      or bool(_STAGE.match(name)) or name.startswith(".tmp-"))
        if not ours:
            foreign.append(name + ("/" if os.path.isdir(path) and not os.path.islink(path) else ""))
    return earlier, foreign


def _our_report(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "nodes" in data and "partition" in data


def _check_target(target: str, shown: str, overwrite: bool, protect: Iterable[str]) -> bool:
    """Refuse a target we must not replace; returns whether it is non-empty."""
    names = sorted(os.listdir(target))
    if not names:
        return False
    earlier, foreign = _is_ours(target, names)
    listed = ", ".join(names[:6]) + (f", ... ({len(names)} entries)" if len(names) > 6 else "")
    if not overwrite:
        what = "an earlier onnx_mrvl conversion" if earlier and not foreign else "files"
        raise UsageError(f"output folder '{shown}' is not empty: it holds {what} ({listed})", hint=OVERWRITE_HINT)
    if foreign:
        more = f", ... ({len(foreign)} entries)" if len(foreign) > 6 else ""
        raise UsageError(f"output folder '{shown}' holds files onnx_mrvl did not write "
                         f"({', '.join(foreign[:6])}{more}); "
                         f"--overwrite replaces the whole folder and will not delete them",
                         hint="move them out of the folder, or choose a new or empty output folder")
    for p in protect:
        if p and os.path.commonpath([target, os.path.realpath(p)]) == target:
            raise UsageError(f"the source model '{p}' is inside the output folder '{shown}', which --overwrite "
                             f"would replace", hint="choose another output folder")
    return True


def check_target(target: str, *, overwrite: bool = False, protect: Iterable[str] = ()) -> bool:
    """What ``write_folder`` checks first, for callers that want to fail before the work: a target
    that is a file (``ArtifactError``), or non-empty without ``overwrite``, or holding files onnx_mrvl
    did not write, or containing a ``protect`` path (``UsageError``). Creates nothing; returns
    whether the target exists and is non-empty."""
    shown = os.fspath(target)
    real = os.path.realpath(shown)
    if not os.path.lexists(real):
        _check_creatable(real, shown)
        return False
    if not os.path.isdir(real):
        raise ArtifactError(f"the output folder '{shown}' is a file",
                            hint="choose a folder path that is not a file and is writable")
    return _check_target(real, shown, overwrite, protect)


def _check_creatable(real: str, shown: str) -> None:
    """A new target's nearest existing folder must be a writable folder (a file in the way, or a
    read-only place, shows before the work rather than after the conversion)."""
    above = os.path.dirname(real)
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    why = ("'%s' is a file" % above if not os.path.isdir(above) else
           "'%s' is not writable" % above if not os.access(above, os.W_OK | os.X_OK) else None)
    if why:
        raise ArtifactError(f"cannot create the output folder '{shown}': {why}",
                            hint="choose a folder path that is not below a file and is writable")


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _swap_in(staging: str, target: str, nonempty: bool) -> None:
    if not nonempty:
        try:
            os.replace(staging, target)          # POSIX: a directory replaces an empty one
        except OSError:
            os.rmdir(target)
            os.rename(staging, target)
        return
    if _exchange(staging, target):
        old = staging                            # now holds the previous folder
    else:
        old = os.path.join(os.path.dirname(target),
                           f".{os.path.basename(target)}{LEFTOVER}old-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
        try:
            os.rename(staging, target)
        except BaseException:
            os.rename(old, target)
            raise
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(old):
        log.warning("could not remove the previous output folder, moved aside to '%s'", old)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_folder(target: str, files: Sequence[Tuple[str, Writer]], *, manifest: Callable[[Dict[str, dict]], dict],
                 overwrite: bool = False, protect: Iterable[str] = (),
                 on_file: Optional[Callable[[str, int, float], None]] = None) -> None:
    """Write ``files`` ((name, write(binary_file)) in order) and the manifest built by ``manifest(files
    -> {"size", "sha256"})`` as the folder ``target``. A non-empty target is refused (``UsageError``)
    unless ``overwrite`` and everything in it is an earlier conversion's; a target whose folder
    contains a path of ``protect`` (the source model) is never replaced. ``on_file(name, bytes, s)``
    is called after each file. A writer with a ``sha256`` attribute (hex) declares the digest of
    what it writes: the manifest takes it instead of hashing the file's bytes."""
    from ..modelio import dump_json, write_atomic

    shown = os.fspath(target)
    real = os.path.realpath(shown)
    nonempty = check_target(shown, overwrite=overwrite, protect=protect)
    exists = os.path.lexists(real)
    parent = os.path.dirname(real)
    made = _make_parents(parent, shown)        # path mistakes (a file in the way) show before the work
    inside = exists and _must_stage_inside(real, parent)
    try:
        try:
            staging = tempfile.mkdtemp(prefix=LEFTOVER + "new-" if inside else f".{os.path.basename(real)}{LEFTOVER}new-",
                                       dir=real if inside else parent)
        except OSError as exc:
            where = f"cannot create the output folder '{shown}'" if not exists else \
                f"cannot create a folder beside '{shown}' in '{parent}'"
            raise ArtifactError(f"{where} ({exc.strerror})",
                                hint="choose an output folder whose parent folder is writable") from None
        try:
            os.chmod(staging, 0o777 & ~_umask())
            digests = write_files(staging, files, _create, on_file)
            write_atomic(os.path.join(staging, MANIFEST), lambda f: dump_json(manifest(digests), f))
            if inside:
                _swap_contents(staging, real)
            else:
                _swap_in(staging, real, nonempty)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    except BaseException:
        for path in reversed(made):            # parents this save created: absent stays absent
            try:
                os.rmdir(path)
            except OSError:
                break
        raise
    _fsync_dir(real if inside else parent)


def _make_parents(parent: str, shown: str) -> List[str]:
    """Create the missing folders of ``parent``; returns them, outermost first (removed again when
    the save fails). A file in the way is an ``ArtifactError``."""
    missing: List[str] = []
    path = parent
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    missing.reverse()
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        for made in reversed(missing):
            try:
                os.rmdir(made)
            except OSError:
                pass
        raise ArtifactError(f"cannot create the output folder '{shown}' ({exc.strerror})",
                            hint="choose a folder path that is not a file and is writable") from None
    return missing


def _create(path: str) -> BinaryIO:
    """A new file in the staging folder (mode 0666 less the umask: what ``write_atomic`` gives)."""
    try:
        return open(path, "xb")
    except OSError as exc:
        raise ArtifactError(f"cannot write '{os.path.basename(path)}' into '{os.path.dirname(path)}' "
                            f"({exc.strerror})", hint="choose a writable output folder") from None


def _must_stage_inside(real: str, parent: str) -> bool:
    """A mount point (a container's volume) cannot be renamed, nor can anything be renamed onto it
    from its parent's file system; a parent we cannot write to takes no staging folder either; and
    the working directory (or a folder above it) must stay the same directory for this process."""
    try:
        return (os.path.ismount(real) or os.stat(real).st_dev != os.stat(parent).st_dev
                or not os.access(parent, os.W_OK | os.X_OK)
                or os.path.commonpath([real, os.path.realpath(os.getcwd())]) == real)
    except (OSError, ValueError):
        return True


def _swap_contents(staging: str, target: str) -> None:
    """The fallback of a target that cannot be renamed: its entries are moved aside into a folder
    inside it, the new files moved up, then the old ones removed (moved back on failure)."""
    old = tempfile.mkdtemp(prefix=LEFTOVER + "old-", dir=target)
    keep = {os.path.basename(staging), os.path.basename(old)}
    moved_old: List[str] = []
    moved_new: List[str] = []
    try:
        for name in sorted(os.listdir(target)):
            if name not in keep:
                os.rename(os.path.join(target, name), os.path.join(old, name))
                moved_old.append(name)
        for name in sorted(os.listdir(staging)):
            os.rename(os.path.join(staging, name), os.path.join(target, name))
            moved_new.append(name)
    except BaseException:
        for name in moved_new:
            os.rename(os.path.join(target, name), os.path.join(staging, name))
        for name in moved_old:
            os.rename(os.path.join(old, name), os.path.join(target, name))
        os.rmdir(old)
        raise
    os.rmdir(staging)
    shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
