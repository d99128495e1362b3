"""Turn a Triton frontend error (``CompilationError``: Python AST -> TTIR) into a short message
that names the kernel's file and absolute line, e.g.
``prefill.py:70:12: AttributeError("'NPUOptions' object has no attribute ...")`` followed by the
offending source line."""
from __future__ import annotations

import inspect
import os
import re
from typing import Any, Optional


def _def_line(fn: Any) -> Optional[tuple[str, int]]:
    try:
        lines, start = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or "?"
    except (OSError, TypeError):
        return None
    for i, line in enumerate(lines):
        if re.match(r"\s*def\s", line):
            return path, start + i
    return path, start


def is_frontend_error(exc: BaseException) -> bool:
    return any(cls.__name__ == "CompilationError" for cls in type(exc).__mro__)


def frontend_message(exc: BaseException, jf: Any) -> str:
    """``file:line:col: error`` plus the source line, for a CompilationError raised while
    compiling ``jf``; for other exceptions raised before any stage ran (Triton 3.2 resolves the
    kernel's globals while hashing it), ``file:def_line: Type: message``."""
    node = getattr(exc, "node", None)
    err = getattr(exc, "error_message", None) or type(exc).__name__
    where = _def_line(getattr(jf, "fn", jf))
    lineno = getattr(node, "lineno", None)
    if where is None:
        return str(exc).strip()
    if lineno is None:  # raised outside the AST walk (e.g. resolving globals): name the kernel
        return f"{os.path.basename(where[0])}:{where[1]}: {type(exc).__name__}: {str(exc).strip()}"
    path, def_line = where
    abs_line = def_line + lineno - 1
    col = getattr(node, "col_offset", 0)
    src_lines = (getattr(exc, "src", None) or "").split("\n")
    code = src_lines[lineno - 1].strip() if 0 < lineno <= len(src_lines) else ""
    msg = f"{os.path.basename(path)}:{abs_line}:{col}: {str(err).strip()}"
    if code:
        msg += f"\n    {code}"
    return msg


def frontend_location(exc: BaseException, jf: Any) -> Optional[str]:
    """``path:line`` of a CompilationError, or None."""
    node = getattr(exc, "node", None)
    where = _def_line(getattr(jf, "fn", jf))
    if where is None or getattr(node, "lineno", None) is None:
        return None
    return f"{where[0]}:{where[1] + node.lineno - 1}"
