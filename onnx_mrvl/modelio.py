"""Reading models safely and writing artifacts atomically (temp name in the same folder, then rename)."""
from __future__ import annotations

import hashlib
import logging
import mmap
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor, wait
from typing import BinaryIO, Callable, List, Optional, Tuple, Union

import onnx
from onnx import serialization
from google.protobuf.message import DecodeError

from . import file_weights
from .errors import ArtifactError, ModelError, UsageError
from .wire_sizes import raw_data_sizes

log = logging.getLogger(__name__)
MMAP_MIN = 1 << 26   # bytes: smaller model files are read (a map costs more than it saves)


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


class _HashedFile:
    """The model file as onnx.load reads it (``name``, ``read()``): read whole, its sha256 taken on
    a second thread while onnx parses the bytes (hashlib releases the GIL), so the source digest
    of the conversion (stamp.py) needs no second read of the file."""

    def __init__(self, path: str, hold: bool = False):
        self.name, self.stat, self.future, self.sizes = path, None, None, None
        self.hold, self.pending = hold, None   # file_weights.py: large weights parsed apart
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx_mrvl-sha256")

    def read(self) -> bytes:
        with open(self.name, "rb") as f:
            self.stat = os.fstat(f.fileno())
            data = f.read()
        self.future = self.pool.submit(lambda: hashlib.sha256(data).hexdigest())
        self.sizes = raw_data_sizes(data)   # (while the hash runs)
        return data

    def load(self) -> onnx.ModelProto:
        """The parsed model: a large protobuf file is parsed from a read-only map of the file (the
        parser copies it once, where ``read()`` + parse copied it twice: VGG-19 0.60 -> 0.28 CPU s,
        the same peak), hashed from the map on the second thread meanwhile, and checked unchanged
        once both are done (``ModelError`` otherwise); other files through ``onnx.load``. With
        ``hold``, the large float weights are read once into ``bytes`` of their own and the rest
        parsed (``file_weights.parse``: ``pending`` for ``file_weights.hold``)."""
        ext = os.path.splitext(self.name)[1]
        if (serialization.registry.get_format_from_file_extension(ext) or "protobuf") != "protobuf":
            return onnx.load(self, load_external_data=False)
        with open(self.name, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size < (min(MMAP_MIN, file_weights.MIN_FILE) if self.hold else MMAP_MIN):
                return onnx.load(self, load_external_data=False)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.stat = st
            view = memoryview(mapped)
            try:
                proto = self._parse(view, f.fileno())
            finally:
                wait([self.future] if self.future is not None else [])
                view.release()
                try:
                    mapped.close()
                except BufferError:   # a slice of it lives on (protobuf's pure-Python decoder's
                    pass              # traceback): the map is unmapped when that is collected
        try:
            same = _identity(os.stat(self.name)) == _identity(st)
        except OSError:
            same = False
        if not same:
            raise ModelError(f"the model file '{self.name}' changed while it was read",
                             hint="convert it again once nothing writes to it")
        return proto

    def _parse(self, view: memoryview, fd: int) -> onnx.ModelProto:
        """``load``'s parse of the mapped file ``view`` (``fd``: the file), its hash started."""
        self.future = self.pool.submit(lambda: hashlib.sha256(view).hexdigest())
        held = file_weights.parse(view, lambda start, n: os.pread(fd, n, start)) if self.hold else None
        if held is not None:
            proto, self.sizes, self.pending = held
            return proto
        self.sizes = raw_data_sizes(view)
        proto = onnx.ModelProto()
        decoded = proto.ParseFromString(view)
        if decoded is not None and decoded != len(view):
            raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {len(view)}")
        return proto

    def close(self) -> Optional[str]:
        """Wait for the hash; the digest, or None when the file was not read whole."""
        self.pool.shutdown(wait=True)
        if self.future is None or self.future.exception() is not None:
            return None
        return self.future.result()


_LAST_READ: Optional[Tuple[str, tuple, str]] = None   # (absolute path, file identity, sha256) of the last load


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def loaded_sha256(path: str) -> Optional[str]:
    """The sha256 of the model file ``path`` as ``load_model`` last read it, while the file is
    unchanged since (same device, inode, size and times); else None."""
    last = _LAST_READ
    if last is None or last[0] != os.path.abspath(path):
        return None
    try:
        return last[2] if _identity(os.stat(path)) == last[1] else None
    except OSError:
        return None


def load_model(model: Union[str, os.PathLike, bytes, onnx.ModelProto]) -> onnx.ModelProto:
    """A private copy of ``model`` (path, bytes or ModelProto) with external data loaded."""
    return read_model(model)[0]


MODEL_FORMS = "a path of a .onnx file, an onnx.ModelProto or the model's bytes"


def as_path(value, what: str, forms: str = MODEL_FORMS) -> str:
    """``os.fspath(value)``; anything else (None, a number) is a ``UsageError`` naming ``what`` (the
    argument) and the ``forms`` it takes, not a TypeError from deep inside."""
    try:
        path = os.fspath(value)
    except TypeError:
        raise UsageError(f"{what} is {type(value).__name__} {value!r:.40}, not {forms}",
                         hint=f"pass {forms}") from None
    if not path:
        raise UsageError(f"{what} is an empty path", hint=f"pass {forms}")
    return path if isinstance(path, str) else os.fsdecode(path)


def read_model(model: Union[str, os.PathLike, bytes, onnx.ModelProto], hold: bool = False
               ) -> Tuple[onnx.ModelProto, Optional[List[Optional[int]]]]:
    """``load_model``, and the raw_data length of each ``graph.initializer`` as the serialized
    model says it (wire_sizes.py; None where not known: a ModelProto, a small model, external data),
    for ``validate_model(model, raw_sizes)``: upb gives ``raw_data`` only as a copy. ``hold``: a
    large model file's large float weights are held (file_weights.py; read them with
    ``file_weights.array``, ``file_weights.release`` them when done)."""
    if isinstance(model, onnx.ModelProto):
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out, None
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
        try:
            return onnx.load_from_string(data), raw_data_sizes(data)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise ModelError(f"not an ONNX model ({exc})", hint="pass a .onnx file") from None
    path = as_path(model, "the model")
    if os.path.isdir(path):
        raise ModelError(f"'{path}' is a folder, not a model file",
                         hint="pass the .onnx file itself (of a `onnx-mrvl convert` output folder: OUT_DIR/model.onnx)")
    if not os.path.isfile(path):
        raise ModelError(f"model file '{path}' does not exist", hint="check the path")
    global _LAST_READ
    source = _HashedFile(os.path.abspath(path), hold)
    try:
        proto = source.load()
    except (DecodeError, ValueError, RuntimeError, OSError) as exc:
        raise ModelError(f"'{path}' is not an ONNX model ({type(exc).__name__}: {exc})",
                         hint="check that the file is a complete .onnx protobuf") from None
    finally:
        digest = source.close()
    if digest is not None:
        _LAST_READ = (source.name, _identity(source.stat), digest)
    if not proto.graph.node and not proto.graph.output:
        raise ModelError(f"'{path}' parsed as an empty model: not an ONNX file?")
    _check_external(proto, os.path.dirname(os.path.abspath(path)))
    sizes: Optional[List[Optional[int]]] = source.sizes
    if sizes is not None:
        if len(sizes) != len(proto.graph.initializer):
            sizes = None
        else:   # external data is read below: its length is the tensor's to say
            sizes = [None if t.data_location == onnx.TensorProto.EXTERNAL else n
                     for t, n in zip(proto.graph.initializer, sizes)]
    try:
        onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(f"cannot read the external data of '{path}' ({exc})") from None
    if source.pending:
        file_weights.hold(proto, source.pending)
    return proto, sizes


def check_file_target(path: str) -> None:
    """An output file path that is an existing folder is the user's mistake (``UsageError``), not a
    crash of the final rename."""
    if os.path.isdir(path):
        raise UsageError(f"the output file '{path}' is a folder",
                         hint="name a file (it may be inside that folder), not the folder")


def make_folder(folder: str, what: str) -> None:
    """Create ``folder`` (and its parents) for an output file; a file in the way or a folder that
    cannot be created is an ``ArtifactError`` naming ``what`` (the option or file), not an OSError."""
    if not folder:
        return
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ArtifactError(f"{what}: cannot create the folder '{folder}' ({exc.strerror or exc})",
                            hint="choose a path whose folders are folders (not files) and writable") from None


def write_bytes_atomic(path: str, data: bytes) -> None:
    write_atomic(path, lambda f: f.write(data))


def write_json_atomic(path: str, obj) -> None:
    """``json.dumps(obj, indent=1) + "\\n"`` written atomically, streamed (see :func:`dump_json`)."""
    write_atomic(path, lambda f: dump_json(obj, f))


def write_atomic(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(file)`` on a temporary file in ``path``'s folder, fsync, rename it to ``path``."""
    check_file_target(path)
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
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


from .json_stream import LONG_STRING, STRING_CHUNK, dump_json  # noqa: E402,F401 - re-exported
