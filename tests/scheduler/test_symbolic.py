"""Symbolic simplification: random integer expressions over bounded variables evaluate the same
before and after simplifying, and vmin/vmax bound every sampled value; a folded cast rounds as a kernel does."""
import warnings
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scheduler.ops import UOp, Ops, resolve, smax, smin, sym_infer
from scheduler.symbolic import Variable, cdiv, cmod
from scheduler.dtype import dtypes

VARS = [Variable("a", 0, 7), Variable("b", -3, 5), Variable("c", 1, 12)]


@st.composite
def expr(draw, depth=0):
  if depth > 3 or draw(st.integers(0, 3)) == 0:
    return draw(st.sampled_from(VARS)) if draw(st.booleans()) else UOp.const(dtypes.int32, draw(st.integers(-6, 9)))
  op = draw(st.sampled_from(["add", "mul", "div", "mod", "max", "lt", "lt_const", "quotient_remainder", "div_self",
                               "lt_scaled"]))
  a = draw(expr(depth + 1))
  nonzero = st.integers(-6, 6).filter(bool)
  if op == "add": return a + draw(expr(depth + 1))
  if op == "mul": return a * draw(st.integers(-3, 5))
  if op == "div": return a // draw(nonzero)
  if op == "mod": return a % draw(nonzero)
  if op == "max": return a.maximum(draw(expr(depth + 1)))
  if op == "lt_const":
    return (a < draw(st.integers(-20, 40))).where(draw(expr(depth + 1)), UOp.const(dtypes.int32, 3))
  if op == "quotient_remainder":
    c, k = draw(nonzero), draw(st.integers(-3, 3))
    return (a // c) * (c * k) + (a % c) * k + draw(expr(depth + 1))
  if op == "div_self": return (a * VARS[2]) // VARS[2]
  if op == "lt_scaled":   # a valid check of a padded or split axis: (g*x + r) < g*k with r often in [0, g]
    g, rest = draw(st.integers(2, 6)), draw(st.sampled_from([VARS[0] % draw(st.integers(2, 7)), VARS[1], VARS[2]]))
    return (a * g + rest < g * draw(st.integers(-2, 8))).where(a, UOp.const(dtypes.int32, 3))
  return (a < draw(expr(depth + 1))).where(a, UOp.const(dtypes.int32, 3))


def evaluate(u: UOp, env: dict) -> int:
  if u.op is Ops.CONST: return u.arg
  if u.op is Ops.DEFINE_VAR: return env[u.arg[0]]
  s = [evaluate(x, env) for x in u.src]
  return {Ops.ADD: lambda: s[0] + s[1], Ops.MUL: lambda: s[0] * s[1], Ops.IDIV: lambda: cdiv(s[0], s[1]),
          Ops.MOD: lambda: cmod(s[0], s[1]),
          Ops.MAX: lambda: max(s[0], s[1]), Ops.CMPLT: lambda: s[0] < s[1], Ops.CMPNE: lambda: s[0] != s[1],
          Ops.WHERE: lambda: s[1] if s[0] else s[2], Ops.AND: lambda: s[0] and s[1], Ops.OR: lambda: s[0]
          or s[1]}[u.op]()


@settings(max_examples=1500, deadline=None)
@given(expr(), st.data())
def test_simplify_keeps_value_and_bounds_hold(e, data):
  simple = e.simplify()
  for _ in range(8):
    env = {v.arg[0]: data.draw(st.integers(v.arg[1], v.arg[2])) for v in VARS}
    value = evaluate(e, env)
    assert evaluate(simple, env) == value
    assert e.vmin <= value <= e.vmax
    assert simple.vmin <= value <= simple.vmax


def test_identities_fold():
  a = VARS[0]
  assert (a + 0).simplify() is a
  assert (a * 1).simplify() is a
  assert (a * 0).simplify().arg == 0
  assert (a // 1).simplify() is a
  assert ((a * 4 + 3) // 4).simplify() is a
  assert ((a * 4 + 3) % 4).simplify().arg == 3
  assert (a + a).simplify().render() == "(a*2)"


def test_resolve_and_sint_helpers():
  a = VARS[0]
  assert resolve(a < 8) and not resolve(a > 7, True)
  assert resolve(a < 3, default=False) is False
  assert smax(a, 10) == 10 and smin(3, a) is a
  assert sym_infer(a * 3 + 1, {a: 2}) == 7


def test_bind_and_unbind():
  a = Variable("n", 1, 10)
  bound = a.bind(4)
  assert bound.unbind() == (a, 4)
  import pytest
  with pytest.raises(ValueError, match="out of range"): a.bind(11)
  with pytest.raises(ValueError, match="integer bounds"): Variable("x", 5, 2)


def test_issue_28_folds():
  """Division and modulo of sums with coefficients, comparisons with a common factor, max and where by value range:
  each of these index forms shrinks to the simpler one (the property test above checks they keep their values)."""
  a, x, y = Variable("a", 0, 7), Variable("x", 0, 9), Variable("y", 0, 3)
  z = Variable("z", 1, 5)
  folds = {
    (a * 4 + y * 6) // 4: "(a+((y*3)//2))",     # the rest and the divisor share 2
    (a * 2) // -2: "(a*-1)",
    (a * z) // z: "a",
    (a // 2) * 2 + a % 2: "a",
    (a // 3) * 6 + (a % 3) * 2 + 1: "((a*2)+1)",
    a * 4 < 9: "(a<3)",
    a * 2 + 4 < 10: "(a<3)",
    x * 12 + y * 8 < 20: "(((x*3)+(y*2))<5)",
    x * 4 + y < 8: "(x<2)",                        # 0 <= y < 4
    a * -1 < -3: "(3<a)",
    (a * 2).maximum(a): "(a*2)",
    (a + y).maximum(a): "(a+y)",
    (a < 10).where(x, y): "x",
    (a < x).where(y, y): "y",
  }
  for expression, simplest in folds.items(): assert expression.simplify().render() == simplest
  assert (x * 4 + Variable("w", 0, 4) < 8).simplify().render() == "(((x*4)+w)<8)"   # w reaches 4: kept


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_folded_cast_to_float_rounds_as_the_kernel_does(device):
  # fuzz seed 165: 1 - 4 in uint32 is 4294967293, which float32 stores as 4294967296.0; a folded constant kept the
  # exact integer, so sin of the constant and sin of the same value in a buffer differed (0.58 against -0.46)
  from scheduler import Tensor, dtypes
  for data in (np.array(4, np.uint32), np.array([4], np.uint32)):   # a constant (folded) and a buffer (a kernel)
    one = Tensor.full((), True, dtype=dtypes.bool, device=device).cast(dtypes.uint32)
    got = (one - Tensor(data, dtype=dtypes.uint32, device=device)).sin().numpy().reshape(-1)[0]
    assert got == np.sin(np.float32(4294967293), dtype=np.float32)
  assert Tensor(16777217, device=device).cast(dtypes.float32).item() == 16777216.0
  assert Tensor(0.1, dtype=dtypes.float64, device=device).cast(dtypes.float32).item() == float(np.float32(0.1))


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_float_constants_fold_to_what_kernels_compute(device):
  # a float32 constant of 16777217 held the python float, so folding it with other constants computed in float64
  from scheduler import Tensor, dtypes
  folded = Tensor.full((), 16777217.0, dtype=dtypes.float32, device=device)
  kernel = Tensor(np.array([16777217.0], np.float32), device=device)
  for op in (lambda t: t - 16777216.0, lambda t: t == 16777216.0, lambda t: t * 3 == 50331648.0):
    assert op(folded).numpy().reshape(-1)[0] == op(kernel).numpy()[0]
  tenth = Tensor(0.1, dtype=dtypes.float32, device=device)
  assert (tenth * 3 == 0.3).item() == bool(np.float32(0.1) * np.float32(3) == np.float32(0.3))
  assert Tensor.full((), 1e39, dtype=dtypes.float32, device=device).item() == float("inf")
  assert Tensor.full((), 0.1, dtype=dtypes.float16, device=device).item() == float(np.float16(0.1))
  with warnings.catch_warnings():
    warnings.simplefilter("error")   # a constant beyond float16's range is inf, as on the device, without a warning
    assert Tensor.full((), 1e6, dtype=dtypes.float16, device=device).item() == float("inf")
