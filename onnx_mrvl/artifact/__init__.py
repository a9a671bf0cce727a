"""The model binary: one region's compiled program (meta + fp16/fp32 weights) in one file.

``pack(meta, weights) -> bytes`` writes it deterministically; ``load(data_or_path) -> Binary``
validates every byte before trusting it and returns read-only weight views. The byte layout, the
checks and the versioning policy are in docs/binary-format.md.
"""
from .format import (DEFAULT_MAX_SIZE, FORMAT_MAJOR, FORMAT_MINOR, MAGIC, Binary,  # noqa: F401
                     canonical_json, pack, pack_sha256, sha256_hex)
from .reader import load  # noqa: F401
from .schema import PROGRAM_FORMAT, PROGRAM_VERSION, validate_meta  # noqa: F401

__all__ = ["pack", "pack_sha256", "load", "Binary", "sha256_hex", "canonical_json", "validate_meta", "MAGIC",
           "FORMAT_MAJOR", "FORMAT_MINOR", "DEFAULT_MAX_SIZE", "PROGRAM_FORMAT", "PROGRAM_VERSION"]
