"""Symbolic integer math on UOps: value ranges, constant folding and index simplification.

Sits on `ops.py`. The scheduler uses `symbolic_simple` on tensor graphs; lowering and the shape
tracker use `symbolic` on index expressions. `Variable(name, min, max)` is a `DEFINE_VAR`.
"""
from __future__ import annotations
import math, operator
from typing import Any, Optional
from scheduler.dtype import DType, dtypes, truncate_const
from scheduler import ops
from scheduler.ops import UOp, Ops, GroupOp, UPat, PatternMatcher, resolve


def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.int32) -> UOp:
  if not isinstance(min_val, int) or not isinstance(max_val, int) or min_val > max_val:
    raise ValueError(f"Variable {name!r} needs integer bounds min <= max, got [{min_val}, {max_val}]")
  return UOp.variable(name, min_val, max_val, dtype)


# ***** evaluating ALU ops on python values with C semantics *****

def cdiv(x: int, y: int) -> int:
  """Integer division truncating toward zero, as C does (0 when dividing by zero)."""
  if y == 0: return 0
  quotient = abs(x) // abs(y)
  return quotient if (x < 0) == (y < 0) or x == 0 else -quotient


def cmod(x: int, y: int) -> int:
  """The remainder that goes with `cdiv`: it has the sign of the dividend."""
  return x - y * cdiv(x, y)


def _log2(x): return math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)
def _sqrt(x): return math.sqrt(x) if x >= 0 else math.nan
def _recip(x): return 1 / x if x != 0 else math.copysign(math.inf, x)
def _sin(x): return math.nan if math.isinf(x) else math.sin(x)


def _exp2(x):
  try: return 2 ** x
  except OverflowError: return math.inf


def _fdiv(x, y):
  if y != 0: return x / y
  if x == 0 or x != x: return math.nan
  return math.copysign(math.inf, x) * math.copysign(1, y)


_UNARY = {Ops.LOG2: _log2, Ops.EXP2: _exp2, Ops.SQRT: _sqrt, Ops.RECIP: _recip, Ops.SIN: _sin, Ops.NEG: operator.neg}
_BINARY = {
  # arithmetic
  Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.FDIV: _fdiv, Ops.IDIV: cdiv, Ops.MOD: cmod,
  Ops.MAX: max,
  # comparisons
  Ops.CMPNE: operator.ne, Ops.CMPLT: operator.lt,
  # bits
  Ops.SHL: operator.lshift, Ops.SHR: operator.rshift, Ops.AND: operator.and_, Ops.OR: operator.or_,
  Ops.XOR: operator.xor,
}


def _evaluate(op: Ops, operands: list) -> Any:
  if op in _UNARY: return _UNARY[op](operands[0])
  if op in _BINARY: return _BINARY[op](operands[0], operands[1])
  if op is Ops.WHERE: return operands[1] if operands[0] else operands[2]
  if op is Ops.MULACC: return operands[0] * operands[1] + operands[2]
  raise ValueError(f"{op} cannot be evaluated on constants")


def exec_alu(op: Ops, dtype: DType, operands: list) -> Any:
  """`op` applied to python constants, with the result stored as `dtype` would store it."""
  if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dtype) and operands[1] == 0:
    raise ZeroDivisionError("integer division by zero in constant")
  return truncate_const(_evaluate(op, operands), dtype)


# ***** value ranges *****

def min_max(u: UOp) -> tuple:
  """(lowest, highest) value `u` can take; the dtype's range when nothing better is known."""
  op, src = u.op, u.src
  if op is Ops.CONST: return (u.arg, u.arg)
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if op is Ops.BIND: return src[0].vmin, src[0].vmax
  if op is Ops.RANGE: return src[0].vmin, src[1].vmax - 1
  if op is Ops.SPECIAL:
    extent = u.arg[1]
    return 0, (extent if isinstance(extent, int) else extent.vmax) - 1
  if op is Ops.ADD: return src[0].vmin + src[1].vmin, src[0].vmax + src[1].vmax
  if op is Ops.SUB: return src[0].vmin - src[1].vmax, src[0].vmax - src[1].vmin
  if op is Ops.MUL:
    vals = [a * b for a in (src[0].vmin, src[0].vmax) for b in (src[1].vmin, src[1].vmax)
            if not (math.isinf(a) or math.isinf(b)) or (a and b)]
    if len(vals) == 4 and all(isinstance(v, (int, float))
                              and not (isinstance(v, float) and math.isnan(v)) for v in vals):
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
  if op is Ops.AND and u.dtype == dtypes.bool:
    return bool(src[0].vmin and src[1].vmin), bool(src[0].vmax and src[1].vmax)
  if op is Ops.OR and u.dtype == dtypes.bool: return bool(src[0].vmin or src[1].vmin), bool(src[0].vmax or src[1].vmax)
  if op is Ops.AND and dtypes.is_int(u.dtype) and src[1].op is Ops.CONST and src[1].arg >= 0 and src[0].vmin >= 0:
    return 0, min(src[0].vmax, src[1].arg)
  if op is Ops.WHERE:
    if src[0].vmin == src[0].vmax: return (src[1].vmin, src[1].vmax) if src[0].vmin else (src[2].vmin, src[2].vmax)
    return min(src[1].vmin, src[2].vmin), max(src[1].vmax, src[2].vmax)
  if op is Ops.CAST and dtypes.is_int(u.dtype) and (dtypes.is_int(src[0].dtype) or src[0].dtype == dtypes.bool):
    lo, hi = int(src[0].vmin), int(src[0].vmax)
    if dtypes.min(u.dtype) <= lo and hi <= dtypes.max(u.dtype): return lo, hi
  if op is Ops.CAST and u.dtype == dtypes.bool:
    return bool(src[0].vmin) and src[0].vmin == src[0].vmax, bool(src[0].vmax or src[0].vmin)
  return dtypes.min(u.dtype), dtypes.max(u.dtype)


# ***** rules *****

def _fold_const(a: UOp):
  if a.op is Ops.THREEFRY: return None
  try: return a.const_like(exec_alu(a.op, a.dtype, [x.arg for x in a.src]))
  except (ZeroDivisionError, OverflowError, ValueError): return None


def _const_value(u: UOp):
  return u.arg if u.op is Ops.CONST else None


def _false_like(x: UOp) -> UOp:
  return UOp.const(dtypes.bool, False) if x.st is None else x.const_like(False).cast(dtypes.bool)


def _fold_with_constant(root: UOp) -> Optional[UOp]:
  """S13 identities of a binary op with a constant on either side: x+0, x*1, x*0, x//1, x//-1, bool x&c, x|c."""
  op = root.op
  for x, c in ((root.src[0], root.src[1]), (root.src[1], root.src[0])):
    value = _const_value(c)
    if value is None: continue
    if op is Ops.ADD and value == 0: return x
    if op is Ops.MUL and value == 1: return x
    if op is Ops.MUL and value == 0:
      if x.op is Ops.CONST: break   # two constants fold exactly: inf * 0 is nan, 0 * -1 is -0.0
      return x.const_like(0)
    if op in (Ops.AND, Ops.OR) and x.dtype == dtypes.bool:
      keeps_x = bool(value) if op is Ops.AND else not value
      return x if keeps_x else c
    if op in GroupOp.Commutative: continue
    if op is Ops.IDIV and c is root.src[1] and value in (1, -1): return x if value == 1 else -x
    break
  return None


def _fold_same_operands(root: UOp) -> Optional[UOp]:
  """S13 folds of an op applied to one value twice: x//x, x<x, int x!=x, idempotent ops."""
  x, y = root.src
  if x is not y: return None
  if root.op is Ops.IDIV:   # 0 // 0 is 0, so x // x is 1 only where x cannot be 0
    never_zero = (x.op is Ops.CONST and x.arg != 0) or resolve(x.vmin > 0, False) or resolve(x.vmax < 0, False)
    return x.const_like(1) if never_zero else None
  if root.op is Ops.CMPLT: return _false_like(x)
  if root.op is Ops.CMPNE and dtypes.is_int(x.dtype): return _false_like(x)
  if root.op in GroupOp.Idempotent: return x
  return None


def _fold_nested(root: UOp) -> Optional[UOp]:
  """(x%y)%y -> x%y, and not(not(b)) -> b for bools (NOT is `!= True`)."""
  inner, outer_operand = root.src
  if inner.op is not root.op or inner.src[1] is not outer_operand: return None
  if root.op is Ops.MOD: return inner
  if (root.op is Ops.CMPNE and inner.dtype == dtypes.bool and inner.src[0].dtype == dtypes.bool
      and _const_value(outer_operand) is True):
    return inner.src[0]
  return None


def _fold_all_constant(root: UOp) -> Optional[UOp]:
  """An ALU op over constants is a constant (THREEFRY is left for the device)."""
  if root.op is Ops.THREEFRY or any(s.op is not Ops.CONST for s in root.src): return None
  try: return root.const_like(exec_alu(root.op, root.dtype, [s.arg for s in root.src]))
  except (ZeroDivisionError, OverflowError, ValueError): return None


def _bool_arithmetic_is_logic(root: UOp) -> Optional[UOp]:
  """bool*bool is AND, bool+bool and max(bool, bool) are OR."""
  if root.dtype != dtypes.bool: return None
  x, y = root.src
  return x & y if root.op is Ops.MUL else x | y


def _fold_cast(root: UOp) -> Optional[UOp]:
  source = root.src[0]
  if source.op is Ops.CONST:
    not_finite = isinstance(source.arg, float) and not math.isfinite(source.arg)
    if not_finite and dtypes.is_int(root.dtype): return None   # NaN/inf to int: what the device does, not a crash here
    return root.const_like(source.arg)   # a float constant is rounded as the device stores it (dtypes.as_const)
  return source if source.dtype == root.dtype else None


def _fold_division_by_self(root: UOp) -> Optional[UOp]:
  """x * (1/x) -> 1 and (x*y) * (1/y) -> x, for the same node x, y (x/x and (x*y)/y, as the reference folds them:
  a softmax over an axis of size one and a / a then cost no kernel)."""
  if root.op is not Ops.MUL: return None
  for other, inverse in ((root.src[0], root.src[1]), (root.src[1], root.src[0])):
    if inverse.op is not Ops.RECIP: continue
    divisor = inverse.src[0]
    if other is divisor: return other.const_like(1)
    if other.op is Ops.MUL and divisor in other.src: return other.src[0] if other.src[1] is divisor else other.src[1]
  return None


_BINARY_FOLDS = (_fold_with_constant, _fold_same_operands, _fold_nested, _fold_division_by_self)


def _simple_folds(root: UOp) -> Optional[UOp]:
  if root.op is Ops.CAST: return _fold_cast(root)
  if len(root.src) == 2 and root.op in GroupOp.ALU:
    for fold in _BINARY_FOLDS:
      if (out := fold(root)) is not None: return out
  if root.op in GroupOp.ALU and (out := _fold_all_constant(root)) is not None: return out
  if root.op in (Ops.MUL, Ops.ADD, Ops.MAX): return _bool_arithmetic_is_logic(root)
  return None


# S13: the basic algebraic simplifier the scheduler runs on tensor graphs
symbolic_simple = PatternMatcher([(UPat((*GroupOp.ALU, Ops.CAST), name="root"), _simple_folds)])


def _fold_by_range(x: UOp):
  if x.op in {Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL, Ops.CONST, Ops.BIND} or not (dtypes.is_int(x.dtype)
                                                                                   or x.dtype == dtypes.bool):
    return None
  if any(s.op in {Ops.LOAD, Ops.INDEX} for s in x.toposort): return None
  lo, hi = x.vmin, x.vmax
  return UOp.const(x.dtype, lo) if lo == hi else None


def _split_terms(x: UOp) -> list[UOp]:
  return _split_terms(x.src[0]) + _split_terms(x.src[1]) if x.op is Ops.ADD else [x]


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
  _rejoin_quotient_and_remainder(coeffs)
  new_terms = [b * c if c != 1 else b for b, c in coeffs.items() if c != 0]
  if const != 0 or not new_terms: new_terms.append(UOp.const(x.dtype, const))
  if len(new_terms) == len(terms) and all(a is b for a, b in zip(new_terms, terms)): return None
  ret = new_terms[0]
  for t in new_terms[1:]: ret = UOp(Ops.ADD, x.dtype, (ret, t))
  return ret if ret is not x else None


def _rejoin_quotient_and_remainder(coeffs: dict) -> None:
  """k*((x//c)*c) + k*(x%c) is k*x: C's truncating division and its remainder always add back up."""
  for base in [b for b in coeffs if b.op is Ops.MOD and b.src[1].op is Ops.CONST and b.src[1].arg != 0]:
    x, c = base.src
    quotient = next((q for q in coeffs if q.op is Ops.IDIV and q.src[0] is x and q.src[1] is c), None)
    if quotient is None or coeffs.get(base, 0) == 0 or coeffs[quotient] != coeffs[base] * c.arg: continue
    coeffs[x] = coeffs.get(x, 0) + coeffs[base]
    coeffs[base] = coeffs[quotient] = 0


def _common_factor(terms: list[UOp]) -> int:
  """The gcd of the terms' constant coefficients (a constant term counts with its value)."""
  return math.gcd(*(t.arg if t.op is Ops.CONST else _term_coeff(t)[1] for t in terms))


def _divide_terms(terms: list[UOp], g: int) -> UOp:
  """The sum of terms, each coefficient divided by g (which divides them all)."""
  out = []
  for t in terms:
    if t.op is Ops.CONST: out.append(t.const_like(t.arg // g))
    else:
      base, k = _term_coeff(t)
      out.append(base if k // g == 1 else base * (k // g))
  return _sum(out, terms[0].dtype)


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
  rest = None
  if rem_sum.vmax >= c.arg:   # the rest and the divisor share a factor g: (g*r) // (g*d) is r // d for r >= 0
    g = math.gcd(_common_factor(rem), c.arg) if rem else 1
    rest = _divide_terms(rem, g) // (c.arg // g) if g > 1 else rem_sum // c
  out = _sum(quo + ([rest] if rest is not None else []), x.dtype)
  return out


def _mod_fold(x: UOp, c: UOp):
  """x % c with every term's coefficient (and the constant) taken modulo c: the sum stays congruent, so while it
  stays non-negative the remainder is the same, and a sum whose range fits below c needs no % at all
  ((i + 32*r) % 31 is i + r when i + r < 31)."""
  if not dtypes.is_int(x.dtype) or c.arg <= 0 or x.vmin < 0: return None
  if x.vmax < c.arg: return x
  terms = _split_terms(x)
  keep, changed = [], False
  for t in terms:
    base, k = _term_coeff(t)
    if t.op is Ops.CONST:
      if t.arg % c.arg: keep.append(t.const_like(t.arg % c.arg))
      changed |= t.arg % c.arg != t.arg
    elif (reduced := k % c.arg) != 0:
      keep.append(t if reduced == k else (base * reduced if reduced != 1 else base))
      changed |= reduced != k
    else: changed = True
  if not changed: return None
  rem = _sum(keep, x.dtype)
  if rem.vmin < 0: return None
  return rem if rem.vmax < c.arg else rem % c


def _sum(terms: list[UOp], dtype: DType) -> UOp:
  if not terms: return UOp.const(dtype, 0)
  ret = terms[0]
  for t in terms[1:]: ret = ret + t
  return ret


def _fold_constant_products(root: UOp) -> Optional[UOp]:
  """(x*c1)*c2 -> x*(c1*c2); for ints, (a+b)*c -> a*c + b*c so that terms can combine."""
  inner, c = root.src
  if c.op is not Ops.CONST: return None
  if inner.op is Ops.MUL and inner.src[1].op is Ops.CONST: return inner.src[0] * (inner.src[1].arg * c.arg)
  if inner.op is Ops.ADD and dtypes.is_int(root.dtype): return inner.src[0] * c + inner.src[1] * c
  return None


def _fold_by_constant_divisor(root: UOp) -> Optional[UOp]:
  dividend, divisor = root.src
  if divisor.op is not Ops.CONST:
    if root.op is Ops.IDIV and dtypes.is_int(root.dtype) and dividend.op is Ops.MUL and divisor in dividend.src \
        and (divisor.vmin > 0 or divisor.vmax < 0) and not _reads_memory(dividend):   # (x*y)//y is x where y != 0
      return dividend.src[0] if dividend.src[1] is divisor else dividend.src[1]
    return None
  if dtypes.is_int(root.dtype) and isinstance(divisor.arg, int) and divisor.arg < 0:
    # C's division truncates toward zero: x // -c is -(x // c), and the remainder keeps the dividend's sign
    positive = divisor.const_like(-divisor.arg)
    return -(dividend // positive) if root.op is Ops.IDIV else dividend % positive
  return (_div_fold if root.op is Ops.IDIV else _mod_fold)(dividend, divisor)


def _reads_memory(x: UOp) -> bool:
  """Loaded values can wrap around in their dtype, where moving terms across a comparison is not exact."""
  return any(s.op in {Ops.LOAD, Ops.INDEX} for s in x.toposort)


def _fold_max_by_range(a: UOp, b: UOp) -> Optional[UOp]:
  """max(a, b) is a when a's range lies above b's (and b when below), or when a - b, its like terms combined, can
  not be negative (max(x + y, x) with y >= 0): bounds of closed-form counts fold away."""
  if _reads_memory(a) or _reads_memory(b): return None
  if a.vmin >= b.vmax: return a
  if b.vmin >= a.vmax: return b
  difference = _combine_terms(a + b * -1)
  if difference is None: return None
  if difference.vmin >= 0: return a
  if difference.vmax <= 0: return b
  return None


def _fold_comparison(lhs: UOp, rhs: UOp) -> Optional[UOp]:
  """sum < c over ints, made smaller: the constant moves to the right ((x + 2) < 5 is x < 3), a factor common to
  every coefficient divides out (4*x < 9 is x < 3), and terms whose sum stays in [0, g) drop when g divides both
  the other coefficients and c ((4*x + y) < 8 is x < 2 for 0 <= y < 4)."""
  if rhs.op is not Ops.CONST or not isinstance(rhs.arg, int) or not dtypes.is_int(lhs.dtype) or _reads_memory(lhs):
    return None
  terms, bound = _split_terms(lhs), rhs.arg
  constants = [t for t in terms if t.op is Ops.CONST]
  if constants and len(constants) < len(terms):
    return _sum([t for t in terms if t.op is not Ops.CONST], lhs.dtype) < bound - sum(t.arg for t in constants)
  if constants: return None
  if len(terms) == 1 and _term_coeff(terms[0])[1] == -1: return (-bound) < _term_coeff(terms[0])[0]   # -x < c
  g = _common_factor(terms)
  if g > 1: return _divide_terms(terms, g) < -((-bound) // g)   # ceil(bound / g)
  for g in sorted({abs(_term_coeff(t)[1]) for t in terms}, reverse=True):
    if g < 2 or bound % g: continue
    multiples = [t for t in terms if _term_coeff(t)[1] % g == 0]
    rest = _sum([t for t in terms if _term_coeff(t)[1] % g], lhs.dtype)
    if len(multiples) < len(terms) and rest.vmin >= 0 and rest.vmax < g:
      return _divide_terms(multiples, g) < bound // g
  return None


def _fold_where(root: UOp) -> Optional[UOp]:
  """where(c, x, y) is x or y when c is a constant, and x when both branches are the same node."""
  condition, if_true, if_false = root.src
  if if_true is if_false: return if_true
  if condition.op is Ops.CONST: return if_true if condition.arg else if_false
  return None


def _constant_to_the_right(root: UOp) -> Optional[UOp]:
  left, right = root.src
  return root.replace(src=(right, left)) if left.op is Ops.CONST and right.op is not Ops.CONST else None


# index simplification for lowering and the shape tracker: value ranges, like terms, constant divisors
def _index_folds(root: UOp) -> Optional[UOp]:
  if (out := _fold_by_range(root)) is not None: return out
  if root.op is Ops.MUL and (out := _fold_constant_products(root)) is not None: return out
  if root.op is Ops.ADD and (out := _combine_terms(root)) is not None: return out
  if root.op in (Ops.IDIV, Ops.MOD) and (out := _fold_by_constant_divisor(root)) is not None: return out
  if root.op is Ops.MAX and dtypes.is_int(root.dtype) and (out := _fold_max_by_range(*root.src)) is not None: return out
  if root.op is Ops.CMPLT and (out := _fold_comparison(*root.src)) is not None: return out
  if root.op is Ops.WHERE: return _fold_where(root)
  if root.op in GroupOp.Commutative: return _constant_to_the_right(root)
  return None


symbolic = symbolic_simple + PatternMatcher([(UPat(GroupOp.ALU, name="root"), _index_folds)])


# ***** rendering index expressions as text *****

_infix = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&",
          Ops.OR: "|", Ops.XOR: "^"}


def render_expr(u: UOp) -> str:
  """An index expression as text; every node is rendered after its sources (from the bottom: no recursion)."""
  text: dict[UOp, str] = {}
  for node in u.toposort:
    s = [text[x] for x in node.src]
    if node.op is Ops.CONST: text[node] = str(node.arg)
    elif node.op is Ops.DEFINE_VAR: text[node] = node.arg[0]
    elif node.op is Ops.BIND: text[node] = s[0]
    elif node.op is Ops.RANGE: text[node] = f"ridx{node.arg}"
    elif node.op in _infix: text[node] = f"({s[0]}{_infix[node.op]}{s[1]})"
    elif node.op is Ops.MAX: text[node] = f"max({s[0]}, {s[1]})"
    elif node.op is Ops.WHERE: text[node] = f"({s[1]} if {s[0]} else {s[2]})"
    else: text[node] = f"{node.op.name}({', '.join(s)})"
  return text[u]


ops.provide(symbolic=symbolic, render_expr=render_expr, min_max=min_max)
