"""Lowering: a sum of a constant over the valid part of a view (arange, cumsum of a constant, triangular masks)
is counted in closed form, not looped over, exactly where that gives the same bits; index % folds coefficients."""
import numpy as np
import pytest
from scheduler import Tensor, Device, dtypes
from scheduler.ops import Ops
from scheduler.codegen.lowerer import lower
from scheduler.symbolic import Variable
from scheduler.device import find_c_compiler

DEVICES = ["PYTHON"] + (["CPU"] if find_c_compiler() is not None else [])


def loops(t: Tensor) -> list[int]:
  """RANGE instructions (loops) of each kernel of t's schedule."""
  return [sum(1 for i in lower(si.ast).instrs if i.op is Ops.RANGE) for si in t.schedule() if si.ast.op is Ops.SINK]


def on(device, make):
  old = Device.DEFAULT
  Device.DEFAULT = device
  try: return make().numpy()
  finally: Device.DEFAULT = old


@pytest.mark.parametrize("device,n", [(d, n) for d in DEVICES for n in (1, 7, 64, 1000)] + [(d, 131072) for d in DEVICES if d == "CPU"])
def test_arange_is_one_loop_and_right(device, n):
  """(The PYTHON runtime is the oracle and evaluates the whole masked view: no 131072**2 case for it.)"""
  make = lambda: Tensor.arange(n).float().contiguous()
  assert loops(make()) == ([1] if n > 1 else [0])   # the count replaces the quadratic reduce loop
  np.testing.assert_array_equal(on(device, make), np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,make,expect", [
  ("arange_step", lambda: Tensor.arange(3, 50, 4), np.arange(3, 50, 4)),
  ("arange_neg_step", lambda: Tensor.arange(20, -7, -3), np.arange(20, -7, -3)),
  ("cumsum_of_ones", lambda: Tensor.ones(37, dtype=dtypes.int32).cumsum(), np.arange(1, 38)),
  ("cumsum_of_halves", lambda: Tensor.full((33,), 0.5).cumsum(), np.arange(1, 34) * 0.5),
  ("tril_row_counts", lambda: Tensor.ones(9, 9).tril().sum(1), np.arange(1, 10, dtype=np.float32)),
  ("triu_diag_counts", lambda: Tensor.ones(6, 8).triu(2).sum(0), np.triu(np.ones((6, 8)), 2).sum(0)),
  ("eye", lambda: Tensor.eye(5), np.eye(5)),
])
def test_sums_of_masked_constants_match_numpy(device, name, make, expect):
  np.testing.assert_allclose(on(device, lambda: make().contiguous()), expect, rtol=0, atol=0)


def test_only_exact_constants_are_counted():
  """0.1 added n times is not 0.1 * n in float: that sum keeps its loop (and its rounding)."""
  assert max(loops(Tensor.full((64,), 0.1).cumsum())) >= 2
  assert max(loops(Tensor.full((64,), 0.25).cumsum())) == 1


def test_mod_takes_coefficients_modulo_the_divisor():
  i, r = Variable("i", 0, 15), Variable("r", 0, 15)
  assert ((i + r * 32) % 31).simplify().render() in ("(i+r)", "(r+i)")
  assert ((i + r * 32) % 16).simplify().render() == "i"   # 32r vanishes; i < 16
  wide = Variable("w", 0, 40)
  assert "%" in ((i + wide * 32) % 31).simplify().render()   # i + w can reach 31: the % stays
