"""Specs: which UOps are legal in which graph. `type_verify` checks UOps against a spec and names the
first one that breaks it, with the reason.

Two graphs are checked: tensor graphs built by the frontend (`tensor_uop_spec`, S1) and kernel ASTs
(`ast_spec`, S3, S69-S72, S78). The kernel graph between scheduler passes is plain data (`sched_kernels`).
A spec is a table from op to a check; a check returns None when the UOp is fine, else what is wrong.
"""
from __future__ import annotations
from typing import Callable, Optional
from scheduler.dtype import dtypes, PtrDType
from scheduler.ops import UOp, Ops, GroupOp

Check = Callable[[UOp], Optional[str]]
REDUCE_COMBINERS = (Ops.ADD, Ops.MUL, Ops.MAX)


class SpecError(RuntimeError):
  """A UOp that the spec does not allow."""


class Spec:
  """Per-op checks; an op missing from the table is not allowed in this graph."""
  def __init__(self, name: str, checks: dict[Ops, Check]):
    self.name, self.checks = name, checks

  def problem(self, u: UOp) -> Optional[str]:
    check = self.checks.get(u.op)
    return f"{u.op} is not allowed in {self.name}" if check is None else check(u)


def _ok(u: UOp) -> None: return None

def _expect(condition: bool, reason: str) -> Optional[str]: return None if condition else reason

def _sources_are(*ops: Ops, exact: bool = True) -> Check:
  """The sources have exactly these ops (or, with exact=False, start with them)."""
  def check(u: UOp) -> Optional[str]:
    got = tuple(s.op for s in u.src)
    fits = got == ops if exact else got[:len(ops)] == ops
    return _expect(fits, f"expected sources {[str(o) for o in ops]}, got {[str(o) for o in got]}")
  return check

def _alu_arity(u: UOp) -> Optional[str]:
  want = 1 if u.op in GroupOp.Unary else 3 if u.op in GroupOp.Ternary else 2
  return _expect(len(u.src) == want, f"{u.op} takes {want} sources, got {len(u.src)}")

def _same_dtype_as_source(u: UOp) -> Optional[str]:
  return _expect(len(u.src) == 1 and u.src[0].dtype == u.dtype, "dtype differs from its source")

def _reduce(u: UOp) -> Optional[str]:
  """S78: REDUCE_AXIS combines with ADD, MUL or MAX over a tuple of axes."""
  ok = isinstance(u.arg, tuple) and len(u.arg) == 2 and u.arg[0] in REDUCE_COMBINERS and isinstance(u.arg[1], tuple)
  return _expect(ok and len(u.src) == 1, "REDUCE_AXIS needs (ADD|MUL|MAX, axes) and one source")

def _python_const(u: UOp) -> Optional[str]:
  return _expect(isinstance(u.arg, (int, float, bool)), f"constant {u.arg!r} is not a python number")

def _variable(u: UOp) -> Optional[str]:
  return _expect(isinstance(u.arg, tuple) and len(u.arg) == 3 and not u.src, "DEFINE_VAR needs (name, min, max)")


def _tensor_buffer(u: UOp) -> Optional[str]:
  arg_ok = isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], int) and u.arg[1] >= 0
  return _expect(arg_ok and bool(u.src) and u.src[0].op is Ops.DEVICE,
                 "BUFFER needs a DEVICE source and (unique, size)")

def _tensor_view(u: UOp) -> Optional[str]:
  if not u.src: return None
  return _expect(u.src[0].op is not Ops.STORE and u.dtype.base == u.src[0].dtype.base,
                 "VIEW changes its source's dtype")

def _tensor_const(u: UOp) -> Optional[str]:
  if u.src and u.src[0].op is not Ops.VIEW: return "CONST may only have a VIEW source"
  return _python_const(u)

def _copy(u: UOp) -> Optional[str]:
  ok = len(u.src) == 2 and u.src[0].op is Ops.DEVICE and u.src[1].dtype == u.dtype
  return _expect(ok, "COPY needs (DEVICE, value) of its own dtype")

def _assign(u: UOp) -> Optional[str]:
  return _expect(len(u.src) >= 2 and u.src[0].dtype == u.src[1].dtype, "ASSIGN target and value differ in dtype")


_alu_checks: dict[Ops, Check] = {op: _alu_arity for op in GroupOp.ALU}

tensor_uop_spec = Spec("a tensor graph", {
  **_alu_checks,
  Ops.DEVICE: lambda u: _expect(isinstance(u.arg, str) and u.dtype == dtypes.void and not u.src, "DEVICE needs a name"),
  Ops.BUFFER: _tensor_buffer,
  **{op: _same_dtype_as_source for op in GroupOp.Movement},
  Ops.VIEW: _tensor_view,
  Ops.CONST: _tensor_const,
  Ops.DEFINE_VAR: _variable,
  Ops.BIND: _sources_are(Ops.DEFINE_VAR, Ops.CONST),
  Ops.COPY: _copy,
  Ops.ASSIGN: _assign,
  Ops.REDUCE_AXIS: lambda u: _reduce(u) or _same_dtype_as_source(u),
  Ops.CONTIGUOUS: _same_dtype_as_source, Ops.CONTIGUOUS_BACKWARD: _same_dtype_as_source,
  Ops.DETACH: _same_dtype_as_source,
  Ops.CAST: lambda u: _expect(len(u.src) == 1, "CAST takes one source"),
  Ops.BITCAST: lambda u: _expect(len(u.src) == 1, "BITCAST takes one source"),
  **{op: _ok for op in (Ops.BUFFER_VIEW, Ops.EMPTY, Ops.SINK, Ops.KERNEL, Ops.UNIQUE)},
})


def _ast_sink(u: UOp) -> Optional[str]:
  if all(s.op is Ops.STORE for s in u.src): return None
  return _expect(len(u.src) == 1 and u.src[0].op in GroupOp.Meta, "a kernel SINK holds STOREs or one meta op")

def _ast_global(u: UOp) -> Optional[str]:
  return _expect(isinstance(u.dtype, PtrDType) and isinstance(u.arg, int),
                 "DEFINE_GLOBAL needs a pointer dtype and an index")

def _ast_const(u: UOp) -> Optional[str]:
  if u.src and not (len(u.src) == 1 and u.src[0].op is Ops.VIEW and not u.src[0].src):
    return "CONST may only sit on a bare VIEW"
  return None

def _ast_valid(u: UOp) -> Optional[str]:
  return _expect(u.dtype == dtypes.bool and len(u.src) == 1 and u.src[0].op is Ops.VIEW,
                 "VALID is a bool over one VIEW")

# S3, S69-S72: a kernel AST stores computed values through views; tensor-level ops are gone
ast_spec = Spec("a kernel AST", {
  **_alu_checks,
  Ops.SINK: _ast_sink,
  **{op: _ok for op in GroupOp.Meta},
  Ops.DEFINE_GLOBAL: _ast_global,
  Ops.DEFINE_VAR: _variable,
  Ops.VIEW: lambda u: _expect(u.arg is not None and not u.src, "a kernel VIEW is a bare view chain"),
  Ops.LOAD: _sources_are(Ops.DEFINE_GLOBAL, Ops.VIEW),
  Ops.STORE: lambda u: _expect(len(u.src) == 3 and (u.src[0].op, u.src[1].op) == (Ops.DEFINE_GLOBAL, Ops.VIEW),
                               "STORE needs (DEFINE_GLOBAL, VIEW, value)"),
  Ops.VALID: _ast_valid,
  Ops.CONST: _ast_const,
  Ops.REDUCE_AXIS: _reduce,
  Ops.CAST: lambda u: _expect(len(u.src) == 1, "CAST takes one source"),
  Ops.BITCAST: lambda u: _expect(len(u.src) == 1, "BITCAST takes one source"),
})


def type_verify(uops: list[UOp], spec: Spec) -> None:
  """Raise SpecError naming the first UOp of `uops` that `spec` rejects, and why."""
  for i, u in enumerate(uops):
    if (reason := spec.problem(u)) is not None:
      raise SpecError(f"UOp {i} fails the spec: {u.op} dtype={u.dtype} arg={u.argstr()} "
                      f"sources={[s.op for s in u.src]}: {reason}")
