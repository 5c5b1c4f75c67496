"""Differential tests of the two runtimes: random programs of elementwise, reduce and movement ops on
CPU and PYTHON against numpy; every elementwise op over float32, float16, int32 and bool with empty,
size-1 and broadcast shapes; and compiles counted across processes."""
import os, stat, subprocess, sys, textwrap
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from scheduler import Tensor, Device, dtypes
from scheduler.device import find_c_compiler
from tests.conftest import REPO, DEVICES



def on_device(device, fn):
  old = Device.DEFAULT
  Device.DEFAULT = device
  try: return fn()
  finally: Device.DEFAULT = old


# ***** random programs *****

def apply(kind: str, arg, t, ref):
  """One op on a Tensor and on its numpy reference."""
  if kind == "unary":
    return {"neg": (-t, -ref), "relu": (t.relu(), np.maximum(ref, 0)), "sin": (t.sin(), np.sin(ref)),
            "exp2c": ((t.clip(-4, 4)).exp2(), np.exp2(np.clip(ref, -4, 4))),
            "sqrt1": ((t.abs() + 1).sqrt(), np.sqrt(np.abs(ref) + 1)),
            "recip1": ((t.abs() + 1).reciprocal(), 1 / (np.abs(ref) + 1))}[arg]
  if kind == "binary":
    op, other = arg
    o = Tensor(other)
    return {"add": (t + o, ref + other), "mul": (t * o, ref * other), "max": (t.maximum(o), np.maximum(ref, other)),
            "sub": (t - o, ref - other), "where": ((t > o).where(t, o * 2), np.where(ref > other, ref, other * 2))}[op]
  if kind == "reduce":
    op, axis, keep = arg
    return (t.sum(axis, keepdim=keep), ref.sum(axis, keepdims=keep)) if op == "sum" else (t.max(axis, keepdim=keep),
                                                                                          ref.max(axis, keepdims=keep))
  if kind == "permute": return t.permute(arg), ref.transpose(arg)
  if kind == "flatten": return t.reshape(-1), ref.reshape(-1)
  if kind == "flip": return t.flip(arg), np.flip(ref, arg)
  if kind == "pad": return t.pad(arg), np.pad(ref, arg)
  if kind == "shrink": return t.shrink(arg), ref[tuple(slice(b, e) for b, e in arg)]
  if kind == "expand": return t.expand(arg), np.broadcast_to(ref, arg)
  if kind == "contiguous": return t.contiguous(), ref
  raise ValueError(kind)


@st.composite
def programs(draw):
  shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
  data = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape).astype(np.float32)
  steps, cur = [], np.zeros(shape, np.float32)
  for _ in range(draw(st.integers(1, 6))):
    kind = draw(st.sampled_from(["unary", "binary", "reduce", "permute", "flatten", "flip", "pad", "shrink", "expand",
                                 "contiguous"]))
    if cur.ndim == 0 and kind not in ("unary", "binary", "contiguous"): continue
    if kind == "unary": arg = draw(st.sampled_from(["neg", "relu", "sin", "exp2c", "sqrt1", "recip1"]))
    elif kind == "binary":
      oshape = cur.shape if draw(st.booleans()) else tuple(1 if draw(st.booleans()) else s for s in cur.shape)
      arg = (draw(st.sampled_from(["add", "mul", "max", "sub", "where"])),
             np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(oshape).astype(np.float32))
    elif kind == "reduce":
      arg = (draw(st.sampled_from(["sum", "max"])), draw(st.integers(0, cur.ndim - 1)), draw(st.booleans()))
    elif kind == "permute": arg = tuple(draw(st.permutations(range(cur.ndim))))
    elif kind == "flatten": arg = None
    elif kind == "flip": arg = draw(st.integers(0, cur.ndim - 1))
    elif kind == "pad": arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur.shape)
    elif kind == "shrink":
      arg = []
      for s in cur.shape:
        b = draw(st.integers(0, s - 1))
        arg.append((b, draw(st.integers(b + 1, s))))
      arg = tuple(arg)
    elif kind == "expand":
      if 1 not in cur.shape: continue
      arg = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in cur.shape)
    else: arg = None
    steps.append((kind, arg))
    _, cur = apply(kind, arg, Tensor(np.zeros(cur.shape, np.float32), device="PYTHON"), cur)
  return data, steps


# derandomized: float tolerances make a fixed set of examples the safer gate for CI
def _shown(kind: str, arg):
  """A step's argument as the failure message shows it (a binary step's operand array left out)."""
  return arg[0] if isinstance(arg, tuple) and kind == "binary" else arg


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_match_numpy_on_both_devices(program):
  data, steps = program
  ref = data
  for kind, arg in steps: _, ref = apply(kind, arg, Tensor(np.zeros(ref.shape, np.float32), device="PYTHON"), ref)
  for device in DEVICES:
    def run():
      t, r = Tensor(data), data
      for kind, arg in steps: t, r = apply(kind, arg, t, r)
      return t.numpy()
    got = on_device(device, run)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5,
                               err_msg=f"{device}: {[(k, _shown(k, a)) for k, a in steps]}")


# ***** every elementwise op over dtypes and edge shapes *****

SHAPES = [((3, 4), (3, 4)), ((0, 4), (0, 4)), ((1, 1), (1, 1)), ((3, 1), (1, 4)), ((), ())]


def sample(dtype, shape, seed):
  rng = np.random.default_rng(seed)
  if dtype == np.bool_: return rng.integers(0, 2, shape).astype(np.bool_)
  if dtype == np.int32: return rng.integers(-9, 10, shape).astype(np.int32)
  return rng.standard_normal(shape).astype(dtype)


FLOAT_OPS = {
  "add": (lambda a, b: a + b, lambda a, b: a + b), "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / (b.abs() + 1), lambda a, b: a / (np.abs(b) + 1)),
  "maximum": (lambda a, b: a.maximum(b), np.maximum),
  "minimum": (lambda a, b: a.minimum(b), np.minimum), "lt": (lambda a, b: a < b, lambda a, b: a < b),
  "eq": (lambda a, b: a == b, lambda a, b: a == b),
  "where": (lambda a, b: (a > 0).where(a, b), lambda a, b: np.where(a > 0, a, b)),
  "neg": (lambda a, b: -a, lambda a, b: -a),
  "abs": (lambda a, b: a.abs(), lambda a, b: np.abs(a)), "exp": (lambda a, b: a.exp(), lambda a, b: np.exp(a)),
  "log": (lambda a, b: (a.abs() + 1).log(), lambda a, b: np.log(np.abs(a) + 1)),
  "sqrt": (lambda a, b: a.abs().sqrt(), lambda a, b: np.sqrt(np.abs(a))),
  "relu": (lambda a, b: a.relu(), lambda a, b: np.maximum(a, 0)),
  "sigmoid": (lambda a, b: a.sigmoid(), lambda a, b: 1 / (1 + np.exp(-a))),
  "to_int": (lambda a, b: (a * 4).cast(dtypes.int32), lambda a, b: (a * 4).astype(np.int32)),
  "sum": (lambda a, b: a.sum(), lambda a, b: a.sum()),
  "max": (lambda a, b: (a + b).max() if a.numel() else a.sum(), lambda a, b: (a + b).max() if a.size else a.sum()),
}
INT_OPS = {
  "add": FLOAT_OPS["add"], "sub": FLOAT_OPS["sub"], "mul": FLOAT_OPS["mul"], "maximum": FLOAT_OPS["maximum"],
  "minimum": FLOAT_OPS["minimum"],
  "lt": FLOAT_OPS["lt"], "eq": FLOAT_OPS["eq"], "where": FLOAT_OPS["where"], "neg": FLOAT_OPS["neg"],
  "abs": FLOAT_OPS["abs"],
  "idiv": (lambda a, b: a // (b.abs() + 1), lambda a, b: np.trunc(a / (np.abs(b) + 1)).astype(np.int32)),
  "to_float": (lambda a, b: a.float() * 0.5, lambda a, b: a.astype(np.float32) * 0.5), "sum": FLOAT_OPS["sum"],
  "xor": (lambda a, b: a ^ b, lambda a, b: a ^ b),
}
BOOL_OPS = {
  "not": (lambda a, b: a.logical_not(), lambda a, b: ~a), "and": (lambda a, b: a & b, lambda a, b: a & b),
  "or": (lambda a, b: a | b, lambda a, b: a | b),
  "xor": (lambda a, b: a ^ b, lambda a, b: a ^ b), "eq": FLOAT_OPS["eq"],
  "where": (lambda a, b: a.where(b, False), lambda a, b: np.where(a, b, False)),
  "any": (lambda a, b: a.any(), lambda a, b: a.any()),
  "sum": (lambda a, b: a.sum(), lambda a, b: a.sum().astype(np.int32)),
  "to_float": (lambda a, b: a.float() + 1, lambda a, b: a.astype(np.float32) + 1),
}
CASES = [(np.float32, n, f) for n, f in FLOAT_OPS.items()] + [(np.float16, n, f) for n, f in FLOAT_OPS.items()] + \
        [(np.int32, n, f) for n, f in INT_OPS.items()] + [(np.bool_, n, f) for n, f in BOOL_OPS.items()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype,name,fns", CASES, ids=[f"{np.dtype(d).name}-{n}" for d, n, _ in CASES])
def test_op_over_dtypes_and_shapes(dtype, name, fns, shapes, device):
  a, b = sample(dtype, shapes[0], 1), sample(dtype, shapes[1], 2)
  ours, ref = fns
  with np.errstate(all="ignore"): expected = np.asarray(ref(a, b))
  got = on_device(device, lambda: ours(Tensor(a), Tensor(b)).numpy())
  assert got.shape == expected.shape
  if expected.dtype.kind in "biu": np.testing.assert_array_equal(got, expected.astype(got.dtype))
  else:
    tol = 2e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_division_edges_agree_across_devices_and_never_trap(dtype):
  # the lowest value over -1 overflows: a C division traps on it (SIGFPE kills the process); it wraps instead
  lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
  # and anything smaller over the lowest value: |lo| does not fit the type (PYTHON took 1 // lo for 1; seed 121)
  a = np.array([lo, lo, hi, 5, -7, 7, lo, 0, -1, 1, -1, hi], dtype=dtype)
  b = np.array([-1, 1, -1, 0, 2, -2, lo, -1, -1, lo, lo, lo], dtype=dtype)
  results = {device: on_device(device, lambda: ((Tensor(a) // Tensor(b)).numpy(), (Tensor(a) % Tensor(b)).numpy()))
             for device in DEVICES}
  for quotient, remainder in results.values():
    assert quotient.tolist() == [lo, lo, -hi, 0, -3, -3, 1, 0, 1, 0, 0, 0]   # truncated, by zero 0
    assert remainder.tolist() == [0, 0, 0, 0, 1, -1, 0, 0, 0, lo + 1, -1, -1]   # the divisor's sign, as Python's


# ***** compile counts across processes *****

@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_second_run_in_a_new_process_compiles_nothing(tmp_path):
  log = tmp_path / "cc.log"
  wrapper = tmp_path / "cc"
  wrapper.write_text(f"#!/bin/sh\necho x >> {log}\nexec {find_c_compiler()} \"$@\"\n")
  wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
  env = {**os.environ, "CC": str(wrapper), "COMPILE_CACHE_DIR": str(tmp_path / "cache"), "DEVICE": "CPU",
         "PYTHONPATH": str(REPO)}
  code = textwrap.dedent("""
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    print(((x * 2 + 1).relu() @ x.T).sum(1).numpy())
    print(((x * 2 + 1).relu() @ x.T).sum(1).numpy())
  """)
  first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
  compiles = log.read_text().count("x")
  assert compiles >= 1
  second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
  assert log.read_text().count("x") == compiles and first.stdout == second.stdout
