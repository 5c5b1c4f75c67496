"""Elementwise math: the ALU ops, everything composed from them (exp, log, activations, pow, rounding),
python operators, comparisons, where, and casts.

A mixin of `Tensor`. Only a few ops reach the IR directly (EXP2, LOG2, SQRT, SIN, RECIP, the binary ALU
ops, WHERE, CAST, BITCAST); the rest are compositions, and how they are composed is what fixes kernel
counts and numerics, so the compositions below are part of the behaviour.
"""
from __future__ import annotations
import functools, math
from scheduler.dtype import MANTISSA_BITS, dtypes, least_upper_dtype, least_upper_float, to_dtype
from scheduler.ops import UOp, Ops
from scheduler.tensor.base import TensorBase, broadcast_shape

LOG2_E = 1 / math.log(2)
_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


class Elementwise:
  def _float_unary(self, build):
    """A unary IR op, computed in (at least) the default float dtype."""
    return self.cast(least_upper_float(self.dtype))._apply_uop(build)

  # ***** unary, straight to the IR *****

  def exp2(self): return self._float_unary(UOp.exp2)
  def log2(self): return self._float_unary(UOp.log2)
  def sqrt(self): return self._float_unary(UOp.sqrt)
  def sin(self): return self._float_unary(UOp.sin)
  def reciprocal(self): return self._float_unary(UOp.reciprocal)
  def contiguous(self): return self._apply_uop(UOp.contiguous)
  def contiguous_backward(self): return self._apply_uop(UOp.contiguous_backward)

  def logical_not(self):
    as_bool = self.cast(dtypes.bool)
    return as_bool._binop(Ops.CMPNE, True, reverse=True)

  def neg(self): return self.logical_not() if self.dtype == dtypes.bool else self * -1

  # ***** unary, composed (the table _COMPOSED below adds the ones without parameters) *****

  def ceil(self):
    whole = self.trunc()
    return (self > whole).where(whole + 1, whole)

  def floor(self):
    whole = self.trunc()
    return (self < whole).where(whole - 1, whole)

  def round(self):
    """Round half to even (ints round as floats)."""
    x = self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
    def half_to_even(m):
      whole = _cast_toward_zero(m)
      odd = (whole / 2.0).ceil() != (whole / 2.0).floor()
      fraction = m - whole
      return whole + ((fraction > 0.5) | ((fraction == 0.5) & odd)).cast(m.dtype)
    return _on_magnitude(x, half_to_even)

  def clip(self, min_=None, max_=None):
    if min_ is None and max_ is None: raise RuntimeError("at least one of 'min_' or 'max_' must not be None")
    out = self
    if min_ is not None: out = out.maximum(min_)
    if max_ is not None: out = out.minimum(max_)
    return out

  def clamp(self, min_=None, max_=None): return self.clip(min_=min_, max_=max_)

  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5):
    """alpha * x + beta clipped to [0, 1]: +-inf give 1 and 0, NaN stays NaN, and the gradient is 0 at the two
    corners (as torch)."""
    z = alpha * self + beta
    at_or_below, at_or_above = (z < 0) | (z == 0), (z > 1) | (z == 1)   # false for NaN (x <= y is not(x > y))
    return at_or_below.where(0, at_or_above.where(1, z))

  def elu(self, alpha=1.0):
    """x above 0, alpha * (e^x - 1) elsewhere (NaN stays NaN; `_sides`: the exponential sees only x <= 0)."""
    positive, _, lower = _sides(self)
    return positive.where(self, alpha * (lower.exp() - 1))

  def leakyrelu(self, neg_slope=0.01):
    leak = (-neg_slope * self).relu()
    return self.relu() - leak

  def softplus(self, beta=1):
    """log(1 + exp(beta x)) / beta, as z + log(1 + exp(-z)) above 0: no overflow for large z, and a gradient
    that is 0 or 1 at the extremes instead of inf * 0."""
    positive, upper, lower = _sides(self * beta)
    return (1 / beta) * positive.where(upper + (1 + (-upper).exp()).log(), (1 + lower.exp()).log())

  def logsigmoid(self):
    """log(sigmoid(x)) = -softplus(-x), finite for large |x|."""
    return -(-self).softplus()

  # bounded and smooth activations: each one expression over the ops above
  def hardtanh(self, min_val=-1, max_val=1): return self.maximum(min_val).minimum(max_val)
  def hardswish(self): return (self + 3).relu6().div(6).mul(self)
  def softsign(self): return self * (self.abs() + 1).reciprocal()

  def celu(self, alpha=1.0):
    """max(0, x) + min(0, alpha * (e^(x / alpha) - 1))."""
    below = ((self / alpha).exp() - 1) * alpha
    return self.relu() + below.minimum(0)

  def selu(self, alpha=1.67326, gamma=1.0507):
    """gamma * (alpha * (e^x - 1) below 0, x elsewhere)."""
    below = (self.exp() - 1) * alpha
    return (self < 0).detach().where(below, self) * gamma

  def erf(self):
    """The error function by Abramowitz and Stegun's rational approximation 7.1.26 (absolute error below 1.5e-7):
    1 - t (a1 + t (a2 + ... t a5)) e^(-x^2) with t = 1 / (1 + p |x|), odd in x."""
    t = 1.0 / (1.0 + 0.3275911 * self.abs())
    series = 0.0
    for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592): series = a + t * series
    return self.sign() * (1.0 - t * series * (-self.square()).exp())

  def isnan(self): return self != self
  def isinf(self, detect_positive=True, detect_negative=True):
    return ((self == float("inf")) & bool(detect_positive)) | ((self == float("-inf")) & bool(detect_negative))

  def isfinite(self): return (self.isinf() | self.isnan()).logical_not()

  def lerp(self, end, weight): return self + (end - self) * weight

  def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|self - other| <= atol + rtol |other| elementwise, exact equality included (so infinities of one sign are
    close); NaNs are close to each other only with `equal_nan`."""
    bound = atol + rtol * (other.abs() if isinstance(other, TensorBase) else abs(other))
    gap = (self - other).abs()
    # x <= y is not(x > y), which is true for NaN: compare both ways; an infinite gap (inf vs -inf) is never within
    within = ((gap < bound) | (gap == bound)) & (gap != float("inf"))
    close = (self == other) | within
    if not equal_nan: return close
    other_nan = other.isnan() if isinstance(other, TensorBase) else math.isnan(other)
    return close | (self.isnan() & other_nan)

  # ***** binary *****

  def sub(self, x, reverse=False):
    pair = self._broadcasted(x, reverse)
    return pair[0] + pair[1].neg()

  def div(self, x, reverse=False, rounding_mode=None):
    """True division in float; rounding_mode 'trunc' or 'floor' rounds and keeps an int numerator's dtype."""
    if rounding_mode not in (None, "trunc", "floor"):
      raise RuntimeError(f"rounding_mode={rounding_mode!r} is not supported")
    top, bottom = self._broadcasted(x, reverse)
    def as_float(t): return t.cast(least_upper_float(t.dtype))
    quotient = as_float(top) * as_float(bottom).reciprocal()
    if rounding_mode is None: return quotient
    rounded = quotient.floor() if rounding_mode == "floor" else quotient.trunc()
    return rounded.cast(quotient.dtype if not dtypes.is_int(top.dtype) else top.dtype)

  def mod(self, x, reverse=False):
    """Python's modulo (the result has the divisor's sign): from the IR's C-style remainder for ints, as
    a - (a // b) * b for floats (C has no float %; torch.remainder computes the same)."""
    dividend, divisor = self._broadcasted(x, reverse)
    if dtypes.is_float(dividend.dtype): return dividend._floor_division(divisor)[1]
    rem = dividend._apply_uop(lambda u, v: u.alu(Ops.MOD, v), divisor)
    fix = ((rem > 0) & (divisor < 0)) | ((rem < 0) & (divisor > 0))
    return rem + divisor * fix

  def idiv(self, x, reverse=False):
    """`a // b`: ints truncate toward zero (C's division, the reference's); floats are floored, as Python's and
    numpy's // (there is no float integer division in C: the IR's IDIV is for ints)."""
    top, bottom = self._broadcasted(x, reverse)
    if dtypes.is_float(top.dtype): return top._floor_division(bottom)[0]
    return top._binop(Ops.IDIV, bottom)

  def _floor_division(self, divisor):
    """(floor(self / divisor), the remainder) of two float tensors of one shape. `/` multiplies by the divisor's
    reciprocal, which rounds twice: at an exact multiple the product can land just past the whole number (-1785 *
    (1 / 7) is -255.00002), so the floor is one off and the remainder equals the divisor. The remainder left by the
    floor moves both back into place (exact for whole numbers the dtype holds)."""
    quotient = (self / divisor).floor()
    rest = self - quotient * divisor
    positive = divisor > 0
    # one more where the remainder reaches the divisor, one less where it has the wrong sign; strict comparisons and
    # ==, which are false for NaN (x >= y is not(x < y), true for NaN), so nothing moves where the remainder is NaN
    # (an infinite or zero divisor, an infinite dividend)
    more = (rest == divisor) | positive.where(divisor < rest, rest < divisor)
    less = positive.where(rest < 0, rest > 0)
    step = more.cast(quotient.dtype) - less.cast(quotient.dtype)
    return quotient + step, rest - step * divisor

  def bitwise_not(self):
    if self.dtype == dtypes.bool: return self.logical_not()
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"{self.dtype} is not supported")
    return self ^ -1

  def _check_shift(self, x) -> None:
    if not dtypes.is_unsigned(self.dtype) or not isinstance(x, int) or x < 0:
      raise RuntimeError(f"not supported self.dtype={self.dtype} x={x}")
  def lshift(self, x: int):
    self._check_shift(x)
    return self.mul(2 ** x)
  def rshift(self, x: int):
    self._check_shift(x)
    return self.idiv(2 ** x)

  def pow(self, x, reverse=False):
    if not reverse and isinstance(x, TensorBase) and x.lazydata.base.op is Ops.CONST and x.dtype == self.dtype and \
       broadcast_shape(self.shape, x.shape) == self.shape:
      # a constant exponent tensor is the constant: the specializations below apply, and x ** 0 is 1 with no kernel
      if x.lazydata.base.arg == 0: return self.full_like(1)
      x = x.lazydata.base.arg
    if not reverse and not isinstance(x, TensorBase):
      if x == 0:   # 1 everywhere (NaN and inf too), still a function of self: its gradient is 0, not missing
        zero = self * 0
        return zero.ne(0).where(1, zero + 1)
      if x == 1: return self * 1
      if x == 0.5: return self.sqrt()
      if x == -1: return self.reciprocal()
      if isinstance(x, int) and x > 1: return _power_by_squaring(self, x)   # x**2 one MUL, x**8 three
      if x == -0.5: return self.rsqrt()
      # at a base of 0 the log/exp path has 0/0 in its gradient: there, take a function with the same value and the
      # one-sided derivative of x^c (0 for c > 1, +inf for 0 < c < 1 like sqrt, -inf for c < 0 like rsqrt)
      base = self if self.is_floating_point() else self.float()
      at_zero = base == 0
      general, zero = at_zero.where(1, base)._pow_by_logs(x), at_zero.where(base, 1)   # each branch sees safe inputs
      near_zero = zero.sqrt() if 0 < x < 1 else zero.rsqrt() if x < 0 else base.full_like(0.0)
      if x < 0 and not (x == int(x) and int(x) % 2):   # (-0.0) ** c is +inf unless c is an odd integer
        near_zero = near_zero * (zero.reciprocal() < 0).detach().where(-1, 1)
      return at_zero.where(near_zero, general)
    if reverse and not isinstance(x, TensorBase) and x == 2: return self.exp2()   # 2 ** t is one EXP2
    return self._pow_by_logs(x, reverse)

  def _pow_by_logs(self, x, reverse=False):
    """self ** x as exp(x log |self|), negative for a negative base and an odd integer exponent, NaN for a negative
    finite base and a fractional one (C's pow: (-inf) ** 1.5 is inf)."""
    base, exponent = self._broadcasted(x, reverse=reverse)
    if not base.is_floating_point() and not exponent.is_floating_point(): base = base.float()
    magnitude = base.abs().log().mul(exponent).exp()
    negative, integral = (base < 0).detach(), (exponent == exponent.trunc()).detach()
    odd = integral & ((exponent / 2).trunc() * 2 != exponent).detach()
    signed = (negative & odd).where(-magnitude, magnitude)
    undefined = negative & integral.logical_not() & (base != -math.inf).detach()
    out = ((base == 0) & (exponent == 0)).detach().where(1, signed * undefined.where(math.nan, 1))   # NaN gradient too
    return out.cast(least_upper_dtype(base.dtype, exponent.dtype))   # the python constants above are float32

  def _inverse(self):
    """An order-reversing map: -x for floats, ~x for ints, not x for bools."""
    if self.is_floating_point(): return -self
    return ~self if dtypes.is_int(self.dtype) else self.logical_not()

  def minimum(self, x):
    """min(a, b) = inverse(max(inverse(a), inverse(b)))."""
    pair = self._broadcasted(x)
    return pair[0]._inverse().maximum(pair[1]._inverse())._inverse()

  def where(self, x, y):
    """x where self is true, else y (python numbers take the other branch's dtype)."""
    if isinstance(x, TensorBase): x, y = x._broadcasted(y)
    elif isinstance(y, TensorBase): x, y = reversed(y._broadcasted(x))
    # the condition broadcasts with each branch without changing dtypes, then the branches with each other
    cond, branches = self, []
    for branch in (x, y):
      cond, branch = cond._broadcasted(branch, match_dtype=False)
      branches.append(branch)
    on_true, on_false = branches[0]._broadcasted(branches[1])
    return cond.cast(dtypes.bool)._apply_uop(lambda c, a, b: c.alu(Ops.WHERE, a, b), on_true, on_false)

  def masked_fill(self, mask, value): return mask.where(value, self)

  # ***** comparisons (results are bool tensors) *****

  # only CMPLT and CMPNE exist: > swaps the operands, the others negate
  def __lt__(self, x): return self._binop(Ops.CMPLT, x)
  def __gt__(self, x): return self._binop(Ops.CMPLT, x, reverse=True)
  def __ne__(self, x): return self.ne(x)  # type: ignore[override]
  def __le__(self, x): return self.__gt__(x).logical_not()
  def __ge__(self, x): return self.__lt__(x).logical_not()
  def __eq__(self, x): return self.__ne__(x).logical_not()  # type: ignore[override]
  def eq(self, x): return self.__eq__(x)

  # ***** casts *****

  def bitcast(self, dtype):
    """Reinterpret the bytes; off DISK a size change regroups the bytes along the last axis with shifts."""
    target = to_dtype(dtype)
    if self.requires_grad: raise RuntimeError("can't backprop through bitcast")
    new, old = target.itemsize, self.dtype.itemsize
    if new != old and (not self.shape or (self.shape[-1] * old) % new != 0):
      raise RuntimeError(f"cannot bitcast {self.dtype}{list(self.shape)} to {target}: the last axis is not a whole "
                         f"number of {target}")
    if new != old and not self.device.startswith("DISK"):
      words = self.bitcast(_UINT_OF_SIZE[old])
      if new > old:
        parts = (words[..., k::new // old].cast(_UINT_OF_SIZE[new]) * (1 << (8 * k * old)) for k in range(new // old))
        return functools.reduce(lambda a, b: a.add(b), parts).bitcast(target)
      pieces = [words // (1 << (8 * k * new)) for k in range(old // new)]
      return pieces[0].stack(*pieces[1:], dim=-1).flatten(-2).cast(_UINT_OF_SIZE[new]).bitcast(target)
    return self if target == self.dtype else self._apply_uop(UOp.bitcast, dtype=target)

  def float(self): return self.cast(dtypes.float32)
  def half(self): return self.cast(dtypes.float16)
  def double(self): return self.cast(dtypes.float64)
  def int(self): return self.cast(dtypes.int32)
  def long(self): return self.cast(dtypes.int64)
  def bool(self): return self.cast(dtypes.bool)


def _sign(x):
  magnitude_one = (x < 0).where(x.full_like(-1), x.full_like(1))
  # NaN stays NaN (x != x only for NaN; `+ x * 0` would not do it: S13 folds x * 0 to 0)
  return x.ne(x).where(x, x.ne(0).where(magnitude_one, x.full_like(0)))


def _cast_toward_zero(x):
  return x.cast(dtypes.int64 if x.dtype.itemsize == 8 else dtypes.int32).cast(x.dtype)


def _on_magnitude(x, rounding):
  """A rounding of a float applied to |x| with the sign put back (so -0.3 rounds to -0.0, as IEEE); zeros, NaN,
  infinities and floats too large to have a fraction stay as they are (an integer cast would overflow).
  `rounding` sees only values in [0, 2^mantissa)."""
  fits = (x.abs() < 2.0 ** MANTISSA_BITS[x.dtype.scalar]) & (x != 0)
  magnitude = fits.where(x.abs(), 0)
  return fits.where(rounding(magnitude) * (x < 0).where(-1.0, 1.0).cast(x.dtype), x)


def _trunc(x):
  """Toward zero through an integer cast of |x| (see `_on_magnitude`)."""
  return _on_magnitude(x, _cast_toward_zero) if dtypes.is_float(x.dtype) else x


def _power_by_squaring(x, n: int):
  """x ** n for an integer n > 1 in O(log n) multiplies."""
  result = None
  while n > 1:
    if n & 1: result = x if result is None else result * x
    x, n = x * x, n >> 1
  return x if result is None else result * x


def _sides(x):
  """(x > 0, x where positive else 0, x where not positive else 0): a function built as a `where` over the two
  sides feeds each side's formula only its own inputs, so that neither overflows in the value or the gradient
  (inf * 0 would be NaN even in the branch not taken)."""
  positive = x > 0
  return positive, positive.where(x, 0), positive.where(0, x)


def _sigmoid(x):
  """1 / (1 + e^-x) above 0, e^x / (1 + e^x) elsewhere (`_sides`: the gradient at +-400 is 0, not NaN)."""
  positive, upper, lower = _sides(x)
  e = (lower * LOG2_E).exp2()
  return positive.where((1 + (upper * -LOG2_E).exp2()).reciprocal(), e * (1 + e).reciprocal())


def _tanh(x):
  """2 sigmoid(2x) - 1, and near 0 its series x - x^3/3 + 2x^5/15 - 17x^7/315 (the difference of the formula loses
  all of tanh(1e-30) and the sign of -0.0)."""
  square = x * x
  series = x * (1 + square * (-1 / 3 + square * (2 / 15 - square * 17 / 315)))
  return (x.abs() < 0.05).where(series, 2.0 * (2.0 * x).sigmoid() - 1.0)


def _times_gate(x, gate):
  """x * gate, with 0 where the gate is exactly 0: the limit at x = -inf, which the product would make nan."""
  return gate.ne(0).where(x * gate, 0)


def _gelu(x):
  inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
  return _times_gate(0.5 * x, 1 + inner.tanh())


# arcsine on [0, 1] as pi/2 - sqrt(1 - x) * p(x), the degree-7 polynomial of Abramowitz and Stegun 4.4.46 (|error| <=
# 2e-8): float32 exact to a few ulp without an arcsine instruction
_ASIN_COEFFS = (1.5707963050, -0.2145988016, 0.0889789874, -0.0501743046, 0.0308918810, -0.0170881256, 0.0066700901,
                -0.0012624911)


def _asin(x):
  magnitude = x.abs()
  poly = x.full_like(_ASIN_COEFFS[-1])
  for c in reversed(_ASIN_COEFFS[:-1]): poly = poly * magnitude + c
  positive = math.pi / 2 - (1 - magnitude).sqrt() * poly
  return x.sign() * positive


def _atan_unit(t): return (t * (t * t + 1).rsqrt()).asin()   # exact enough for |t| <= 1


def _atan(x):
  """atan(x) = sign(x) pi/2 - atan(1/x) beyond |x| = 1: no rounding of x/sqrt(x^2 + 1) to 1 for large x."""
  inverse = x.sign() * (math.pi / 2) - _atan_unit(x.reciprocal())
  return (x.abs() <= 1).where(_atan_unit(x), inverse)


def _asinh(x):
  magnitude = x.abs()   # log(|x| + sqrt(x^2 + 1)) with the sign outside: no cancellation for large negative x
  return x.sign() * (magnitude + (magnitude * magnitude + 1).sqrt()).log()


# composed unary ops without parameters: name -> definition in terms of other ops
_COMPOSED = {
  "asin": _asin,
  "acos": lambda x: math.pi / 2 - x.asin(),
  "atan": _atan,
  "sinh": lambda x: (x.exp() - (-x).exp()) / 2,
  "cosh": lambda x: (x.exp() + (-x).exp()) / 2,
  "asinh": _asinh,
  "acosh": lambda x: (x + (x * x - 1).sqrt()).log(),
  "atanh": lambda x: ((1 + x) / (1 - x)).log() / 2,
  "exp": lambda x: x.mul(LOG2_E).exp2(),
  "log": lambda x: x.log2() * math.log(2),
  "rsqrt": lambda x: x.sqrt().reciprocal(),   # its gradient at 0 is -inf (sqrt(1/x) would give inf * 0)
  "cos": lambda x: ((math.pi / 2) - x).sin(),
  "tan": lambda x: x.sin() / x.cos(),
  "square": lambda x: x * x,
  "sign": _sign,
  "abs": lambda x: (x == 0).where(0, (x > 0).where(x, -x)),   # abs(-0.0) is +0.0 (x * sign(x) gave -0.0)
  "trunc": _trunc,
  "relu": lambda x: (x > 0).where(x, 0),
  "relu6": lambda x: x.relu() - (x - 6).relu(),
  "sigmoid": _sigmoid,
  "tanh": _tanh,
  "swish": lambda x: x * x.sigmoid(),
  "silu": lambda x: x.swish(),
  "gelu": _gelu,
  "quick_gelu": lambda x: _times_gate(x, (x * 1.702).sigmoid()),
  "mish": lambda x: x * x.softplus().tanh(),
}
for _name, _definition in _COMPOSED.items(): setattr(Elementwise, _name, _definition)

# binary ops that are one ALU op after broadcasting: name -> op (reverse=True puts the tensor on the right)
_ONE_OP = {"add": Ops.ADD, "mul": Ops.MUL, "xor": Ops.XOR, "bitwise_and": Ops.AND,
           "bitwise_or": Ops.OR}


_BITWISE = (Ops.XOR, Ops.AND, Ops.OR)


def _one_op(op: Ops):
  def method(self, x, reverse=False):
    out = self._binop(op, x, reverse)
    # after promotion: a float on either side makes the operation float, which has no bits to combine
    if op in _BITWISE and not (dtypes.is_int(out.dtype) or out.dtype == dtypes.bool):
      raise RuntimeError(f"{out.dtype} is not supported")
    return out
  return method


for _name, _op in _ONE_OP.items(): setattr(Elementwise, _name, _one_op(_op))
Elementwise.maximum = lambda self, x: self._binop(Ops.MAX, x)
Elementwise.ne = lambda self, x: self._binop(Ops.CMPNE, x)

# python operators: name -> method, and whether the tensor is the right operand
_OPERATORS = {"add": "add", "sub": "sub", "mul": "mul", "pow": "pow", "truediv": "div", "floordiv": "idiv",
              "mod": "mod",
              "and": "bitwise_and", "or": "bitwise_or", "xor": "xor"}


def _forward(method: str):
  def operator(self, x): return getattr(self, method)(x)
  return operator


def _reflected(method: str):
  def operator(self, x): return getattr(self, method)(x, True)
  return operator


def _in_place(method: str):
  def operator(self, x): return self.assign(getattr(self, method)(x))
  return operator


for _name, _method in _OPERATORS.items():
  setattr(Elementwise, f"__{_name}__", _forward(_method))
  setattr(Elementwise, f"__r{_name}__", _reflected(_method))
for _name in ("add", "sub", "mul", "truediv", "pow"):
  setattr(Elementwise, f"__i{_name}__", _in_place(_OPERATORS[_name]))
Elementwise.__neg__ = lambda self: self.neg()
Elementwise.__invert__ = lambda self: self.bitwise_not()
Elementwise.__abs__ = lambda self: self.abs()
Elementwise.__lshift__ = _forward("lshift")
Elementwise.__rshift__ = _forward("rshift")
