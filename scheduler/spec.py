"""Specs: which UOps are legal where. `type_verify` checks a list of UOps against a spec and names the
first one that breaks it.

Used by the scheduler on the kernel graph (`kernel_spec`) and on every kernel AST (`ast_spec`), and
by tests on tensor graphs (`tensor_uop_spec`).
"""
from __future__ import annotations
from scheduler.dtype import dtypes, PtrDType
from scheduler.ops import UOp, Ops, GroupOp, UPat, PatternMatcher


class SpecError(RuntimeError):
  """A UOp that the spec does not allow."""


tensor_uop_spec = PatternMatcher([
  (UPat(Ops.DEVICE, dtypes.void, (), name="d"), lambda d: isinstance(d.arg, str)),
  (UPat(Ops.BUFFER, src=(UPat(Ops.DEVICE),), name="buf"),
   lambda buf: isinstance(buf.arg, tuple) and len(buf.arg) == 2 and isinstance(buf.arg[1], int) and buf.arg[1] >= 0),
  (UPat(GroupOp.Movement, name="mv", src=(UPat.var("x"),)), lambda mv, x: mv.dtype == x.dtype),
  (UPat(Ops.VIEW, src=(UPat.var("src"),), name="x"), lambda x, src: src.op is not Ops.STORE and x.dtype.base == src.dtype.base),
  (UPat(Ops.VIEW, src=(), name="x"), lambda x: True),
  (UPat(Ops.CONST, src=(UPat(Ops.VIEW),), name="c"), lambda c: isinstance(c.arg, (int, float, bool))),
  (UPat(Ops.CONST, src=(), name="c"), lambda c: isinstance(c.arg, (int, float, bool))),
  (UPat(Ops.DEFINE_VAR, name="v"), lambda v: isinstance(v.arg, tuple) and len(v.arg) == 3),
  (UPat(Ops.BIND, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST))), lambda: True),
  (UPat((Ops.COPY,), src=(UPat(Ops.DEVICE), UPat.var("x")), name="copy"), lambda copy, x: copy.dtype == x.dtype),
  (UPat(Ops.ASSIGN, src=(UPat.var("target"), UPat.var("value")), name="a"), lambda a, target, value: target.dtype == value.dtype),
  (UPat(Ops.REDUCE_AXIS, name="r", src=(UPat.var("x"),)), lambda r, x: r.arg[0] in {Ops.ADD, Ops.MUL, Ops.MAX} and r.dtype == x.dtype),
  (UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH), name="root", src=(UPat.var("x"),)), lambda root, x: root.dtype == x.dtype),
  (UPat((Ops.CAST, Ops.BITCAST), src=(UPat(),)), lambda: True),
  (UPat(GroupOp.ALU, name="alu"), lambda alu: len(alu.src) == (1 if alu.op in GroupOp.Unary else 3 if alu.op in GroupOp.Ternary else 2)),
  (UPat((Ops.BUFFER_VIEW, Ops.EMPTY, Ops.SINK, Ops.KERNEL, Ops.UNIQUE)), lambda: True),
])

kernel_spec = PatternMatcher([
  (UPat(Ops.DEVICE, src=()), lambda: True),
  (UPat(Ops.BUFFER, src=(UPat(Ops.DEVICE),)), lambda: True),
  (UPat(Ops.BUFFER_VIEW, src=(UPat(Ops.BUFFER),)), lambda: True),
  (UPat(Ops.KERNEL, src=UPat((Ops.BUFFER, Ops.BUFFER_VIEW, Ops.ASSIGN))), lambda: True),
  (UPat(Ops.ASSIGN, src=(UPat((Ops.BUFFER, Ops.BUFFER_VIEW)), UPat(Ops.KERNEL)), allow_any_len=True), lambda: True),
  # whatever is left may not sit between kernels
  (UPat(GroupOp.All - {Ops.SINK, Ops.VIEW}), lambda: False),
  (UPat((Ops.SINK, Ops.VIEW)), lambda: True),
])

ast_spec = PatternMatcher([
  (UPat(Ops.SINK, src=UPat(Ops.STORE)), lambda: True),
  (UPat(Ops.SINK, src=(UPat(GroupOp.Meta),)), lambda: True),
  (UPat(GroupOp.Meta), lambda: True),
  (UPat(Ops.DEFINE_GLOBAL, name="g"), lambda g: isinstance(g.dtype, PtrDType) and isinstance(g.arg, int)),
  (UPat(Ops.DEFINE_VAR, src=(), name="v"), lambda v: isinstance(v.arg, tuple) and len(v.arg) == 3),
  (UPat(Ops.VIEW, src=(), name="v"), lambda v: v.arg is not None),
  (UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_GLOBAL), UPat(Ops.VIEW))), lambda: True),
  (UPat(Ops.STORE, src=(UPat(Ops.DEFINE_GLOBAL), UPat(Ops.VIEW), UPat())), lambda: True),
  (UPat(Ops.VALID, dtypes.bool, (UPat(Ops.VIEW),)), lambda: True),
  (UPat(Ops.CONST, src=(UPat(Ops.VIEW, src=()),)), lambda: True),
  (UPat(Ops.CONST, src=()), lambda: True),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(),), name="r"), lambda r: r.arg[0] in {Ops.ADD, Ops.MUL, Ops.MAX} and isinstance(r.arg[1], tuple)),
  (UPat((Ops.CAST, Ops.BITCAST), src=(UPat(),)), lambda: True),
  (UPat(GroupOp.ALU, name="alu"), lambda alu: len(alu.src) == (1 if alu.op in GroupOp.Unary else 3 if alu.op in GroupOp.Ternary else 2)),
  # anything else (tensor-level ops, buffers, movement ops) must not survive into a kernel
  (UPat(GroupOp.All), lambda: False),
])


def type_verify(uops: list[UOp], spec: PatternMatcher) -> None:
  for i, u in enumerate(uops):
    ok = spec.rewrite(u)
    if ok is not True:
      raise SpecError(f"UOp {i} fails the spec: {u.op} dtype={u.dtype} arg={u.argstr()} sources={[s.op for s in u.src]}")
