"""com.microsoft attention ops of cached decoding (``GroupQueryAttention``, ``DecoderMaskedMultiHeadAttention``,
``PagedAttention``, ``SparseAttention``): never rewritten; their nodes stay on the CPU with this reason
(the key/value cache, ``seqlens_k`` / ``total_sequence_length`` and the in-place buffers have no static
equivalent the accelerator runs)."""
from __future__ import annotations

from typing import Optional

from .base import Match
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_cached"
OPS = ("GroupQueryAttention", "DecoderMaskedMultiHeadAttention", "DecoderMaskedSelfAttention", "PagedAttention",
       "SparseAttention")


def check(m: Match, g, target) -> Optional[str]:
    n = m.node
    return f"{n.op_type} '{n.name}' is cached-decoding attention (key/value cache, per-sequence lengths): not " \
           f"decomposed, it stays on the CPU"


def rewrite(m: Match, g) -> str:   # never called: check always refuses
    raise AssertionError("contrib_cached never rewrites")
