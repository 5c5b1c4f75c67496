"""Deterministic kernel names: `E_4_4` for elementwise kernels, `r_4_16` for kernels with a reduce,
from the kernel's full shape (the same AST always gets the same name).
"""
from __future__ import annotations
from scheduler.ops import UOp, Ops


def full_shape(ast: UOp) -> tuple:
  shapes = [u.arg.shape for u in ast.toposort if u.op is Ops.VIEW]
  if not shapes: return ()
  ndim = max(len(s) for s in shapes)
  out = []
  for i in range(ndim):
    dims = [s[i] for s in shapes if len(s) > i]
    ints = [d for d in dims if isinstance(d, int)]
    sym = [d for d in dims if not isinstance(d, int)]
    out.append(sym[0] if sym else max(ints))
  return tuple(out)


def kernel_kind(ast: UOp) -> str:
  """`E` elementwise, `r` with a reduce, or the meta op's name (COPY, BUFFER_VIEW, EMPTY)."""
  if ast.op is not Ops.SINK: return ast.op.name
  return "r" if any(u.op is Ops.REDUCE_AXIS for u in ast.toposort) else "E"


def kernel_name(ast: UOp) -> str:
  if ast.op is not Ops.SINK: return ast.op.name
  kind = kernel_kind(ast)
  dims = [str(s) if isinstance(s, int) else s.arg[0] if s.op is Ops.DEFINE_VAR else "s" for s in full_shape(ast)]
  return "_".join([kind] + (dims or ["1"]))
