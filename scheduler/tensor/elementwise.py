"""Elementwise math: the ALU ops, everything composed from them (exp, log, activations, pow, rounding),
python operators, comparisons, where, and casts.

A mixin of `Tensor`. Only a few ops reach the IR directly (EXP2, LOG2, SQRT, SIN, RECIP, the binary ALU
ops, WHERE, CAST, BITCAST); the rest are compositions, and how they are composed is what fixes kernel
counts and numerics, so the compositions below are part of the behaviour.
"""
from __future__ import annotations
import functools, math
from scheduler.dtype import dtypes, least_upper_float, to_dtype
from scheduler.ops import UOp, Ops
from scheduler.tensor.base import TensorBase

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

  # ***** unary, composed *****

  def exp(self): return self.mul(LOG2_E).exp2()
  def log(self): return self.log2() * math.log(2)
  def rsqrt(self): return self.reciprocal().sqrt()
  def cos(self): return ((math.pi / 2) - self).sin()
  def tan(self): return self.sin() / self.cos()
  def square(self): return self * self
  def sign(self): return self.ne(0).where((self < 0).where(self.full_like(-1), self.full_like(1)), self.full_like(0)) + self * 0
  def abs(self): return self * self.sign()
  def trunc(self): return self.cast(dtypes.int32).cast(self.dtype) if dtypes.is_float(self.dtype) else self

  def ceil(self):
    whole = self.trunc()
    return (self > whole).where(whole + 1, whole)

  def floor(self):
    whole = self.trunc()
    return (self < whole).where(whole - 1, whole)

  def round(self):
    """Round half to even."""
    half = self.cast(dtypes.int32) / 2.0
    even = half.cast(dtypes.int32) == half
    return ((self > 0) == even).where((self - 0.5).ceil(), (self + 0.5).floor())

  def clip(self, min_=None, max_=None):
    if min_ is None and max_ is None: raise RuntimeError("at least one of 'min_' or 'max_' must not be None")
    low = self if min_ is None else self.maximum(min_)
    return low if max_ is None else low.minimum(max_)

  def clamp(self, min_=None, max_=None): return self.clip(min_, max_)

  # activations
  def relu(self): return (self > 0).where(self, 0)
  def sigmoid(self): return (1 + (self * -LOG2_E).exp2()).reciprocal()
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5):
    line = alpha * self + beta
    return line.relu() - (line - 1).relu()
  def tanh(self): return 2.0 * (2.0 * self).sigmoid() - 1.0
  def elu(self, alpha=1.0): return self.relu() - alpha * (1 - self.exp()).relu()
  def swish(self): return self * self.sigmoid()
  def silu(self): return self.swish()
  def relu6(self): return self.relu() - (self - 6).relu()
  def gelu(self): return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self): return self * (self * 1.702).sigmoid()
  def leakyrelu(self, neg_slope=0.01): return self.relu() - (-neg_slope * self).relu()
  def softplus(self, beta=1): return (1 / beta) * (1 + (self * beta).exp()).log()
  def mish(self): return self * self.softplus().tanh()

  # ***** binary *****

  def add(self, x, reverse=False): return self._binop(Ops.ADD, x, reverse)
  def mul(self, x, reverse=False): return self._binop(Ops.MUL, x, reverse)
  def idiv(self, x, reverse=False): return self._binop(Ops.IDIV, x, reverse)
  def xor(self, x, reverse=False): return self._binop(Ops.XOR, x, reverse)
  def bitwise_and(self, x, reverse=False): return self._binop(Ops.AND, x, reverse)
  def bitwise_or(self, x, reverse=False): return self._binop(Ops.OR, x, reverse)
  def maximum(self, x): return self._binop(Ops.MAX, x)
  def ne(self, x): return self._binop(Ops.CMPNE, x)

  def sub(self, x, reverse=False):
    a, b = self._broadcasted(x, reverse)
    return a + (-b)

  def div(self, x, reverse=False, rounding_mode=None):
    """True division in float; rounding_mode 'trunc' or 'floor' rounds and keeps an int numerator's dtype."""
    top, bottom = self._broadcasted(x, reverse)
    quotient = top.cast(least_upper_float(top.dtype)) * bottom.cast(least_upper_float(bottom.dtype)).reciprocal()
    if rounding_mode is None: return quotient
    if rounding_mode not in ("trunc", "floor"): raise RuntimeError(f"rounding_mode={rounding_mode!r} is not supported")
    rounded = quotient.trunc() if rounding_mode == "trunc" else quotient.floor()
    return rounded.cast(top.dtype if dtypes.is_int(top.dtype) else quotient.dtype)

  def mod(self, x, reverse=False):
    """Python's modulo (the result has the divisor's sign), from the IR's C-style remainder."""
    a, b = self._broadcasted(x, reverse)
    rem = a._apply_uop(lambda u, v: u.alu(Ops.MOD, v), b)
    signs_differ = ((rem < 0) & (b > 0)) | ((rem > 0) & (b < 0))
    return rem + b * signs_differ

  def bitwise_not(self):
    if self.dtype != dtypes.bool and not dtypes.is_int(self.dtype): raise RuntimeError(f"{self.dtype} is not supported")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1

  def _check_shift(self, x) -> None:
    if not dtypes.is_unsigned(self.dtype) or not isinstance(x, int) or x < 0: raise RuntimeError(f"not supported self.dtype={self.dtype} x={x}")
  def lshift(self, x: int):
    self._check_shift(x)
    return self.mul(2 ** x)
  def rshift(self, x: int):
    self._check_shift(x)
    return self.idiv(2 ** x)

  def pow(self, x, reverse=False):
    if not reverse and not isinstance(x, TensorBase):
      if x == 0: return self.ones_like()
      if x == 1: return self * 1
      if x == 0.5: return self.sqrt()
      if x == -1: return self.reciprocal()
      if isinstance(x, int) and 1 < x <= 4: return functools.reduce(lambda a, b: a * b, [self] * x)
    base, exponent = self._broadcasted(x, reverse=reverse)
    if not base.is_floating_point() and not exponent.is_floating_point(): base = base.float()
    magnitude = base.abs().log().mul(exponent).exp()
    negative = (base < 0).detach().where(1, 0)
    sign = 1 + negative * ((exponent * math.pi).cos() - 1)          # (-1)^exponent for integer exponents
    nan_if_fractional = (negative * (exponent != exponent.trunc())).detach().where(math.nan, 1)
    return ((base == 0) * (exponent == 0)).detach().where(1, magnitude * sign * nan_if_fractional)

  def _inverse(self):
    """An order-reversing map: -x for floats, ~x for ints, not x for bools."""
    if self.is_floating_point(): return -self
    return ~self if dtypes.is_int(self.dtype) else self.logical_not()

  def minimum(self, x):
    a, b = self._broadcasted(x)
    return a._inverse().maximum(b._inverse())._inverse()

  def where(self, x, y):
    if isinstance(x, TensorBase): x, y = x._broadcasted(y)
    elif isinstance(y, TensorBase): y, x = y._broadcasted(x)
    condition, x = self._broadcasted(x, match_dtype=False)
    condition, y = condition._broadcasted(y, match_dtype=False)
    x, y = x._broadcasted(y)
    return condition.cast(dtypes.bool)._apply_uop(lambda c, a, b: c.alu(Ops.WHERE, a, b), x, y)

  def masked_fill(self, mask, value): return mask.where(value, self)

  # ***** comparisons (results are bool tensors) *****

  def __lt__(self, x): return self._binop(Ops.CMPLT, x)
  def __gt__(self, x): return self._binop(Ops.CMPLT, x, reverse=True)
  def __ne__(self, x): return self.ne(x)  # type: ignore[override]
  def __eq__(self, x): return self.ne(x).logical_not()  # type: ignore[override]
  def __ge__(self, x): return (self < x).logical_not()
  def __le__(self, x): return (self > x).logical_not()
  def eq(self, x): return self == x

  # ***** casts *****

  def bitcast(self, dtype):
    """Reinterpret the bytes; off DISK a size change regroups the bytes along the last axis with shifts."""
    target = to_dtype(dtype)
    if self.requires_grad: raise RuntimeError("can't backprop through bitcast")
    new, old = target.itemsize, self.dtype.itemsize
    if new != old and (not self.shape or (self.shape[-1] * old) % new != 0):
      raise RuntimeError(f"cannot bitcast {self.dtype}{list(self.shape)} to {target}: the last axis is not a whole number of {target}")
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


# python operators: name -> method, and whether the tensor is the right operand
_OPERATORS = {"add": "add", "sub": "sub", "mul": "mul", "pow": "pow", "truediv": "div", "floordiv": "idiv", "mod": "mod",
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
for _name in ("add", "sub", "mul", "truediv", "pow"): setattr(Elementwise, f"__i{_name}__", _in_place(_OPERATORS[_name]))
Elementwise.__neg__ = lambda self: self.neg()
Elementwise.__invert__ = lambda self: self.bitwise_not()
Elementwise.__lshift__ = _forward("lshift")
Elementwise.__rshift__ = _forward("rshift")
