"""The generator of random Tensor programs, each with its numpy oracle (see `scripts/fuzz/reference.py`).

Every decision comes from a `Choices` source (`scripts/fuzz/choices.py`). A program starts from created tensors
and applies a chain of ops from every public family: elementwise (special values, ints with negative operands),
reductions, movement chains and indexing, matmul, conv, pooling, casts across all dtypes, setitem/assign,
gradients (against finite differences in float64 and against closed-form derivatives), optimizer steps and
symbolic shapes. Shapes now and then cross the compiler's size thresholds (2^14 loop steps: -O0 kernels; 2^20:
upcast output tiles of 4x8) and use extents the lane counts do not divide.

The generator tracks, for each value, its shape, dtype, a bound on its magnitude (None: unbounded or special
values) and whether it may hold NaN, so that it only writes programs whose result is defined: no signed overflow,
no float-to-int cast of values out of range, no NaN into ops whose NaN rule differs from numpy's.
"""
from __future__ import annotations
import math, re
from dataclasses import dataclass, replace
from typing import Optional
from scripts.fuzz import reference as ref
from scripts.fuzz.program import Program, Check

# a family name -> the public ops it covers (the README's coverage table is printed from this)
FAMILIES = {
  "creation": "Tensor(data), arange, eye, full, zeros/ones, rand/randn/randint with a seed",
  "elementwise": "+ - * / // % maximum minimum comparisons where, neg exp log sqrt sin cos reciprocal abs relu sigmoid "
                 "tanh square floor ceil trunc round softplus silu exp2 log2 rsqrt hardsigmoid gelu quick_gelu elu "
                 "sign "
                 "(NaN, +-inf, -0.0, huge, tiny; ints with negative operands)",
  "reduction": "sum prod mean max min over any axes, keepdim; argmax",
  "movement": "reshape permute expand pad (constant, reflect, replicate, circular, negative) shrink flip cat stack, "
              "chains",
  "scan": "cumsum, cummax, cumprod, cummin along any axis (also beyond the 256-element block)",
  "gather/interpolate": "gather with an int index tensor; interpolate nearest, nearest-exact, linear (align_corners)",
  "power": "x ** c for c in 2, 3, 5, 0.5, 1.5, 2.5, 0, -0.5, -1, -2",
  "einsum": "contractions, outer products, sums and transposes of one or two operands",
  "indexing": "__getitem__ with ints, slices with steps and negative steps, None, Ellipsis, an int tensor, down to a "
              "scalar",
  "matmul": "@ and dot of 1-d, 2-d and batched operands",
  "conv": "conv2d with stride, padding, dilation, groups",
  "pooling": "max_pool2d, avg_pool2d with stride, padding, count_include_pad",
  "cast": "cast between all 12 dtypes, dtype promotion of mixed operands",
  "setitem": "__setitem__ and assign into realized tensors",
  "gradient": "gradient() of chains of differentiable ops, conv and pooling included (finite differences, float64); "
              "unary derivatives at special values",
  "optimizer": "SGD (momentum, nesterov, weight decay) and Adam/AdamW steps",
  "symbolic": "Variable-bound shrink and reshape, reductions over a symbolic extent",
}


@dataclass(frozen=True)
class Value:
  name: str
  shape: tuple
  dtype: str
  bound: Optional[float]      # max |x| if every element is finite and known to be at most this, else None
  nan: bool = False           # may hold NaN
  terms: int = 1              # how many input terms a single element sums (scales the float tolerance)
  # the magnitude whose rounding error this value carries (sin of a large argument: the argument)
  scale: float = 1.0
  rtol: float = 0.0           # the coarsest relative precision of any dtype it was computed in (float16, then cast up)
  zero_constant: bool = False # may derive from a constant 0 (zeros, full(0), a 0-d special): 0 * x folds to 0 (S13)
  zero_sign: bool = False     # the sign of its zeros is not defined: a sum of -0.0 terms may start from +0.0
  huge: bool = False          # may hold finite values near the dtype's largest (a special input's): a sum of them
                              # cancels to anything within their rounding (big + -2.5 + -big is 0 in float32)
  overflows: bool = False     # summed from huge values: a partial sum may pass the largest finite value before the
                              # terms cancel (4 terms of a special input's max / 4 do), so an infinity or NaN stands
                              # where the reference ends finite (seed 180:599: inf against 3.15e38)
  integral: bool = False      # a float whose every element is a whole number the dtype holds exactly (floor of a
                              # bounded value): % and // of such values are exact, away from their jumps
  faint: bool = False         # may hold elements within rounding of zero whose sign, or whether they are zero at all,
                              # the dtype does not decide: gelu of a large negative input is a tiny negative, and the
                              # device's tanh saturates it to 0 (seed 199:599: gelu(x) ** 1.5, NaN against 0)
  inexact: bool = False       # computed by an op the device rounds otherwise than the reference (a transcendental, a
                              # root or power, a sum in another order): elements may differ by a unit in the last place
  lossy_zero: bool = False    # its elements near zero carry a large relative error: elu computes e^x - 1, which near
                              # x = 0 subtracts nearly equal values, and the reference does not (seed 174:299:
                              # elu(x).reciprocal() @ w, 545.37 against 545.52)
  near_one: bool = False      # may hold elements within rounding of 1 on either side: sigmoid of a large input rounds
                              # to 1 on the device and to the float below it in the reference, so its log is 0 or a
                              # tiny negative (seed 194:48: sqrt(log2(sigmoid(x))), 0 against NaN)


def _numel(shape: tuple) -> int: return math.prod(shape)


# below this magnitude every whole number is exact in the float dtype (its mantissa's bits)
EXACT_WHOLE = {"float16": 2.0 ** 11, "bfloat16": 2.0 ** 8, "float32": 2.0 ** 24, "float64": 2.0 ** 53}


def _exact(bound: Optional[float], dtype: str) -> bool:
  return bound is not None and bound < EXACT_WHOLE.get(dtype, 0.0)


# gelu, quick_gelu and silu of inputs beyond these magnitudes may come out as 0 where the exact value is a tiny
# negative (gelu's 1 + tanh(y) loses everything below the dtype's epsilon), and sigmoid as 0 where it is a tiny positive
FAINT_FROM = {"float16": 2.0, "bfloat16": 1.5, "float32": 4.0, "float64": 6.0}
SIGMOID_UNDERFLOW = {"float16": 10.0, "bfloat16": 80.0, "float32": 80.0, "float64": 700.0}
# what a value near zero has no say in: these map all of it to about one value away from zero
_CLEARS_FAINT = frozenset({"exp", "exp2", "cos", "sigmoid", "hardsigmoid", "softplus"})
# what a value near zero decides by its sign or by being zero (NaN or a real, -inf or a real, -1, 0 or 1)
_FAINT_SENSITIVE = frozenset({"log", "log2", "sqrt", "rsqrt", "reciprocal", "floor", "ceil", "trunc", "round", "sign"})


# sigmoid of inputs beyond these may round to 1 or to the float below it, the device and the reference differently
# (1 - sigmoid(x) is about exp(-x), half the spacing of floats below 1 at x = 17.3 in float32); tanh from half of them
NEAR_ONE_FROM = {"float16": 6.0, "bfloat16": 4.0, "float32": 14.0, "float64": 34.0}
# what keeps an element's value: moves, selections, casts
_KEEPS_VALUES = frozenset({"reshape", "transpose", "permute", "expand", "pad", "shrink", "flip", "cat", "stack",
                           "getitem", "gather", "interpolate", "cast", "max", "min", "cummax", "cummin", "where",
                           "maximum", "minimum", "relu", "abs"})
_KEEPS_RELATIVE_ERROR = _KEEPS_VALUES | {"neg", "mul"}   # and scaling


# ops the device rounds otherwise than the reference, which computes in float64 and rounds once: its own transcendental
# functions, powers by exp2 and log2, sums in another order (+, -, *, /, sqrt and casts round alike on both sides)
_ROUNDS_OTHERWISE = frozenset({"exp", "exp2", "log", "log2", "rsqrt", "sin", "cos", "tanh", "sigmoid",
                               "hardsigmoid", "softplus", "silu", "gelu", "quick_gelu", "elu", "pow", "sum", "mean",
                               "prod", "matmul", "einsum", "conv2d", "avg_pool2d", "cumsum", "cumprod", "interpolate"})


def _rounding_decides(v: Optional["Value"]) -> bool:
  """Whether comparing v with a value near it, or rounding it to a whole number, is decided by rounding: a float16 or
  bfloat16 value one unit in the last place apart on the device and in the reference (1 in 1,024 of the values of an
  octave), where a partner of the same dtype, or a whole number, lands between the two (seed 204:824: x ** -0.5 > y,
  one of 16,383 flipped)."""
  # a float16 value cast up keeps its float16 rounding (`rtol`: the coarsest precision it was computed in)
  return v is not None and v.inexact and (v.dtype in ("float16", "bfloat16") or v.rtol >= ref.tolerance("float16")[0])


def _near_one_after(op: str, x: "Value", dtype: str) -> bool:
  """Whether unary `op` of x may leave elements within rounding of 1 whose side of it the dtype does not decide."""
  start = NEAR_ONE_FROM.get(dtype, 4.0)
  if op == "sigmoid": return x.bound is None or x.bound > start
  if op == "tanh": return x.bound is None or x.bound > start / 2
  return op in ("exp", "exp2") and x.faint   # exp of a tiny negative is below 1, of 0 it is 1


# ops whose result can be larger than their operands: past the dtype's largest finite value, an infinity
_GROWS = frozenset({"exp", "exp2", "square", "softplus", "pow", "add", "sub", "mul", "sum", "prod", "matmul",
                    "einsum", "conv2d", "cumsum", "cumprod"})


def _faint_after(op: str, x: "Value", dtype: str) -> bool:
  """Whether unary `op` of x may leave elements within rounding of zero whose sign the dtype does not decide."""
  if op in ("log", "log2") and x.near_one: return True
  if not ref.is_float(dtype): return False
  if op in ("gelu", "quick_gelu", "silu"): return x.bound is None or x.bound > FAINT_FROM.get(dtype, 2.0)
  if op == "sigmoid": return x.bound is None or x.bound > SIGMOID_UNDERFLOW.get(dtype, 10.0)
  return False


def _arbitrary(v: Value) -> bool:
  """Whether a float value's elements can be anything in their range (sin of an unbounded argument): a comparison or an
  argmax of it is decided by rounding, not by the program."""
  return ref.is_float(v.dtype) and math.isinf(v.scale)


def _whole_in(v: Optional[Value], dtype: str) -> bool:
  """Whether every element of v is a whole number that float `dtype` holds exactly: an integral float, or an int."""
  return v is not None and _exact(v.bound, dtype) and (v.integral or ref.is_int(v.dtype) or v.dtype == "bool")


class Builder:
  """Writes one program: values are named t0, t1, ... on the Tensor side and n0, n1, ... on the numpy side."""
  def __init__(self, c, family: str):
    self.c, self.program, self.values, self.seed = c, Program(family), [], 0
    self.special_inputs = True   # off where the oracle needs finite inputs (finite differences)

  def new(self, shape, dtype, bound, nan=False, terms=1, scale=1.0) -> Value:
    v = Value(f"{len(self.values)}", tuple(shape), dtype, bound, nan, terms, scale, ref.tolerance(dtype)[0])
    self.values.append(v)
    self.program.dtypes.add(dtype)
    return v

  def empty_sum(self, v: Value) -> Value:
    """v sums over no element: the compiler makes it the constant 0, which folds 0 * x to 0 (S13)."""
    v = self.values[int(v.name)] = replace(v, zero_constant=True)
    return v

  def emit(self, v: Value, tensor_expr: str, numpy_expr: str, op: str) -> Value:
    self.program.add(f"t{v.name} = {tensor_expr}", f"n{v.name} = {numpy_expr}")
    self.program.ops.add(op)
    # rounding error carried from the operands (sin of a large argument keeps the argument's scale, see unary)
    operands = [self.values[int(n)] for n in re.findall(r"\bt(\d+)\b", tensor_expr)]
    scale, rtol = max([v.scale] + [o.scale for o in operands]), max([v.rtol] + [o.rtol for o in operands])
    zero = v.zero_constant or any(o.zero_constant for o in operands)
    summed = ("sum", "mean", "matmul", "conv2d", "avg_pool2d", "gather", "einsum", "cumsum") # one-hot sums, too
    # interpolate selects through gather's sum too: a -0.0 comes out +0.0 (seed 190:2304, then ** -0.5)
    sign = v.zero_sign or any(o.zero_sign for o in operands) or op in summed or op == "interpolate" or \
      "Tensor([" in tensor_expr
    # a value of unknown magnitude stays huge; a sum of huge terms carries their rounding error (seed 167:2399)
    huge_operands = [o for o in operands if o.huge and ref.is_float(o.dtype)]
    huge = (v.huge or bool(huge_operands)) and v.bound is None
    if op in summed and huge_operands:
      scale = max([scale] + [ref.special_big(o.dtype) for o in huge_operands])
    # bounded operands whose result may pass the dtype's largest finite value: rounding decides, element by element,
    # between a finite value and an infinity, and the device's rounding differs from the reference's (seed 201:519:
    # 9.19 ** 5 is 65,500 in float16, 9.195 ** 5 is inf). A float16 bound past 60,000 is dropped where it is found.
    edge = op in _GROWS and bool(operands) and all(o.bound is not None for o in operands) and \
      ((v.bound is None and v.dtype == "float16") or (v.bound is not None and v.bound > ref.largest(v.dtype)))
    overflows = ref.is_float(v.dtype) and (v.overflows or any(o.overflows for o in operands)
                                           or (op in summed and bool(huge_operands)) or edge)
    # near-zero elements of unknown sign stay so through what moves, scales, sums or casts them
    faint = ref.is_float(v.dtype) and (v.faint or (op not in _CLEARS_FAINT and any(o.faint for o in operands)))
    inexact = ref.is_float(v.dtype) and (v.inexact or op in _ROUNDS_OTHERWISE or any(o.inexact for o in operands))
    # and so do the relative errors of lossy zeros, which scaling keeps too
    lossy = ref.is_float(v.dtype) and (v.lossy_zero or op == "elu" or
                                       (op in _KEEPS_RELATIVE_ERROR and any(o.lossy_zero for o in operands)))
    # near-one elements stay so through what moves, selects or casts them
    near_one = ref.is_float(v.dtype) and (v.near_one or (op in _KEEPS_VALUES and any(o.near_one for o in operands)))
    if (scale, rtol, zero, sign, huge, overflows, faint, inexact, lossy, near_one) != \
        (v.scale, v.rtol, v.zero_constant, v.zero_sign, v.huge, v.overflows, v.faint, v.inexact, v.lossy_zero,
         v.near_one):
      self.values[int(v.name)] = v = replace(v, scale=scale, rtol=rtol, zero_constant=zero, zero_sign=sign, huge=huge,
                                             overflows=overflows, faint=faint, inexact=inexact, lossy_zero=lossy,
                                             near_one=near_one)
    return v

  # ***** shapes *****

  def shape(self, max_rank: int = 4, big: bool = True) -> tuple:
    c = self.c
    if big and c.boolean(0.04):   # across the size thresholds: ~2^14, ~2^20 elements, odd extents
      return c.choice([(129, 127), (1 << 14,), ((1 << 14) + 3,), (1031, 1017), (33, 37, 41), (4, 1 << 18)])
    rank = c.integer(0, max_rank)
    return tuple(c.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17]) if c.boolean(0.3)
                 else c.integer(1, 4) for _ in range(rank))

  def dtype(self, floats_only: bool = False) -> str:
    if floats_only or self.c.boolean(0.55): return self.c.choice(["float32", "float32", "float16", "float64"])
    return self.c.choice(list(ref.DTYPES))

  # ***** creation *****

  def input(self, shape=None, dtype=None, kind=None, requires_grad=False) -> Value:
    c = self.c
    shape = self.shape() if shape is None else shape
    dtype = self.dtype() if dtype is None else dtype
    if kind is None: kind = "special" if self.special_inputs and c.boolean(0.15) and dtype != "bool" else "normal"
    self.seed += 1
    if ref.is_float(dtype): bound = None if kind == "special" else 3.0
    elif dtype == "bool": bound = 1.0
    else: bound = float(max(abs(x) for x in ref.int_range(dtype))) if kind == "special" else 9.0
    v = self.new(shape, dtype, bound, nan=kind == "special" and ref.is_float(dtype))
    if kind == "special" and ref.is_float(dtype): v = self.values[-1] = replace(v, huge=True)
    # a 0-d input is a constant of the graph: one that may be 0 (an int, a bool, a special float) or +-inf (whose
    # reciprocal is 0) folds x * 0 to 0
    if shape == () and (kind == "special" or not ref.is_float(dtype)):
      v = self.values[-1] = replace(v, zero_constant=True)
    data = f"ref.data({shape!r}, {dtype!r}, seed={self.seed}, kind={kind!r})"
    grad = ", requires_grad=True" if requires_grad else ""
    return self.emit(v, f"Tensor({data}, dtype=dtypes.{dtype}, device=DEV{grad})", data, "Tensor")

  def created(self) -> Value:
    """A tensor from one of the creation functions."""
    c = self.c
    what = c.choice(["data", "data", "data", "arange", "eye", "full", "zeros", "rand", "randint"])
    if what == "data": return self.input()
    if what == "arange":
      start, stop, step = c.integer(-5, 5), c.integer(-5, 40), c.choice([1, 1, 2, 3, -1, -2])
      count = max(0, -(-(stop - start) // step))
      if count == 0: stop, step, count = start + 4, 1, 4
      dtype = c.choice(["int32", "float32"])
      v = self.new((count,), dtype, float(max(abs(start), abs(stop)) + abs(step)))
      return self.emit(v, f"Tensor.arange({start}, {stop}, {step}, dtype=dtypes.{dtype}, device=DEV)",
                       f"np.arange({start}, {stop}, {step}).astype({dtype!r})", "arange")
    if what == "eye":
      n, m = c.integer(1, 6), c.integer(1, 6)
      v = self.new((n, m), "float32", 1.0)
      return self.emit(v, f"Tensor.eye({n}, {m}, device=DEV)", f"np.eye({n}, {m}, dtype='float32')", "eye")
    if what in ("full", "zeros"):
      shape, dtype = self.shape(), self.dtype()
      value = 0 if what == "zeros" else (c.choice([2.5, -1.0, 7.0]) if ref.is_float(dtype) else c.integer(-3, 3)
                                         if dtype != "bool" else True)
      if dtype != "bool" and ref.is_int(dtype) and dtype.startswith("u"): value = abs(value)
      v = replace(self.new(shape, dtype, float(abs(value))), zero_constant=value == 0)
      self.values[-1] = v
      call = f"Tensor.zeros({shape!r}, dtype=dtypes.{dtype}, device=DEV)" if what == "zeros" else \
        f"Tensor.full({shape!r}, {value!r}, dtype=dtypes.{dtype}, device=DEV)"
      return self.emit(v, call, f"np.full({shape!r}, {value!r}, dtype={dtype!r})", what)
    shape = self.shape(big=False)
    self.seed += 1
    if what == "rand":
      v = self.new(shape, "float32", 1.0)
      self.emit(v, f"(Tensor.manual_seed({self.seed}), Tensor.rand(*{shape!r}, device=DEV))[1]",
                f"ref.uniform_like(t{v.name}.numpy())", "rand")
    else:
      v = self.new(shape, "int32", 9.0)
      self.emit(v, f"(Tensor.manual_seed({self.seed}), Tensor.randint(*{shape!r}, low=-3, high=9, device=DEV))[1]",
                f"ref.in_range(t{v.name}.numpy(), -3, 8)", "randint")
    self.program.checks.append(Check(f"t{v.name}", "", v.dtype, across_devices=True))
    return v

  # ***** ops on a value *****

  def step(self, x: Value) -> Value:
    families = [self.unary, self.unary, self.binary, self.binary, self.binary, self.reduce, self.movement,
                self.movement,
                self.index, self.cast]
    if len(x.shape) >= 1 and ref.is_float(x.dtype): families += [self.matmul, self.einsum]
    if x.shape and 0 not in x.shape: families += [self.gather]
    # a scan visits numel * 256 positions: on the PYTHON device a cumsum of 2^21 elements takes a minute
    if x.shape and 0 not in x.shape and _numel(x.shape) <= (1 << 16): families += [self.scan]
    if ref.is_float(x.dtype): families += [self.power]
    if len(x.shape) >= 3 and 0 not in x.shape and ref.is_float(x.dtype) and x.dtype != "float16":
      families += [self.interpolate]
    if len(x.shape) == 4 and 0 not in x.shape and ref.is_float(x.dtype) and x.bound is not None:
      families += [self.conv, self.pool] * 4
    return self.c.choice(families)(x)

  def unary(self, x: Value) -> Value:
    c = self.c
    ops = ["neg", "exp", "log", "sqrt", "sin", "cos", "reciprocal", "abs", "sigmoid", "tanh", "square", "floor", "ceil",
           "trunc", "round", "softplus", "silu", "exp2", "log2", "rsqrt", "hardsigmoid", "gelu", "quick_gelu", "elu",
           "sign"]
    if not x.nan: ops.append("relu")
    # 1/+0 and 1/-0 differ; and 1/x makes the relative error of a lossy zero absolute
    if x.zero_sign or x.lossy_zero: ops = [o for o in ops if o not in ("reciprocal", "rsqrt")]
    # rounding a low-precision value one unit apart on the two sides to a whole number jumps where that unit crosses one
    if _rounding_decides(x): ops = [o for o in ops if o not in ("floor", "ceil", "trunc", "round")]
    if x.faint: ops = [o for o in ops if o not in _FAINT_SENSITIVE]
    if ref.is_int(x.dtype) or x.dtype == "bool":
      ops = ["neg", "abs"] if x.dtype not in ("bool",) and not x.dtype.startswith("u") and x.bound is not None and \
        x.bound < ref.int_range(x.dtype)[1] else ["exp", "sqrt", "sin"]
      if x.dtype == "bool": ops = ["exp", "sin"]
    op = c.choice(ops)
    out = x.dtype if ref.is_float(x.dtype) or op in ("neg", "abs") else "float32"
    bounded = {"neg": x.bound, "abs": x.bound, "sin": 1.0, "cos": 1.0, "sigmoid": 1.0, "tanh": 1.0, "hardsigmoid": 1.0,
               "sign": 1.0, "floor": None if x.bound is None else x.bound + 1, "ceil": None if x.bound is None
               else x.bound + 1,
               "trunc": x.bound, "round": None if x.bound is None else x.bound + 1,
               "relu": x.bound, "square": None if x.bound is None else x.bound ** 2}
    bound = bounded.get(op)
    if op in ("exp", "exp2") and x.bound is not None and x.bound <= 10: bound = math.exp(x.bound)
    if op in ("softplus", "silu", "gelu", "quick_gelu", "elu") and x.bound is not None: bound = x.bound + 1
    domain_safe = op not in ("log", "sqrt", "reciprocal", "log2", "rsqrt")
    nan = x.nan or not domain_safe or (op in ("sin", "cos") and x.bound is None)
    if out == "float16" and bound is not None and bound > 60000: bound = None
    # sin/cos of a large argument carry the argument's rounding error, exp multiplies it by the result
    carried = max(x.scale, x.bound if x.bound is not None else math.inf)   # sin(1e37) can be anything in [-1, 1]
    scale = {"sin": carried, "cos": carried, "exp": carried * (bound or 1e3),
             "exp2": carried * (bound or 1e3)}.get(op, bound or 1.0)
    v = self.new(x.shape, out, bound if not nan else None, nan=nan, terms=x.terms, scale=scale)
    if _faint_after(op, x, out): v = self.values[int(v.name)] = replace(v, faint=True)
    if _near_one_after(op, x, out): v = self.values[int(v.name)] = replace(v, near_one=True)
    if op in ("floor", "ceil", "trunc", "round") and not nan and _exact(v.bound, out):
      v = self.values[int(v.name)] = replace(v, integral=True)
    return self.emit(v, f"t{x.name}.{op}()", f"ref.unary({op!r}, n{x.name}, {out!r})", op)

  def partner(self, x: Value, dtype: Optional[str] = None) -> Value:
    """Another operand broadcastable with x: a new input of x's shape (or a suffix of it with some 1s)."""
    c = self.c
    shape = list(x.shape[c.integer(0, len(x.shape)):]) if x.shape else []
    shape = [1 if c.boolean(0.25) else s for s in shape]
    kind = "special" if self.special_inputs and c.boolean(0.1) else "normal"
    return self.input(tuple(shape), dtype or (x.dtype if c.boolean(0.6) else self.dtype()), kind=kind if dtype != "bool"
                      else "normal")

  def binary(self, x: Value) -> Value:
    c = self.c
    scalar = c.boolean(0.3)
    if scalar:
      value = c.choice([2, -3, 0, 1]) if c.boolean(0.5) else c.choice([0.5, -1.25, 3.0])
      y = None
      other_dtype = ("int32" if isinstance(value, int) else "float32")
      other_bound = float(abs(value))
    else:
      y = self.partner(x)
      other_dtype, other_bound = y.dtype, y.bound
    # a python scalar takes the tensor's dtype unless the tensor is an int/bool and the scalar a float
    if scalar: out_base = x.dtype if (isinstance(value, int) and x.dtype != "bool") or ref.is_float(x.dtype) else \
      ("float32" if isinstance(value, float) else "int32")
    else: out_base = ref.promote(x.dtype, other_dtype)
    ops = ["add", "sub", "mul", "lt", "eq", "ne", "gt"]
    if ref.is_float(out_base): ops += ["div", "maximum", "minimum", "where"]
    elif out_base != "bool": ops += ["idiv", "mod", "div", "maximum", "minimum", "where", "xor"]
    else: ops += ["where", "xor"]
    # float % and // jump at every multiple of the divisor: only of whole numbers, which they divide exactly
    whole = ref.is_float(out_base) and _whole_in(x, out_base) and \
      (float(value).is_integer() if scalar else _whole_in(y, out_base))
    if whole: ops += ["idiv", "mod"]
    op = c.choice(ops)
    if op in ("maximum", "minimum") and (x.nan or (y is not None and y.nan)): op = "add"
    # a constant 0 times NaN or inf is folded to 0 (S13), and x / c is x * (1 / c)
    if op in ("mul", "div") and (x.zero_constant or (y is not None and y.zero_constant)): op = "add"
    # and x * 0 folds to 0 where x is NaN or inf too (S13; seed 167: -log(0) * 0): a literal 0 multiplies finite values
    if op == "mul" and scalar and value == 0 and ref.is_float(out_base) and (x.nan or x.bound is None): op = "add"
    # float x % c is x - (x // c) * c, and a constant c of 0 folds the product to 0 (S13): x % 0 is x where a tensor of
    # zeros gives NaN (seed 194:1928); a 0-d tensor is a constant too. Floor division by them is defined alike.
    if op == "mod" and ref.is_float(out_base) and ((scalar and value == 0) or
                                                   (y is not None and (y.zero_constant or y.shape == ()))): op = "idiv"
    # sin or cos of an unbounded value can be anything in [-1, 1] (scale inf): what compares it decides by rounding
    # (seed 193:2427: sin(rsqrt(x)) < t, one of 16,387 flipped)
    if op in ("lt", "eq", "ne", "gt", "where") and (_arbitrary(x) or (op != "where" and y is not None and
                                                                      _arbitrary(y))): op = "add"
    # a near-zero element of unknown sign compares with 0 (or a near-zero partner) by rounding, and divides into an
    # infinity or a huge value of either sign
    if op in ("lt", "eq", "ne", "gt") and (x.faint or (y is not None and y.faint)): op = "add"
    if (op in ("lt", "eq", "ne", "gt") and (_rounding_decides(x) or _rounding_decides(y))) or \
        (op == "where" and _rounding_decides(x)): op = "add"   # where compares x with 0.25
    if op == "div" and (x.faint or (y is not None and y.faint)): op = "mul"   # and a faint x / 0: -inf against NaN
    if op == "div" and y is not None and y.lossy_zero: op = "mul"
    if op == "mul" and y is not None and ((x.faint and y.bound is None) or (y.faint and x.bound is None)):
      op = "add"   # times an infinity: -inf against NaN
    if out_base == "bool" and op in ("add", "sub"): op = "xor"   # bool + and - are logic ops (or, xor), not numpy's
    rhs = repr(value) if scalar else f"t{y.name}"
    nrhs = f"ref.cast(np.array({value!r}), {out_base!r})" if scalar else f"n{y.name}"
    if op in ("lt", "eq", "ne", "gt"):
      sym = {"lt": "<", "eq": "==", "ne": "!=", "gt": ">"}[op]
      v = self.new(self._bshape(x, y), "bool", 1.0)
      if scalar:
        return self.emit(v, f"(t{x.name} {sym} {rhs})",
                         f"ref.binary({op!r}, ref.cast(n{x.name}, {out_base!r}), {nrhs}, 'bool')", op)
      return self.emit(v, f"(t{x.name} {sym} {rhs})", f"ref.binary({op!r}, n{x.name}, {nrhs}, 'bool')", op)
    if op == "where":
      cond = self.new(x.shape, "bool", 1.0)
      threshold = "0" if ref.is_int(x.dtype) or x.dtype == "bool" else "0.25"
      self.emit(cond, f"(t{x.name} > {threshold})", f"(ref.cast(n{x.name}, 'float64') > {threshold})", "gt")
      bound = None if x.bound is None or other_bound is None else max(x.bound, other_bound)
      v = self.new(self._bshape(x, y), out_base, bound, nan=x.nan or (y is not None and y.nan))
      return self.emit(v, f"t{cond.name}.where(t{x.name}, {rhs})",
                       f"np.where(n{cond.name}, ref.cast(n{x.name}, {out_base!r}), ref.cast({nrhs}, {out_base!r}))",
                       "where")
    out = ref.float_of(out_base) if op == "div" else out_base
    bound = self._binary_bound(op, x.bound, other_bound, out)
    if bound is None and ref.is_int(out) and not out.startswith("u") and op not in ("xor",):
      op, bound = "xor", self._int_max(out)
    if bound is None and out.startswith("u"): bound = self._int_max(out)   # unsigned wraps: defined
    if op == "xor" and not (ref.is_int(out) or out == "bool"): op = "add"
    # a float divisor may be 0 (x // 0 is an infinity, x % 0 NaN) unless it is a literal other than 0
    by_zero = op == "div" or (op in ("idiv", "mod") and (not scalar or value == 0))
    nan = ref.is_float(out) and (x.nan or (y is not None and y.nan) or bound is None or by_zero)
    v = self.new(self._bshape(x, y), out, None if nan else bound, nan=nan,
                 terms=max(x.terms, 1 if y is None else y.terms))
    if op in ("idiv", "mod") and ref.is_float(out):   # -0.0 % 3 is -0.0 in numpy, 0.0 on the devices
      v = self.values[int(v.name)] = replace(v, zero_sign=True, integral=not nan and _exact(v.bound, out))
    sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "//", "mod": "%", "xor": "^"}.get(op)
    tensor = f"(t{x.name} {sym} {rhs})" if sym else f"t{x.name}.{op}({rhs})"
    return self.emit(v, tensor, f"ref.binary({op!r}, n{x.name}, {nrhs}, {out!r})", op)

  def _int_max(self, dtype: str) -> float: return float(ref.int_range(dtype)[1])

  def _binary_bound(self, op: str, a, b, out: str):
    if a is None or b is None: return None
    limit = self._int_max(out) if ref.is_int(out) else (60000.0 if out == "float16" else 1e30)
    value = {"add": a + b, "sub": a + b, "mul": a * b, "div": None, "idiv": a, "mod": b, "maximum": max(a, b),
             "minimum": max(a, b), "xor": None}[op]
    if op == "xor" and ref.is_int(out): value = self._int_max(out)
    return value if value is not None and value < limit else None

  @staticmethod
  def _bshape(x: Value, y: Optional[Value]) -> tuple:
    if y is None: return x.shape
    a, b = list(x.shape), list(y.shape)
    a, b = [1] * (len(b) - len(a)) + a, [1] * (len(a) - len(b)) + b
    return tuple(q if p == 1 else p for p, q in zip(a, b))

  def reduce(self, x: Value) -> Value:
    c = self.c
    if not x.shape: return self.unary(x)
    axes = tuple(a for a in range(len(x.shape)) if c.boolean(0.5)) or (c.integer(0, len(x.shape) - 1),)
    axis_arg = None if len(axes) == len(x.shape) and c.boolean(0.5) else (axes if len(axes) > 1 else axes[0])
    keepdim = c.boolean(0.3)
    reduced = [a for a in range(len(x.shape)) if axis_arg is None or a in axes]
    count = _numel(tuple(x.shape[a] for a in reduced))
    shape = tuple((1 if a in reduced else s) for a, s in enumerate(x.shape) if keepdim or a not in reduced)
    ops = ["sum", "sum", "mean"] + ([] if count == 0 else ["argmax"]) + \
      ([] if x.nan or count == 0 else ["max", "min", "prod"])
    op = c.choice(ops)
    magnitude = None if x.bound is None else count * math.log10(max(x.bound, 1.0))   # log10 of the product's bound
    if op == "prod" and (magnitude is None or magnitude > 30
                         or (ref.is_int(ref.sum_dtype(x.dtype)) and magnitude > 15)):
      op = "sum"
    if op == "argmax" and (not isinstance(axis_arg, int) or x.dtype == "bool" or _arbitrary(x) or x.faint
                           or _rounding_decides(x)): op = "sum"
    # argmax counts down an arange along the axis, which the PYTHON device sums in n^2 positions (seed 203:105: an
    # argmax over 262,144 ran for minutes), as gather's one-hot mask does
    if op == "argmax" and x.shape[axis_arg] > 4096: op = "sum"
    int_sum = op == "sum" and ref.is_int(ref.sum_dtype(x.dtype))
    if int_sum and (x.bound is None or x.bound * count > self._int_max(ref.sum_dtype(x.dtype))):
      op = "max" if not x.nan and count > 0 else "mean"
    kd = f", keepdim={keepdim}" if keepdim else ""
    ax = f"axis={axis_arg!r}"
    npax = "None" if axis_arg is None else repr(axis_arg)
    if op == "argmax":
      v = self.new(shape, "int32", float(x.shape[axis_arg]))
      return self.emit(v, f"t{x.name}.argmax({ax}{kd})",
                       f"ref.argmax(n{x.name}, {axis_arg}, {keepdim})", "argmax")
    if op in ("max", "min"):
      v = self.new(shape, x.dtype, x.bound, nan=x.nan, terms=x.terms)
      fn = "np.max" if op == "max" else "np.min"
      return self.emit(v, f"t{x.name}.{op}({ax}{kd})", f"np.asarray({fn}(n{x.name}, axis={npax}, keepdims={keepdim}))",
                       op)
    out = ref.sum_dtype(x.dtype) if op != "mean" else ref.float_of(x.dtype)
    if op == "prod": out = x.dtype if x.dtype != "bool" else "bool"
    bound = None if x.bound is None else (x.bound * count if op == "sum" else x.bound if op == "mean"
                                          else max(x.bound, 1.0) ** count)
    if bound is not None and out == "float16" and bound > 60000: bound = None
    nan = ref.is_float(out) and (x.nan or bound is None or (op == "mean" and count == 0))   # 0 / 0
    v = self.new(shape, out, None if nan else bound, nan=nan, terms=x.terms * count)
    if op == "sum" and count == 0: v = self.empty_sum(v)
    return self.emit(v, f"t{x.name}.{op}({ax}{kd})", f"ref.{op}_(n{x.name}, {npax}, {keepdim}, {out!r})", op)

  def movement(self, x: Value) -> Value:
    c = self.c
    kinds = ["reshape", "permute", "expand", "pad", "shrink", "flip", "cat", "stack", "transpose"]
    kind = c.choice(kinds)
    shape = x.shape
    if kind == "reshape":
      new = self._refactor(_numel(shape))
      return self.emit(self.new(new, x.dtype, x.bound, x.nan, x.terms), f"t{x.name}.reshape({new!r})",
                       f"n{x.name}.reshape({new!r})", "reshape")
    if kind in ("permute", "transpose") and len(shape) >= 2:
      if kind == "transpose":
        a, b = c.integer(-len(shape), len(shape) - 1), c.integer(-len(shape), len(shape) - 1)
        new = list(shape); new[a], new[b] = shape[b], shape[a]
        return self.emit(self.new(tuple(new), x.dtype, x.bound, x.nan, x.terms), f"t{x.name}.transpose({a}, {b})",
                         f"np.swapaxes(n{x.name}, {a}, {b})", "transpose")
      order = list(range(len(shape)))
      for i in range(len(order) - 1, 0, -1):
        j = c.integer(0, i); order[i], order[j] = order[j], order[i]
      return self.emit(self.new(tuple(shape[o] for o in order), x.dtype, x.bound, x.nan, x.terms),
                       f"t{x.name}.permute({tuple(order)!r})", f"np.transpose(n{x.name}, {tuple(order)!r})", "permute")
    if kind == "expand" and _numel(shape) <= 4096:
      at = c.integer(0, len(shape))
      grown = shape[:at] + (1,) + shape[at:]
      new = grown[:at] + (c.integer(1, 4),) + grown[at + 1:]
      new = tuple(c.integer(2, 3) if s == 1 and c.boolean(0.5) else s for s in new)
      return self.emit(self.new(new, x.dtype, x.bound, x.nan, x.terms),
                       f"t{x.name}.reshape({grown!r}).expand({new!r})",
                       f"np.broadcast_to(n{x.name}.reshape({grown!r}), {new!r}).copy()", "expand")
    if kind == "pad" and shape and 0 not in shape:
      pads = tuple((c.integer(-min(1, s - 1), 2), c.integer(-min(1, s - 1), 2)) for s in shape)
      pads = tuple((b, max(a, 1 - s - b)) for (b, a), s in zip(pads, shape))   # never cut an axis to nothing
      mode = c.choice(["constant", "constant", "reflect", "replicate", "circular"])
      if mode == "reflect" and any(max(b, a) > s - 1 + min(b, 0) + min(a, 0) for (b, a), s in zip(pads, shape)):
        mode = "constant"
      if mode == "circular" and any(max(b, a) > s + min(b, 0) + min(a, 0) for (b, a), s in zip(pads, shape)):
        mode = "constant"
      if mode != "constant":
        return self.emit(self.new(tuple(s + b + a for s, (b, a) in zip(shape, pads)), x.dtype, x.bound, x.nan, x.terms),
                         f"t{x.name}.pad({pads!r}, mode={mode!r})", f"ref.pad_mode(n{x.name}, {pads!r}, {mode!r})",
                         "pad")
      value = c.choice([0, 0, 1, -2]) if x.dtype != "bool" else 0
      if x.dtype.startswith("u"): value = abs(value)
      kw = f", value={value}" if value else ""
      bound = None if x.bound is None else max(x.bound, abs(value))
      return self.emit(self.new(tuple(s + b + a for s, (b, a) in zip(shape, pads)), x.dtype, bound, x.nan, x.terms),
                       f"t{x.name}.pad({pads!r}{kw})", f"ref.pad(n{x.name}, {pads!r}, {value})", "pad")
    if kind == "shrink" and shape and 0 not in shape:
      bounds = []
      for s in shape:
        lo = c.integer(0, s - 1)
        bounds.append((lo, c.integer(lo + 1, s)))
      sl = ", ".join(f"{lo}:{hi}" for lo, hi in bounds)
      return self.emit(self.new(tuple(hi - lo for lo, hi in bounds), x.dtype, x.bound, x.nan, x.terms),
                       f"t{x.name}.shrink({tuple(bounds)!r})", f"n{x.name}[{sl}]", "shrink")
    if kind == "flip" and shape:
      axes = tuple(a for a in range(len(shape)) if c.boolean(0.5)) or (0,)
      return self.emit(self.new(shape, x.dtype, x.bound, x.nan, x.terms), f"t{x.name}.flip({axes!r})",
                       f"np.flip(n{x.name}, {axes!r}).copy()", "flip")
    if kind == "cat" and shape:
      dim = c.integer(0, len(shape) - 1)
      other_shape = shape[:dim] + (c.integer(1, 3),) + shape[dim + 1:]
      y = self.input(other_shape, x.dtype)
      new = shape[:dim] + (shape[dim] + other_shape[dim],) + shape[dim + 1:]
      first, second = (x, y) if c.boolean(0.5) else (y, x)
      bound = None if x.bound is None or y.bound is None else max(x.bound, y.bound)
      return self.emit(self.new(new, x.dtype, bound, x.nan or y.nan, x.terms),
                       f"t{first.name}.cat(t{second.name}, dim={dim})",
                       f"ref.concatenate([n{first.name}, n{second.name}], axis={dim})", "cat")
    if kind == "stack":
      dim = c.integer(0, len(shape))
      y = self.input(shape, x.dtype)
      bound = None if x.bound is None or y.bound is None else max(x.bound, y.bound)
      return self.emit(self.new(shape[:dim] + (2,) + shape[dim:], x.dtype, bound, x.nan or y.nan, x.terms),
                       f"Tensor.stack(t{x.name}, t{y.name}, dim={dim})",
                       f"ref.stack([n{x.name}, n{y.name}], axis={dim})", "stack")
    return self.index(x)

  def _refactor(self, n: int) -> tuple:
    """A random shape with n elements."""
    c, dims = self.c, []
    if n == 0: return c.choice([(0,), (2, 0), (0, 3, 1)])
    rest = n
    while rest > 1 and len(dims) < 4:
      divisors = [d for d in range(2, min(rest, 64) + 1) if rest % d == 0] or [rest]
      d = c.choice(divisors) if c.boolean(0.7) else rest
      dims.append(d); rest //= d
    if rest > 1: dims[-1] *= rest
    while c.boolean(0.2): dims.insert(c.integer(0, len(dims)), 1)
    return tuple(dims)

  def index(self, x: Value) -> Value:
    """x[...] with an int, a slice (steps, negative steps, out-of-range bounds), None or `:` per axis, perhaps an
    Ellipsis standing for some axes, and at most one int tensor (then no int elsewhere: numpy would move the axes)."""
    c = self.c
    tensor_parts, numpy_parts, shape = [], [], []
    axes = list(x.shape)
    ellipsis = (c.integer(0, len(axes)), c.integer(0, len(axes))) if c.boolean(0.2) else None
    tensor_axis = c.integer(0, len(axes) - 1) if axes and c.boolean(0.2) else None
    axis = 0
    while axis <= len(axes):
      if ellipsis is not None and axis == ellipsis[0]:
        covered = min(ellipsis[1], len(axes) - axis)
        tensor_parts.append("..."); numpy_parts.append("..."); shape.extend(axes[axis:axis + covered])
        axis += covered
        ellipsis = None
        continue
      if axis == len(axes): break
      extent = axes[axis]
      if c.boolean(0.1): tensor_parts.append("None"); numpy_parts.append("None"); shape.append(1)
      # an int tensor index is a one-hot mask over the axis, whose arange the PYTHON device sums in n^2 positions
      # (seed 162: 262144 of them ran for minutes); longer axes are sliced instead, as gather does
      if axis == tensor_axis and 0 < extent <= 4096:
        picks = [c.integer(-extent, extent - 1) for _ in range(c.integer(1, 4))]
        tensor_parts.append(f"Tensor({picks!r}, device=DEV)")
        numpy_parts.append(f"np.array({picks!r})")
        shape.append(len(picks))
      else:
        kind = c.choice(["slice", "slice", "all"] + ([] if tensor_axis is not None or extent == 0 else ["int", "int"]))
        if kind == "int": text = str(c.integer(-extent, extent - 1))
        elif kind == "all": text = ":"
        else:
          step = c.choice([1, 1, 2, 3, -1, -2])
          start, stop = c.integer(-extent - 1, extent + 1), c.integer(-extent - 1, extent + 1)
          text = f"{start}:{stop}:{step}" if c.boolean(0.7) else f"::{step}"
          if not self.special_inputs and not range(extent)[slice(start, stop, step)]:
            text = f"::{step}"   # finite differences: no empty values"
        tensor_parts.append(text); numpy_parts.append(text)
        if kind != "int":
          bounds = [int(p) if p else None for p in text.split(":")] if text != ":" else [None]
          shape.append(len(range(extent)[slice(*bounds)]))
      axis += 1
    v = self.new(tuple(shape), x.dtype, x.bound, x.nan, x.terms)
    if not tensor_parts: tensor_parts, numpy_parts = ["..."], ["..."]
    tsrc, nsrc = ", ".join(tensor_parts), ", ".join(numpy_parts)
    if len(tensor_parts) <= 1: tsrc, nsrc = tsrc + ",", nsrc + ","
    return self.emit(v, f"t{x.name}[{tsrc}]", f"np.asarray(n{x.name}[{nsrc}]).copy()", "getitem")

  def cast(self, x: Value) -> Value:
    c = self.c
    target = c.choice(list(ref.DTYPES))
    # and so does truncating it to an int (seed 206:2681: float16 einsum of x ** 5, then uint16: 30 against 31)
    if ref.is_int(target) and _rounding_decides(x): target = "float32"
    if ref.is_int(target) and ref.is_float(x.dtype):
      lo, hi = ref.int_range(target)
      if x.bound is None or x.bound >= min(hi, 2 ** 31) or (lo == 0 and x.nan): target = "float32"
      elif lo == 0:   # negative floats to unsigned are undefined in C: take the absolute value first
        v = self.new(x.shape, x.dtype, x.bound, x.nan, x.terms)
        self.emit(v, f"t{x.name}.abs()", f"ref.unary('abs', n{x.name}, {x.dtype!r})", "abs")
        x = v
    signed_int = ref.is_int(target) and ref.is_int(x.dtype) and not target.startswith("u")
    if signed_int and (x.bound is None or x.bound > ref.int_range(target)[1]):
      target = "int64" if not x.dtype == "uint64" else "float64"
    if target == "float16" and (x.bound is None or x.bound > 60000): target = "float32"
    if target == "bool" and x.faint: target = "float32"   # a tiny negative is True, a 0 False
    bound = x.bound if target != "bool" else 1.0
    if ref.is_int(target) and target.startswith("u") and ref.is_int(x.dtype) and x.dtype[0] != "u":
      bound = self._int_max(target)
    v = self.new(x.shape, target, bound, x.nan and ref.is_float(target), x.terms)
    return self.emit(v, f"t{x.name}.cast(dtypes.{target})", f"ref.cast(n{x.name}, {target!r})", "cast")

  def matmul(self, x: Value) -> Value:
    c = self.c
    k = x.shape[-1]
    if len(x.shape) == 1 or c.boolean(0.3):
      m = c.integer(1, 6)
      wshape = (k,) if c.boolean(0.3) else (k, m)
    else:
      wshape = (k, c.integer(1, 6)) if c.boolean(0.7) else x.shape[:-2] + (k, c.integer(1, 5))
    w = self.input(wshape, x.dtype if c.boolean(0.7) else "float32", kind="normal")
    out = ref.promote(x.dtype, w.dtype)
    if len(x.shape) == 1 and len(wshape) == 1: shape = ()
    elif len(wshape) == 1: shape = x.shape[:-1]
    elif len(x.shape) == 1: shape = wshape[:-2] + wshape[-1:]
    else:
      shape = self._bshape(Value("", x.shape[:-2], "", 0), Value("", wshape[:-2], "", 0)) + (x.shape[-2], wshape[-1])
    bound = None if x.bound is None else x.bound * 3 * k
    v = self.new(shape, out, bound, x.nan or bound is None, x.terms * k)
    if k == 0: v = self.empty_sum(v)
    return self.emit(v, f"(t{x.name} @ t{w.name})",
                     f"ref.matmul(n{x.name}, n{w.name}, {out!r})", "matmul")

  def power(self, x: Value) -> Value:
    """x ** c for a python constant c (powers of negative bases with fractional c are NaN on both sides)."""
    exponent = self.c.choice([2, 3, 0.5, -1, -0.5, 1.5, -2, 0, 2.5, 5])
    # 1/+0 and 1/-0 differ (seed 164: a padded conv's zeros); a lossy zero's relative error would become absolute
    if exponent < 0 and (x.zero_sign or x.lossy_zero): exponent = -exponent
    # a root or reciprocal of a tiny negative is NaN or huge, of 0 it is 0 or inf (seed 199:599)
    if x.faint and (exponent < 0 or exponent != int(exponent)): exponent = 2
    bound = None if x.bound is None or exponent < 0 else (max(x.bound, 1.0) ** exponent)
    if bound is not None and x.dtype == "float16" and bound > 60000: bound = None
    nan = x.nan or bound is None or exponent != int(exponent)
    v = self.new(x.shape, x.dtype, None if nan else bound, nan=nan, terms=x.terms)
    return self.emit(v, f"(t{x.name} ** {exponent!r})", f"ref.power(n{x.name}, {exponent!r}, {x.dtype!r})", "pow")

  def scan(self, x: Value) -> Value:
    """cumsum, cumprod, cummax or cummin along one axis (long axes cross the compiler's block size of 256)."""
    c = self.c
    axis = c.integer(-len(x.shape), len(x.shape) - 1)
    length = x.shape[axis]
    sums = ref.is_float(x.dtype) or (x.dtype in ("int32", "int64") and x.bound is not None
                                     and x.bound * length < 2 ** 31)
    op = "cumsum" if sums and (x.nan or c.boolean(0.6)) else "cummax"
    if op == "cummax" and (x.nan or x.dtype == "bool"): return self.unary(x) if ref.is_float(x.dtype) else self.cast(x)
    if op == "cummax" and c.boolean(0.5): op = "cummin"
    # a product stays in range while its factors are at most 1 in magnitude, or while there are few of them
    products = x.bound is not None and (x.bound <= 1 or (length <= 8 and x.bound ** length < 2 ** 31))
    if op == "cumsum" and products and x.dtype != "float16" and c.boolean(0.3): op = "cumprod"
    if op == "cumsum": bound = None if x.bound is None else x.bound * length
    else: bound = None if x.bound is None else (max(x.bound, 1.0) ** length if op == "cumprod" else x.bound)
    v = self.new(x.shape, x.dtype, bound, nan=x.nan or (op == "cumsum" and bound is None and ref.is_float(x.dtype)),
                 terms=x.terms * (length if op in ("cumsum", "cumprod") else 1))
    return self.emit(v, f"t{x.name}.{op}({axis})", f"ref.scan({op!r}, n{x.name}, {axis}, {x.dtype!r})", op)

  def gather(self, x: Value) -> Value:
    """x.gather(dim, index) with an int index tensor of x's rank (its extent along dim may differ)."""
    c = self.c
    dim = c.integer(0, len(x.shape) - 1)
    if x.shape[dim] > 4096:
      return self.index(x)   # its one-hot mask needs an arange: n^2 positions on the PYTHON device
    shape = tuple(c.integer(1, 3) if a == dim else c.integer(1, s) for a, s in enumerate(x.shape))
    picks = ref.data(shape, "int64", seed=0, kind="normal")   # only for its shape: the values are drawn below
    values = [c.integer(0, x.shape[dim] - 1) for _ in range(picks.size)]
    index = f"np.array({values!r}, dtype='int32').reshape({shape!r})"
    v = self.new(shape, x.dtype, x.bound, x.nan, x.terms)
    return self.emit(v, f"t{x.name}.gather({dim}, Tensor({index}, device=DEV))",
                     f"ref.gather(n{x.name}, {dim}, {index})", "gather")

  def interpolate(self, x: Value) -> Value:
    """Resize the last one or two axes (nearest, nearest-exact, linear; align_corners)."""
    c = self.c
    count = c.integer(1, min(2, len(x.shape) - 2))
    size = tuple(c.integer(1, 9) for _ in range(count))
    mode = c.choice(["nearest", "nearest-exact", "linear"])
    corners = mode == "linear" and c.boolean(0.3)
    v = self.new(x.shape[:-count] + size, x.dtype, x.bound, x.nan, x.terms)
    extra = ", align_corners=True" if corners else ""
    return self.emit(v, f"t{x.name}.interpolate({size!r}, mode={mode!r}{extra})",
                     f"ref.interpolate(n{x.name}, {size!r}, {mode!r}, {corners})", "interpolate")

  def einsum(self, x: Value) -> Value:
    """einsum of x with a new operand: a contraction of x's last axis, an outer product, or a transpose-sum."""
    c = self.c
    letters = "abcdefgh"[:len(x.shape)]
    if not letters: return self.unary(x)
    kind = c.choice(["contract", "outer", "reduce"])
    if kind == "reduce":
      out = "".join(l for l in letters if c.boolean(0.5))[::-1]
      shape = tuple(x.shape[letters.index(l)] for l in out)
      v = self.new(shape, x.dtype, None if x.bound is None else x.bound * math.prod(x.shape), x.nan,
                   x.terms * max(1, math.prod(x.shape)))
      if math.prod(x.shape) == 0: v = self.empty_sum(v)
      return self.emit(v, f"Tensor.einsum({letters + '->' + out!r}, t{x.name})",
                       f"ref.cast(ref.einsum({letters + '->' + out!r}, ref.cast(n{x.name}, 'float64')), {x.dtype!r})",
                       "einsum")
    k = x.shape[-1]
    other = (k, c.integer(1, 4)) if kind == "contract" else (c.integer(1, 4),)
    y = self.input(other, x.dtype, kind="normal")
    formula = f"{letters},{letters[-1]}z->{letters[:-1]}z" if kind == "contract" else f"{letters},z->{letters}z"
    shape = (x.shape[:-1] + other[1:]) if kind == "contract" else x.shape + other
    bound = None if x.bound is None else x.bound * 3 * (k if kind == "contract" else 1)
    v = self.new(shape, x.dtype, bound, x.nan or bound is None, x.terms * (k if kind == "contract" else 1))
    if kind == "contract" and k == 0: v = self.empty_sum(v)
    return self.emit(v, f"Tensor.einsum({formula!r}, t{x.name}, t{y.name})",
                     f"ref.cast(ref.einsum({formula!r}, ref.cast(n{x.name}, 'float64'), ref.cast(n{y.name}, "
                     f"'float64')), {x.dtype!r})",
                     "einsum")

  def conv(self, x: Value) -> Value:
    c = self.c
    n, cin, h, w = x.shape
    groups = c.choice([g for g in (1, 2, 3) if cin % g == 0])
    if cin % groups: groups = 1
    cout = groups * c.integer(1, 3)
    k = c.integer(1, min(3, h, w))
    stride, padding, dilation = c.choice([1, 1, 2]), c.choice([0, 0, 1, 2]), c.choice([1, 1, 2])
    if (h + 2 * padding - dilation * (k - 1) - 1) < 0 or (w + 2 * padding - dilation * (k - 1) - 1) < 0:
      dilation, padding = 1, 1
    wt = self.input((cout, cin // groups, k, k), x.dtype, kind="normal")
    oh, ow = ((h + 2 * padding - dilation * (k - 1) - 1) // stride + 1,
              (w + 2 * padding - dilation * (k - 1) - 1) // stride + 1)
    terms = cin // groups * k * k
    v = self.new((n, cout, oh, ow), x.dtype, x.bound * 3 * terms, False, x.terms * terms)
    args = f"stride={stride}, padding={padding}, dilation={dilation}, groups={groups}"
    return self.emit(v, f"t{x.name}.conv2d(t{wt.name}, {args})",
                     f"ref.cast(ref.conv2d(n{x.name}, n{wt.name}, {args}), {x.dtype!r})", "conv2d")

  def pool(self, x: Value) -> Value:
    c = self.c
    h, w = x.shape[-2:]
    k = c.integer(1, min(3, h, w))
    stride = c.integer(1, 3)
    padding = c.integer(0, k // 2)
    how = c.choice(["max", "avg"])
    oh, ow = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
    include = c.boolean(0.5)
    v = self.new(x.shape[:-2] + (oh, ow), x.dtype, x.bound, False, x.terms * k * k)
    extra = f", count_include_pad={include}" if how == "avg" else ""
    return self.emit(v, f"t{x.name}.{how}_pool2d(kernel_size=({k}, {k}), stride={stride}, padding={padding}{extra})",
                     f"ref.cast(ref.pool2d(n{x.name}, {k}, {stride}, {padding}, {how!r}, {include}), {x.dtype!r})",
                     f"{how}_pool2d")

  def check(self, v: Value) -> None:
    if not ref.is_float(v.dtype): return self.program.checks.append(Check(f"t{v.name}", f"n{v.name}", v.dtype))
    rtol = max(v.rtol, ref.tolerance(v.dtype)[0])
    atol = rtol * max(1.0, v.bound or 1.0, v.scale) * math.sqrt(v.terms)
    self.program.checks.append(Check(f"t{v.name}", f"n{v.name}", v.dtype, atol=atol, rtol=rtol,
                                     overflow=v.overflows))


# ***** program families *****

def values_program(c) -> Program:
  """Created tensors, then a chain of ops; the last value and one earlier value are checked against numpy."""
  b = Builder(c, "values")
  if c.boolean(0.15):   # an image batch (N, C, H, W) for convolutions and pooling
    x = b.input((c.integer(1, 2), c.integer(1, 4), c.integer(3, 9), c.integer(3, 9)), b.dtype(floats_only=True),
                kind="normal")
  else: x = b.created()
  for _ in range(c.integer(1, 8)):
    if _numel(x.shape) > (1 << 21): x = b.reduce(x)
    else: x = b.step(x)
  b.check(x)
  if len(b.values) > 2 and c.boolean(0.3): b.check(b.values[c.integer(0, len(b.values) - 2)])
  return b.program


_SMOOTH = ["exp", "sin", "tanh", "sigmoid", "square", "softplus", "silu", "gelu", "cos"]


def gradient_program(c) -> Program:
  """A chain of differentiable float64 ops; gradients of a weighted sum of the result against central
  differences of the numpy program."""
  b = Builder(c, "gradient")
  b.special_inputs = False
  if c.boolean(0.2): shape = (c.integer(1, 2), c.integer(1, 3), c.integer(3, 5), c.integer(3, 5))   # for conv, pooling
  else:
    shape = b.shape(max_rank=3, big=False)
    shape = shape if shape and _numel(shape) <= 24 else (3, 2)
  inputs = [b.input(shape, "float64", kind="normal", requires_grad=True)]
  x = inputs[0]
  grew = False   # one exp or square per program: exp(exp(exp(x))) overflows float64 and its finite differences are NaN
  for _ in range(c.integer(1, 5)):
    kind = c.choice(["unary", "binary", "reduce", "movement", "movement", "index",
                     "matmul"] + ["conv", "pool"] * (len(x.shape) == 4))
    if kind in ("conv", "pool"): x = b.conv(x) if kind == "conv" else b.pool(x)
    elif kind == "unary":
      op = c.choice(_SMOOTH)
      if op in ("exp", "square"): op, grew = ("sin" if grew else op), True
      v = b.new(x.shape, "float64", 50.0)
      x = b.emit(v, f"t{x.name}.{op}()", f"ref.unary({op!r}, n{x.name}, 'float64')", op)
    elif kind == "binary":
      trained = c.boolean(0.5)
      y = b.input(x.shape[c.integer(0, len(x.shape)):] if x.shape else (), "float64", kind="positive",
                  requires_grad=trained)
      if trained: inputs.append(y)
      op = c.choice(["add", "sub", "mul", "div"])
      sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
      v = b.new(b._bshape(x, y), "float64", 50.0)
      x = b.emit(v, f"(t{x.name} {sym} t{y.name})", f"ref.binary({op!r}, n{x.name}, n{y.name}, 'float64')", op)
    elif kind == "reduce" and x.shape:
      axis = c.integer(0, len(x.shape) - 1)
      op = c.choice(["sum", "mean", "max"])
      kd = c.boolean(0.3)
      shape = tuple(1 if a == axis else s for a, s in enumerate(x.shape) if kd or a != axis)
      v = b.new(shape, "float64", 50.0)
      npfn = {"sum": "ref.sum_", "mean": "ref.mean_", "max": "ref.max_"}[op]
      x = b.emit(v, f"t{x.name}.{op}(axis={axis}, keepdim={kd})", f"{npfn}(n{x.name}, {axis}, {kd}, 'float64')", op)
    elif kind == "matmul" and x.shape:
      trained = c.boolean(0.5)
      w = b.input((x.shape[-1], c.integer(1, 3)), "float64", kind="normal", requires_grad=trained)
      if trained: inputs.append(w)
      v = b.new(x.shape[:-1] + (w.shape[-1],), "float64", 50.0)
      x = b.emit(v, f"(t{x.name} @ t{w.name})", f"np.matmul(n{x.name}, n{w.name})", "matmul")
    elif kind == "index" and x.shape: x = b.index(x)
    elif kind == "movement" and x.shape: x = b.movement(x)
  weights = b.input(x.shape, "float64", kind="normal")
  loss = b.new((), "float64", None)
  b.emit(loss, f"(t{x.name} * t{weights.name}).sum()", f"np.sum(n{x.name} * n{weights.name})", "sum")
  names = [f"t{i.name}" for i in inputs]
  grads = b.new((), "float64", None)
  b.program.add(f"t{grads.name} = t{loss.name}.gradient({', '.join(names)})", f"n{grads.name} = None")
  numpy_so_far = b.program.numpy_source()
  b.program.checks.extend(
    Check(f"t{grads.name}[{k}]", f"ref.finite_difference({numpy_so_far!r}, 'n{loss.name}', 'n{i.name}')", "float64",
          atol=1e-5, rtol=1e-4, scaled=True) for k, i in enumerate(inputs))
  b.program.ops.add("gradient")
  return b.program


_DERIVATIVES = ["sigmoid", "tanh", "gelu", "quick_gelu", "hardsigmoid", "exp", "sin", "sqrt", "rsqrt", "log",
                "reciprocal",
                "square", "softplus", "silu", "relu", "exp2", "log2", "cos"]


def derivative_program(c) -> Program:
  """The gradient of one unary function at special inputs (+-300..400, 0, tiny, large) against its closed form."""
  b = Builder(c, "gradient")
  op = c.choice(_DERIVATIVES)
  points = [c.choice([-400.0, -300.0, -88.0, -3.0, -1.0, -1e-30, 0.0, 1e-30, 0.5, 2.0, 3.0, 88.0, 300.0,
                      400.0]) for _ in range(c.integer(1, 6))]
  dtype = c.choice(["float32", "float32", "float64"])
  x = b.new((len(points),), dtype, None)
  b.emit(x, f"Tensor({points!r}, dtype=dtypes.{dtype}, device=DEV, requires_grad=True)",
         f"np.array({points!r}, dtype={dtype!r})", "Tensor")
  g = b.new((len(points),), dtype, None)
  b.emit(g, f"t{x.name}.{op}().sum().gradient(t{x.name})[0]", f"ref.cast(ref.derivative({op!r}, n{x.name}), {dtype!r})",
         "gradient")
  b.program.checks.append(Check(f"t{g.name}", f"n{g.name}", dtype, atol=1e-6, rtol=1e-3))
  b.program.ops.add(op)
  return b.program


def optimizer_program(c) -> Program:
  """One or two optimizer steps on loss = sum(w * x) + sum(w^2) / 2 (gradient x + w), against the update rule."""
  b = Builder(c, "optimizer")
  shape = (c.integer(1, 4), c.integer(1, 5))
  w = b.input(shape, "float32", kind="normal", requires_grad=True)
  x = b.input(shape, "float32", kind="normal")
  opt = c.choice(["SGD", "SGD", "Adam", "AdamW"])
  lr = c.choice([0.1, 0.01])
  steps = c.integer(1, 2)
  if opt == "SGD":
    momentum, nesterov, wd = c.choice([0.0, 0.9]), c.boolean(0.5), c.choice([0.0, 0.01])
    nesterov = nesterov and momentum > 0
    kwargs = f"lr={lr}, momentum={momentum}, nesterov={nesterov}, weight_decay={wd}"
  else:
    wd = c.choice([0.0, 0.01]) if opt == "AdamW" else 0.0
    kwargs = f"lr={lr}" + (f", weight_decay={wd}" if opt == "AdamW" else "")
  o = b.new(shape, "float32", None)
  b.program.add(f"opt = nn.optim.{opt}([t{w.name}], {kwargs})", "")
  b.program.add(f"with Tensor.train():\n  for _ in range({steps}):\n    opt.zero_grad()\n    ((t{w.name} * "
                f"t{x.name}).sum() + "
                f"(t{w.name} * t{w.name}).sum() / 2).backward()\n    opt.step()\nt{o.name} = t{w.name}",
                f"n{o.name} = ref.optimizer_steps({opt!r}, n{w.name}, n{x.name}, {steps}, {kwargs})")
  b.program.ops.add(opt)
  b.check(o)
  b.program.checks[-1].atol = 1e-5
  return b.program


def setitem_program(c) -> Program:
  """A realized tensor written through __setitem__ or assign, then read."""
  b = Builder(c, "setitem")
  shape = b.shape(max_rank=3, big=False) or (4,)
  dtype = b.dtype()
  x = b.input(shape, dtype, kind="normal")
  b.program.add(f"t{x.name} = t{x.name}.contiguous().realize()", f"n{x.name} = n{x.name}.copy()")
  if c.boolean(0.3):
    y = b.input(shape, dtype, kind="normal")
    b.program.add(f"t{x.name}.assign(t{y.name}).realize()", f"n{x.name} = n{y.name}.copy()")
  else:
    parts = []
    for s in shape:
      if c.boolean(0.4): parts.append(str(c.integer(-s, s - 1)))
      else:
        lo = c.integer(0, s - 1)
        parts.append(f"{lo}:{c.integer(lo + 1, s)}")
    value = c.choice([7, 0, 1]) if c.boolean(0.5) else None
    if value is not None:
      b.program.add(f"t{x.name}[{', '.join(parts)}] = {value}", f"n{x.name}[{', '.join(parts)}] = {value}")
    else:   # a tensor value of the indexed part's shape
      index = ", ".join(parts)
      b.program.add(f"t{x.name}[{index}] = Tensor.full(t{x.name}[{index}].shape, 3, dtype=dtypes.{dtype}, device=DEV)",
                    f"n{x.name}[{index}] = 3")
  out = b.new(shape, dtype, 9.0)
  b.emit(out, f"t{x.name}.contiguous()", f"n{x.name}", "setitem")
  b.check(out)
  return b.program


def symbolic_program(c) -> Program:
  """A reduction and an elementwise op over a Variable-bound length."""
  b = Builder(c, "symbolic")
  n = c.integer(2, 12)
  use = c.integer(1, n)
  x = b.input((n, c.integer(1, 4)), "float32", kind="normal")
  v = b.new((use, x.shape[1]), "float32", 3.0)
  b.program.add(f"t{v.name} = t{x.name}.shrink(((0, Variable('i', 1, {n}).bind({use})), None))",
                f"n{v.name} = n{x.name}[:{use}]")
  op = c.choice(["sum", "max", "mul"])
  out = b.new((x.shape[1],) if op != "mul" else (use, x.shape[1]), "float32", 3.0 * use * 3)
  if op == "mul":
    b.program.add(f"t{out.name} = (t{v.name} * 2 + 1).reshape({use}, {x.shape[1]})", f"n{out.name} = n{v.name} * 2 + 1")
  else:
    b.program.add(f"t{out.name} = t{v.name}.{op}(0)", f"n{out.name} = np.{op}(n{v.name}, 0).astype('float32')")
  b.program.ops.add("Variable")
  b.check(out)
  return b.program


PROGRAM_KINDS = {"values": values_program, "gradient": gradient_program, "derivative": derivative_program,
                 "optimizer": optimizer_program, "setitem": setitem_program, "symbolic": symbolic_program}
_WEIGHTS = ["values"] * 10 + ["gradient"] * 3 + ["derivative", "optimizer", "setitem", "symbolic"]


def program(c, kind: Optional[str] = None) -> Program:
  """One random program of `kind` (default: drawn, mostly `values`)."""
  return PROGRAM_KINDS[kind or c.choice(_WEIGHTS)](c)
