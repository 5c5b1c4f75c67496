"""Symbolic integer math on UOps: value ranges, constant folding and index simplification.

Sits on `ops.py`. The scheduler uses `symbolic_simple` on tensor graphs; lowering and the shape
tracker use `symbolic` on index expressions. `Variable(name, min, max)` is a `DEFINE_VAR`.
"""
from __future__ import annotations
import math, operator
from typing import Any
from scheduler.dtype import DType, dtypes, truncate_const
from scheduler.ops import UOp, Ops, GroupOp, UPat, PatternMatcher


def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.int32) -> UOp:
  if not isinstance(min_val, int) or not isinstance(max_val, int) or min_val > max_val:
    raise ValueError(f"Variable {name!r} needs integer bounds min <= max, got [{min_val}, {max_val}]")
  return UOp.variable(name, min_val, max_val, dtype)


# ***** evaluating ALU ops on python values with C semantics *****

def cdiv(x: int, y: int) -> int: return abs(x) // abs(y) * (1 if x * y >= 0 else -1) if y != 0 else 0
def cmod(x: int, y: int) -> int: return x - cdiv(x, y) * y


def _safe_exp2(x):
  try: return 2 ** x
  except OverflowError: return math.inf


def _fdiv(x, y):
  if y == 0: return math.nan if x == 0 or x != x else math.copysign(math.inf, x) * (math.copysign(1, y))
  return x / y


python_alu: dict[Ops, Any] = {
  Ops.LOG2: lambda x: math.log2(x) if x > 0 else -math.inf if x == 0 else math.nan,
  Ops.EXP2: _safe_exp2, Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
  Ops.RECIP: lambda x: 1 / x if x != 0 else math.copysign(math.inf, x),
  Ops.SIN: lambda x: math.sin(x) if not math.isinf(x) else math.nan, Ops.NEG: operator.neg,
  Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.CMPNE: operator.ne, Ops.CMPLT: operator.lt,
  Ops.XOR: operator.xor, Ops.OR: operator.or_, Ops.AND: operator.and_, Ops.SHR: operator.rshift, Ops.SHL: operator.lshift,
  Ops.MAX: max, Ops.MOD: cmod, Ops.IDIV: cdiv, Ops.FDIV: _fdiv, Ops.MULACC: lambda x, y, z: x * y + z,
  Ops.WHERE: lambda x, y, z: y if x else z,
}


def exec_alu(op: Ops, dtype: DType, operands: list) -> Any:
  if dtypes.is_int(dtype) and op in {Ops.IDIV, Ops.MOD} and operands[1] == 0: raise ZeroDivisionError("integer division by zero in constant")
  return truncate_const(python_alu[op](*operands), dtype)


# ***** value ranges *****

def min_max(u: UOp) -> tuple:
  """(lowest, highest) value `u` can take; the dtype's range when nothing better is known."""
  op, src = u.op, u.src
  if op is Ops.CONST: return (u.arg, u.arg)
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if op is Ops.BIND: return src[0].vmin, src[0].vmax
  if op is Ops.RANGE: return src[0].vmin, src[1].vmax - 1
  if op is Ops.SPECIAL: return 0, u.arg[1] - 1 if isinstance(u.arg[1], int) else u.arg[1].vmax - 1
  if op is Ops.ADD: return src[0].vmin + src[1].vmin, src[0].vmax + src[1].vmax
  if op is Ops.SUB: return src[0].vmin - src[1].vmax, src[0].vmax - src[1].vmin
  if op is Ops.MUL:
    vals = [a * b for a in (src[0].vmin, src[0].vmax) for b in (src[1].vmin, src[1].vmax) if not (math.isinf(a) or math.isinf(b)) or (a and b)]
    if len(vals) == 4 and all(isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) for v in vals):
      return min(vals), max(vals)
  if op is Ops.MAX: return max(src[0].vmin, src[1].vmin), max(src[0].vmax, src[1].vmax)
  if op is Ops.IDIV and src[1].op is Ops.CONST and dtypes.is_int(u.dtype):
    c = src[1].arg
    if c > 0: return cdiv(src[0].vmin, c), cdiv(src[0].vmax, c)
    if c < 0: return cdiv(src[0].vmax, c), cdiv(src[0].vmin, c)
  if op is Ops.MOD and src[1].op is Ops.CONST and dtypes.is_int(u.dtype) and src[1].arg > 0:
    c, lo, hi = src[1].arg, src[0].vmin, src[0].vmax
    if lo >= 0:
      if lo // c == hi // c: return lo % c, hi % c
      return 0, min(hi, c - 1)
    return -(c - 1), c - 1
  if op is Ops.CMPLT:
    if src[0].vmax < src[1].vmin: return True, True
    if src[0].vmin >= src[1].vmax: return False, False
    return False, True
  if op is Ops.CMPNE:
    if src[0].vmax < src[1].vmin or src[0].vmin > src[1].vmax: return True, True
    if src[0].vmin == src[0].vmax == src[1].vmin == src[1].vmax: return False, False
    return False, True
  if op is Ops.AND and u.dtype == dtypes.bool: return bool(src[0].vmin and src[1].vmin), bool(src[0].vmax and src[1].vmax)
  if op is Ops.OR and u.dtype == dtypes.bool: return bool(src[0].vmin or src[1].vmin), bool(src[0].vmax or src[1].vmax)
  if op is Ops.AND and dtypes.is_int(u.dtype) and src[1].op is Ops.CONST and src[1].arg >= 0 and src[0].vmin >= 0:
    return 0, min(src[0].vmax, src[1].arg)
  if op is Ops.WHERE:
    if src[0].vmin == src[0].vmax: return (src[1].vmin, src[1].vmax) if src[0].vmin else (src[2].vmin, src[2].vmax)
    return min(src[1].vmin, src[2].vmin), max(src[1].vmax, src[2].vmax)
  if op is Ops.CAST and dtypes.is_int(u.dtype) and (dtypes.is_int(src[0].dtype) or src[0].dtype == dtypes.bool):
    lo, hi = int(src[0].vmin), int(src[0].vmax)
    if dtypes.min(u.dtype) <= lo and hi <= dtypes.max(u.dtype): return lo, hi
  if op is Ops.CAST and u.dtype == dtypes.bool: return bool(src[0].vmin) and src[0].vmin == src[0].vmax, bool(src[0].vmax or src[0].vmin)
  return dtypes.min(u.dtype), dtypes.max(u.dtype)


# ***** rules *****

def _fold_const(a: UOp):
  if a.op is Ops.THREEFRY: return None
  try: return a.const_like(exec_alu(a.op, a.dtype, [x.arg for x in a.src]))
  except (ZeroDivisionError, OverflowError, ValueError): return None


symbolic_simple = PatternMatcher([
  # identities
  (UPat.var("x") + 0, lambda x: x),
  (UPat.var("x") * 1, lambda x: x),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: x if c.arg == 1 else (-x if c.arg == -1 else None)),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.var("x"))), lambda x: x.const_like(1)),
  (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(UPat.var(), UPat.var("y")), name="base"), UPat.var("y"))), lambda base, y: base),
  (UPat.var("x", dtype=dtypes.bool) & UPat.cvar("c"), lambda x, c: x if c.arg else c),
  (UPat.var("x", dtype=dtypes.bool) | UPat.cvar("c"), lambda x, c: c if c.arg else x),
  (UPat(GroupOp.Idempotent, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.CMPNE, src=(UPat(Ops.CMPNE, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, True))), UPat.const(dtypes.bool, True))),
   lambda x: x),
  # zero folding
  (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.var("x"))), lambda x: UOp.const(dtypes.bool, False) if x.st is None else
   x.const_like(False).cast(dtypes.bool)),
  (UPat(Ops.CMPNE, src=(UPat.var("x", dtype=dtypes.ints), UPat.var("x"))), lambda x: UOp.const(dtypes.bool, False) if x.st is None else
   x.const_like(False).cast(dtypes.bool)),
  (UPat.var("x") * 0, lambda x: x.const_like(0)),
  # constant folding
  (UPat(GroupOp.ALU, name="a", src=UPat(Ops.CONST)), _fold_const),
  # bool arithmetic is logic
  (UPat(Ops.MUL, dtype=dtypes.bool, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x & y),
  (UPat(Ops.ADD, dtype=dtypes.bool, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x | y),
  (UPat(Ops.MAX, dtype=dtypes.bool, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x | y),
  # casts of constants and no-op casts
  (UPat(Ops.CAST, name="root", src=(UPat.cvar("c"),)), lambda root, c: root.const_like(c.arg)),
  (UPat(Ops.CAST, name="root"), lambda root: root.src[0] if root.dtype == root.src[0].dtype else None),
])


def _fold_by_range(x: UOp):
  if x.op in {Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL, Ops.CONST, Ops.BIND} or not (dtypes.is_int(x.dtype) or x.dtype == dtypes.bool): return None
  if any(s.op in {Ops.LOAD, Ops.INDEX} for s in x.toposort): return None
  lo, hi = x.vmin, x.vmax
  return UOp.const(x.dtype, lo) if lo == hi else None


def _split_terms(x: UOp) -> list[UOp]: return _split_terms(x.src[0]) + _split_terms(x.src[1]) if x.op is Ops.ADD else [x]


def _term_coeff(t: UOp) -> tuple[UOp, int]:
  if t.op is Ops.MUL and t.src[1].op is Ops.CONST and isinstance(t.src[1].arg, int): return t.src[0], t.src[1].arg
  return t, 1


def _combine_terms(x: UOp):
  """Sum of terms with like factors combined and constants summed, in a stable order."""
  if not dtypes.is_int(x.dtype): return None
  terms = _split_terms(x)
  if len(terms) < 2: return None
  const, coeffs = 0, {}
  for t in terms:
    if t.op is Ops.CONST: const += t.arg
    else:
      base, c = _term_coeff(t)
      coeffs[base] = coeffs.get(base, 0) + c
  new_terms = [b * c if c != 1 else b for b, c in coeffs.items() if c != 0]
  if const != 0 or not new_terms: new_terms.append(UOp.const(x.dtype, const))
  if len(new_terms) == len(terms) and all(a is b for a, b in zip(new_terms, terms)): return None
  ret = new_terms[0]
  for t in new_terms[1:]: ret = UOp(Ops.ADD, x.dtype, (ret, t))
  return ret if ret is not x else None


def _div_fold(x: UOp, c: UOp):
  """x // c where the terms of x that are multiples of c come out of the division."""
  if not dtypes.is_int(x.dtype) or c.arg <= 0 or x.vmin < 0: return None
  if x.vmax < c.arg: return x.const_like(0)
  terms = _split_terms(x)
  quo, rem = [], []
  for t in terms:
    base, k = _term_coeff(t)
    if t.op is Ops.CONST:
      quo.append(t.const_like(t.arg // c.arg))
      if t.arg % c.arg: rem.append(t.const_like(t.arg % c.arg))
    elif k % c.arg == 0: quo.append(base * (k // c.arg) if k // c.arg != 1 else base)
    else: rem.append(t)
  if not quo or len(quo) == 1 and quo[0].op is Ops.CONST and quo[0].arg == 0 and len(rem) == len(terms): return None
  rem_sum = _sum(rem, x.dtype)
  if rem_sum.vmin < 0: return None
  rest = rem_sum // c if rem_sum.vmax >= c.arg else None
  out = _sum(quo + ([rest] if rest is not None else []), x.dtype)
  return out


def _mod_fold(x: UOp, c: UOp):
  if not dtypes.is_int(x.dtype) or c.arg <= 0 or x.vmin < 0: return None
  if x.vmax < c.arg: return x
  terms = _split_terms(x)
  keep = []
  for t in terms:
    base, k = _term_coeff(t)
    if t.op is Ops.CONST:
      if t.arg % c.arg: keep.append(t.const_like(t.arg % c.arg))
    elif k % c.arg != 0: keep.append(t)
  if len(keep) == len(terms): return None
  rem = _sum(keep, x.dtype)
  if rem.vmin < 0: return None
  return rem if rem.vmax < c.arg else rem % c


def _sum(terms: list[UOp], dtype: DType) -> UOp:
  if not terms: return UOp.const(dtype, 0)
  ret = terms[0]
  for t in terms[1:]: ret = ret + t
  return ret


symbolic = symbolic_simple + PatternMatcher([
  (UPat(GroupOp.ALU, name="x"), _fold_by_range),
  (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))), lambda x, c1, c2: x * (c1.arg * c2.arg)),
  (UPat(Ops.ADD, name="x"), _combine_terms),
  (UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), UPat.cvar("c")), name="m"),
   lambda a, b, c, m: a * c + b * c if dtypes.is_int(m.dtype) else None),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c"))), _div_fold),
  (UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c"))), _mod_fold),
  # a constant on the left of a commutative op moves to the right
  (UPat(GroupOp.Commutative, name="x", src=(UPat(Ops.CONST), UPat())),
   lambda x: x.replace(src=x.src[::-1]) if x.src[1].op is not Ops.CONST else None),
])


# ***** rendering index expressions as text *****

_infix = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}


def render_expr(u: UOp) -> str:
  if u.op is Ops.CONST: return str(u.arg)
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if u.op is Ops.BIND: return render_expr(u.src[0])
  if u.op is Ops.RANGE: return f"ridx{u.arg}"
  if u.op in _infix: return f"({render_expr(u.src[0])}{_infix[u.op]}{render_expr(u.src[1])})"
  if u.op is Ops.MAX: return f"max({render_expr(u.src[0])}, {render_expr(u.src[1])})"
  if u.op is Ops.WHERE: return f"({render_expr(u.src[1])} if {render_expr(u.src[0])} else {render_expr(u.src[2])})"
  return f"{u.op.name}({', '.join(render_expr(s) for s in u.src)})"
