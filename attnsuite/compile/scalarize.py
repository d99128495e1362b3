"""Find element-by-element memory accesses in triton-ascend's linalg ("ttadapter") IR.

When ``triton-adapter-opt`` cannot turn a pointer tensor into a strided block (a gather through
loaded indices, a page-table lookup), it unrolls the access into an ``scf.for`` loop marked
``{ExtractedLoadOrStore}`` whose body extracts one index (``tensor.extract ... {DiscreteMemAccess}``)
and moves one element (``memref.load`` / ``memref.store`` of a ``memref<1xT>`` view) or one row
(``memref.copy`` of a ``memref<1xNxT>`` view; such loops are also ``hivm.parallel_loop``).
Triton-ascend 3.2.0 for example emits, for ``tl.load(k_ptr[None, :] + arange(D)[:, None])``::

    %2 = scf.for %arg12 = %c0 to %c32 step %c1 iter_args(...) {
      %3 = scf.for %arg14 = %c0 to %c16 step %c1 iter_args(...) {
        %extracted = tensor.extract %0[%arg14] {DiscreteMemAccess} : tensor<16xi32> loc(#loc1)
        %rc = memref.reinterpret_cast %arg2 to offset: [%9], sizes: [1], strides: [1] : ...
        %10 = memref.load %rc[%c0] : memref<1xf16, strided<[1], offset: ?>> loc(#loc1)
        ...
      } {ExtractedLoadOrStore} loc(#loc1)
    } {ExtractedLoadOrStore} loc(#loc1)
    #loc1 = loc("/path/kernel.py":16:16)

Each access is reported with the source line the IR attributes the loop to (present when the
adapter ran with ``--mlir-print-debuginfo``, which ``npu.compile_link`` arranges).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Optional

MARKERS = ("ExtractedLoadOrStore", "DiscreteMemAccess")

_ALIAS_DEF = re.compile(r"^\s*(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_TRAILING_LOC = re.compile(r"\bloc\(((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)\)\s*$")
_FILE_LOC = re.compile(r'"([^"]+)":(\d+):(\d+)')
_ALIAS_REF = re.compile(r"#loc\d*\b")
_CONST = re.compile(r"^(%[\w.$-]+)\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*(?:index|i\d+)")
_FOR = re.compile(r"scf\.for\s+%[\w.$-]+\s*=\s*(%?[\w.$-]+)\s+to\s+(%?[\w.$-]+)\s+step\s+(%?[\w.$-]+)")
_DEF = re.compile(r"^(%[\w.$-]+)(?::\d+)?\s*=\s*([\w.]+)\s*(.*)$")
_MEMREF_TY = re.compile(r"memref<([^,>]*?)x?([a-z]+\d*)(?:,|>)")
_ACCESS = re.compile(r"\b(?:memref\.(load|store|copy)|bufferization\.(materialize_in_destination))\b")


@dataclass
class _Frame:
    header: str
    line: int
    parent: Optional["_Frame"]
    closing: str = ""

    @property
    def is_for(self) -> bool:
        return "scf.for" in self.header

    @property
    def markers(self) -> list[str]:
        attrs = self.closing[1:]
        m = re.match(r"\s*\{([^}]*)\}", attrs)
        names = m.group(1) if m else ""
        return [mk for mk in MARKERS if re.search(rf"\b{mk}\b", names)]


@dataclass
class _Op:
    text: str
    line: int
    frames: tuple = field(default_factory=tuple)


def _resolve(loc_body: str, aliases: dict, depth: int = 0) -> list[tuple[str, int, int]]:
    """All file:line:col locations in a loc(...) body, aliases expanded, outermost first."""
    if depth > 16:
        return []
    out = []
    for m in re.finditer(r'"[^"]+":\d+:\d+|#loc\d*\b', loc_body):
        tok = m.group(0)
        if tok.startswith("#"):
            if tok in aliases:
                out.extend(_resolve(aliases[tok], aliases, depth + 1))
        else:
            f = _FILE_LOC.match(tok)
            out.append((f.group(1), int(f.group(2)), int(f.group(3))))
    return out


def _loc_of(text: str, aliases: dict) -> list[tuple[str, int, int]]:
    m = _TRAILING_LOC.search(text)
    return _resolve(m.group(1), aliases) if m else []


def _memref_shape(type_text: str) -> tuple[Optional[list[int]], str]:
    m = _MEMREF_TY.search(type_text)
    if not m:
        return None, "?"
    dims_txt, elem = m.group(1), m.group(2)
    dims = []
    for d in filter(None, dims_txt.split("x")):
        dims.append(int(d) if d.isdigit() else -1)
    return dims, elem


def _parse(ir: str):
    aliases: dict[str, str] = {}
    for line in ir.splitlines():
        m = _ALIAS_DEF.match(line)
        if m:
            aliases[m.group(1)] = m.group(2)
    frames: list[_Frame] = []
    ops: list[_Op] = []
    stack: list[_Frame] = []
    for i, raw in enumerate(ir.splitlines(), start=1):
        s = raw.strip()
        if not s or s.startswith("//") or _ALIAS_DEF.match(s):
            continue
        if s.startswith("}"):
            if stack:
                stack.pop().closing = s
            rest = s[1:].strip()
            if rest.endswith("{"):  # "} else {" / "} do {"
                f = _Frame(s, i, stack[-1] if stack else None)
                frames.append(f)
                stack.append(f)
            continue
        ops.append(_Op(s, i, tuple(stack)))
        if s.endswith("{"):
            f = _Frame(s, i, stack[-1] if stack else None)
            frames.append(f)
            stack.append(f)
    return aliases, frames, ops


def _trip_count(header: str, consts: dict) -> Optional[int]:
    m = _FOR.search(header)
    if not m:
        return None

    def val(tok):
        if tok.startswith("%"):
            return consts.get(tok)
        return int(tok) if re.fullmatch(r"-?\d+", tok) else None

    lb, ub, step = (val(t) for t in m.groups())
    if None in (lb, ub, step) or step <= 0:
        return None
    return max(0, -(-(ub - lb) // step))


_PURE_OPS = re.compile(r"^(?:%[\w.$-]+(?::\d+)?\s*=\s*)?(?:arith\.|index\.|tensor\.(?:extract|insert|empty)"
                       r"|memref\.(?:reinterpret_cast|load|store|copy|subview|cast)\b"
                       r"|bufferization\.materialize_in_destination\b|scf\.(?:for|yield)\b)")


def _constant_step(header: str, consts: dict) -> bool:
    """A loop the kernel wrote over rows or pages steps by a constant; a persistent grid's work
    loop (``range(pid, n_work, n_programs)``, kernels/_grid.py) steps by a runtime count, and one
    trip of it is a whole tile, however its base address was found."""
    m = _FOR.search(header)
    if not m:
        return False
    step = m.group(3)
    return step in consts if step.startswith("%") else bool(re.fullmatch(r"-?\d+", step))


def _one_row(dims: Optional[list[int]]) -> bool:
    """A view of one row: at most one dimension longer than 1."""
    return bool(dims) and sum(1 for d in dims if d != 1) <= 1


def count_scalar_accesses(ttadapter_ir: str) -> list[dict]:
    """One dict per memory access the adapter turned into a loop of single-element (or single-row)
    moves. A site is the outermost ``scf.for`` marked ``ExtractedLoadOrStore`` /
    ``DiscreteMemAccess`` around the access (3.2.0 marks them); failing that (rc2 marks nothing),
    the outermost of a nest of loops that hold nothing but index arithmetic, ``tensor.extract`` /
    ``tensor.insert`` and a ``memref.load`` / ``memref.store`` of a one-element view of a kernel
    argument. Neither version marks a loop the kernel itself wrote that moves one row per trip from
    an address it read from memory (a gather written as a loop, a page loop over one-row pages):
    such a copy is a site too, found by following its offset back to a load (``dataflow``).

    Keys: ``loc`` ("prefill.py:87" or "?"), ``file``, ``line``, ``col``, ``kind`` ("load" /
    "store"), ``granularity`` ("element" for a memref<1xT> / memref<1x1xT> view, else "row"),
    ``elements_per_access``, ``dtype`` ("f16"), ``trips`` (iterations of the loops of the nest, None
    when a bound is not a constant), ``loops`` (nest depth), ``markers`` (the marker attributes
    found, [] otherwise), ``detected_by`` ("marker" / "pattern" / "dataflow"), ``ir_line`` (1-based
    line of the site's loop), ``stack`` (every file:line the location names, e.g. inlined helpers).
    """
    aliases, frames, ops = _parse(ttadapter_ir)
    consts = {}
    defs = {}
    where_defined: dict[str, tuple] = {}
    direct: dict[int, list[_Op]] = {}
    for op in ops:
        c = _CONST.match(op.text)
        if c:
            consts[c.group(1)] = int(c.group(2))
        d = _DEF.match(op.text)
        if d:
            defs[d.group(1)] = (d.group(2), d.group(3))
            where_defined[d.group(1)] = op.frames
        if op.frames:
            direct.setdefault(id(op.frames[-1]), []).append(op)

    def is_global(name: str, depth: int = 0) -> bool:
        """Does this memref value view a kernel argument (global memory)?"""
        if depth > 8 or name not in defs:
            return name.startswith("%arg")
        opname, rest = defs[name]
        if opname in ("memref.reinterpret_cast", "memref.subview", "memref.cast",
                      "memref.collapse_shape", "memref.expand_shape"):
            src = re.match(r"\s*(%[\w.$-]+)", rest)
            return bool(src) and is_global(src.group(1), depth + 1)
        return False

    def operand_names(rest: str) -> list[str]:
        return re.findall(r"%[\w.$-]+", rest.split(" : ")[0])

    def from_memory(name: str, loop: _Frame, depth: int = 0) -> bool:
        """Is this index value computed from a value read from global memory inside ``loop``
        (a new address every trip, not a base loaded once before the loop)?"""
        if depth > 24 or name not in defs:
            return False
        opname, rest = defs[name]
        if opname in ("memref.load", "tensor.extract"):
            if loop not in where_defined.get(name, ()):
                return False
            src = operand_names(rest)
            if opname == "memref.load":
                return bool(src) and is_global(src[0])
            return bool(src) and loaded_tensor(src[0], depth + 1)
        if opname.startswith(("arith.", "index.")):
            return any(from_memory(o, loop, depth + 1) for o in operand_names(rest))
        return False

    def loaded_tensor(name: str, depth: int) -> bool:
        if depth > 24 or name not in defs:
            return False
        opname, rest = defs[name]
        if opname == "bufferization.to_tensor":
            return True
        if opname.startswith(("arith.", "tensor.", "linalg.")):
            return any(loaded_tensor(o, depth + 1) for o in operand_names(rest))
        return False

    def address_from_memory(name: str, loop: _Frame, depth: int = 0) -> bool:
        """Does this global view's offset depend on a value read from memory inside ``loop``?"""
        if depth > 8 or name not in defs:
            return False
        opname, rest = defs[name]
        if opname == "memref.reinterpret_cast":
            m = re.search(r"offset:\s*\[([^\]]*)\]", rest)
            return bool(m) and any(from_memory(o, loop) for o in re.findall(r"%[\w.$-]+", m.group(1)))
        src = re.match(r"\s*(%[\w.$-]+)", rest)
        if opname == "memref.subview":  # %src[offsets] [sizes] [strides]: sizes are masks
            m = re.match(r"\s*%[\w.$-]+\[([^\]]*)\]", rest)
            if m and any(from_memory(o, loop) for o in re.findall(r"%[\w.$-]+", m.group(1))):
                return True
        if opname in ("memref.subview", "memref.cast", "memref.collapse_shape", "memref.expand_shape"):
            return bool(src) and address_from_memory(src.group(1), loop, depth + 1)
        return False

    def pure(frame: _Frame) -> bool:
        return all(_PURE_OPS.match(o.text) for o in direct.get(id(frame), []))

    def builds_tensor(frame: _Frame) -> bool:
        return any(re.search(r"\btensor\.(?:insert|extract)\b", o.text)
                   for o in direct.get(id(frame), []))

    results = []
    for op in ops:
        m = _ACCESS.search(op.text)
        if not m:
            continue
        loops = [f for f in op.frames if f.is_for]
        if not loops:
            continue
        kind_op = m.group(1) or "materialize"
        head, _, type_text = op.text.partition(" : ")
        operands = re.findall(r"%[\w.$-]+", head.split("=", 1)[-1] if kind_op == "load" else head)
        if kind_op == "materialize":  # bufferization.materialize_in_destination %t in writable %m
            kind, mem = "store", operands[1] if len(operands) > 1 else ""
            if not is_global(mem):
                continue
        elif kind_op == "load":
            kind, mem = "load", operands[0] if operands else ""
        elif kind_op == "store":
            kind, mem = "store", operands[1] if len(operands) > 1 else ""
        else:  # memref.copy %src, %dst
            src, dst = (operands + ["", ""])[:2]
            kind = "store" if is_global(dst) and not is_global(src) else "load"
            mem = dst if kind == "store" else src
        dims, elem = _memref_shape(type_text)
        n = math.prod(dims) if dims and all(d > 0 for d in dims) else None
        granularity = "element" if n == 1 else "row"

        marked = [f for f in loops if f.markers]
        if marked:
            site, detected = marked[0], "marker"
        elif n == 1 and is_global(mem) and builds_tensor(loops[-1]) and pure(loops[-1]):
            i = len(loops) - 1
            while i > 0 and pure(loops[i - 1]):
                i -= 1
            site, detected = loops[i], "pattern"
        elif kind_op != "load" and n != 1 and _one_row(dims) and is_global(mem) \
                and _constant_step(loops[-1].header, consts) and address_from_memory(mem, loops[-1]):
            # One DMA of one row per trip, at an address read from memory: a gather the user
            # wrote as a loop (or a page loop over one-row pages). The adapter marks nothing here.
            site, detected = loops[-1], "dataflow"
        else:
            continue
        nest = loops[loops.index(site):]
        trips: Optional[int] = 1
        for f in nest:
            t = _trip_count(f.header, consts)
            trips = None if (trips is None or t is None) else trips * t
        where = (_loc_of(op.text, aliases) if detected == "dataflow" else
                 _loc_of(site.closing, aliases)) or _loc_of(op.text, aliases)
        file, line, col = where[0] if where else ("?", 0, 0)
        results.append({
            "loc": f"{os.path.basename(file)}:{line}" if where else "?",
            "file": file, "line": line, "col": col,
            "kind": kind, "granularity": granularity, "elements_per_access": n,
            "dtype": elem, "trips": trips, "loops": len(nest),
            "markers": site.markers, "detected_by": detected, "ir_line": site.line,
            "stack": [f"{os.path.basename(f)}:{ln}" for f, ln, _ in where],
        })
    return results


def summarize(accesses: list[dict]) -> list[str]:
    """Lines like "3 scalarized accesses at prefill.py:87 (element load f16 x512)"."""
    groups: dict[tuple, list[dict]] = {}
    for a in accesses:
        groups.setdefault((a["loc"], a["granularity"], a["kind"], a["dtype"]), []).append(a)
    lines = []
    for (loc, gran, kind, dtype), items in groups.items():
        trips = [a["trips"] for a in items]
        per = "x" + "/".join("?" if t is None else str(t) for t in trips)
        what = "scalarized" if gran == "element" else "row-by-row"
        noun = "access" if len(items) == 1 else "accesses"
        lines.append(f"{len(items)} {what} {noun} at {loc} ({gran} {kind} {dtype} {per})")
    return lines
