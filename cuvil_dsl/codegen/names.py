"""Identifiers in generated source: user names never reach C code as identifiers.

Every value, buffer and scalar in a kernel gets a generated name (``b0``, ``u1``, ``t7``);
the entry point is ``cvl_`` plus the kernel name with underscore runs collapsed, which is
never a keyword, never reserved (no ``__``, no leading underscore and capital) and never a
CUDA builtin such as ``float4`` or ``__half``. User names appear only in comments, where
:func:`comment_text` keeps them from closing the comment or starting a new line.
"""

from __future__ import annotations

import re

_SAFE_COMMENT = re.compile(r"[^A-Za-z0-9_%.,:=\[\] ()-]")


def entry_name(kernel: str) -> str:
    """``forward_k1`` -> ``cvl_forward_k1``; ``__half`` -> ``cvl_half``; ``int`` -> ``cvl_int``."""
    core = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", kernel)).strip("_")
    return f"cvl_{core}" if core else "cvl_kernel"


def comment_text(text: str) -> str:
    """``text`` made safe inside a ``//`` comment (no newline, no backslash continuation)."""
    return _SAFE_COMMENT.sub("?", text)
