"""bfloat16: stored as 16 bits, computed in float32 and rounded to bfloat16 after every op, on every device.

The oracle rounds by distance: of the two bfloat16 values around a float32 (float32 with the low 16 bits cleared, and
the next one up), the nearer one, the one with an even last bit on a tie.
"""
import math, struct
import numpy as np
import pytest
from scheduler import Tensor, dtypes
from scheduler.nn.state import safe_load, safe_save

pytestmark = pytest.mark.usefixtures("each_device")


def _f32(bits: int) -> float: return struct.unpack("<f", struct.pack("<I", bits))[0]


def bf16(x: float) -> float:
  """x rounded to float32, then to the nearest bfloat16 (ties to even)."""
  x = float(x)
  x = struct.unpack("<f", struct.pack("<f", x))[0] if abs(x) < 3.5e38 else x
  if math.isnan(x) or math.isinf(x): return x
  bits = struct.unpack("<I", struct.pack("<f", x))[0]
  low = bits & 0xFFFF0000
  down, up = _f32(low), (_f32(low + 0x10000) if (low + 0x10000) & 0x7F800000 != 0x7F800000 else
                         math.copysign(2.0 ** 128, x))   # past the largest value: 2^128, which is infinity
  if abs(x - down) != abs(up - x): nearer = down if abs(x - down) < abs(up - x) else up
  else: nearer = down if (low >> 16) % 2 == 0 else up
  return nearer if abs(nearer) < 2.0 ** 128 else math.copysign(math.inf, x)


VALUES = [0.0, -0.0, 1.0, 1.00390625, 1.01171875, 3.14159, -2.71828, 1e-3, 65504.0, 1e30, -1e-30, 3.3e38, 1e-40]


def test_values_round_to_nearest_even_from_lists_and_numpy():
  expected = [bf16(v) for v in VALUES]
  assert Tensor(VALUES, dtype=dtypes.bfloat16).tolist() == expected
  assert Tensor(np.array(VALUES, np.float32), dtype=dtypes.bfloat16).numpy().tolist() == expected
  assert Tensor(VALUES).cast(dtypes.bfloat16).tolist() == expected   # a cast on the device rounds the same way
  assert Tensor(VALUES, dtype=dtypes.bfloat16).numpy().dtype == np.float32   # numpy has no bfloat16


def test_special_values_survive():
  t = Tensor([math.inf, -math.inf, math.nan], dtype=dtypes.bfloat16)
  out = (t * 1).numpy()
  assert out[0] == math.inf and out[1] == -math.inf and math.isnan(out[2])
  assert Tensor([3.4e38], dtype=dtypes.float32).cast(dtypes.bfloat16).item() == math.inf   # past bfloat16's largest


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_each_result_is_rounded(op):
  rng = np.random.default_rng(3)
  a, b = (rng.standard_normal(64) * 10).astype(np.float32), (rng.standard_normal(64) + 3).astype(np.float32)
  ta, tb = Tensor(a, dtype=dtypes.bfloat16), Tensor(b, dtype=dtypes.bfloat16)
  got = getattr(ta, op)(tb).numpy()
  fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
  expected = [bf16(fn(float(np.float32(bf16(x))), float(np.float32(bf16(y))))) for x, y in zip(a, b)]
  if op == "div":   # x / y is x * (1 / y), each rounded
    expected = [bf16(bf16(x) * bf16(1 / bf16(y))) for x, y in zip(a, b)]
  assert got.tolist() == expected


def test_promotion_and_reductions():
  h, b = Tensor([1.5], dtype=dtypes.float16), Tensor([1.5], dtype=dtypes.bfloat16)
  assert (h + b).dtype == dtypes.float32
  assert (b + Tensor([1], dtype=dtypes.int64)).dtype == dtypes.bfloat16
  assert (b * 2.0).dtype == dtypes.bfloat16 and (b + Tensor([1.0])).dtype == dtypes.float32
  x = Tensor([1.0, 2.0, 3.0, 1000.0], dtype=dtypes.bfloat16)
  total = x.sum()
  assert total.dtype == dtypes.bfloat16 and total.item() == bf16(1006.0)   # accumulated in float32, then rounded
  assert x.max().item() == 1000.0 and x.mean().item() == bf16(1006.0 / 4)
  assert dtypes.is_float(dtypes.bfloat16) and dtypes.bfloat16.itemsize == 2


def test_casts_and_bits():
  x = Tensor([1.0, -2.5, 3.14159], dtype=dtypes.bfloat16)
  assert x.bitcast(dtypes.uint16).tolist() == [0x3F80, 0xC020, 0x4049]
  assert Tensor([0x3F80, 0x4049], dtype=dtypes.uint16).bitcast(dtypes.bfloat16).tolist() == [1.0, bf16(3.14159)]
  assert x.cast(dtypes.int32).tolist() == [1, -2, 3]
  assert x.cast(dtypes.float16).numpy().tolist() == np.array([1.0, -2.5, bf16(3.14159)], np.float16).tolist()
  assert Tensor([1, 2, 300], dtype=dtypes.int32).cast(dtypes.bfloat16).tolist() == [1.0, 2.0, 300.0]


def test_a_mixed_precision_layer_matches_float32_within_bfloat16_precision():
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((8, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
  out = (Tensor(x, dtype=dtypes.bfloat16) @ Tensor(w, dtype=dtypes.bfloat16)).relu().float().numpy()
  np.testing.assert_allclose(out, np.maximum(x @ w, 0), rtol=0.05, atol=0.1)


def test_random_floats_are_bfloat16_in_range():
  r = Tensor.rand(1000, dtype=dtypes.bfloat16).numpy()
  assert r.min() >= 0 and r.max() < 1 and all(bf16(v) == v for v in r.tolist()[:50])


def test_safetensors_keep_the_bits(tmp_path):
  t = Tensor([1.0, 3.14159, -0.5], dtype=dtypes.bfloat16)
  safe_save({"w": t}, tmp_path / "w.safetensors")
  back = safe_load(tmp_path / "w.safetensors")["w"]
  assert back.dtype == dtypes.bfloat16 and back.tolist() == t.tolist()
  assert (tmp_path / "w.safetensors").stat().st_size < 200   # 2 bytes per value, not 4


def _pool(seed: int) -> np.ndarray:
  """float32 values that stress rounding to bfloat16: magnitudes over the whole range with both signs, the specials,
  subnormals, bfloat16's largest finite value and the first value past it that rounds to infinity, and exact ties (a
  bfloat16 value plus half its last place, with an even and an odd last bit)."""
  rng = np.random.default_rng(seed)
  spread = rng.choice([-1.0, 1.0], 160) * 10.0 ** rng.uniform(-40, 38.5, 160)
  tie_bits = (rng.integers(0x0080, 0x7F00, 48).astype(np.uint32) << 16) | 0x8000   # normal bfloat16 + half a place
  ties = tie_bits.view(np.float32) * rng.choice([-1, 1], 48).astype(np.float32)
  specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895314e38, -3.3895314e38, 3.3961776e38, 1e-40, -9.2e-41,
              1.1754944e-38, 1.0, -1.0, 0.5, 65504.0, 65520.0]
  with np.errstate(all="ignore"):
    return np.concatenate([spread.astype(np.float32), ties, np.array(specials, np.float32)])


_bf16 = np.vectorize(bf16, otypes=[np.float64])


def _rounded(x) -> np.ndarray:
  with np.errstate(all="ignore"): return _bf16(np.asarray(x, np.float32)).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> None:
  """Equal bit for bit where finite or infinite, NaN where NaN (and the sign of a zero)."""
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  assert got.shape == want.shape
  both_nan = np.isnan(got) & np.isnan(want)
  bad = ~both_nan & ((got != want) | (np.signbit(got) != np.signbit(want)))
  assert not bad.any(), f"{bad.sum()} differ, first at {np.argmax(bad)}: got {got[bad][:4]}, want {want[bad][:4]}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rounding_and_exact_ops_over_the_whole_range(seed):
  """Casting to bfloat16 rounds to nearest, ties to even (overflowing to infinity past the largest value, subnormals
  kept, NaN kept); ops exact in float32 are then exact after the one rounding of their result."""
  a = _pool(seed)
  b = np.random.default_rng(seed + 10).permutation(a)
  ra, rb = _rounded(a), _rounded(b)
  ta, tb = Tensor(a).cast(dtypes.bfloat16), Tensor(b).cast(dtypes.bfloat16)
  _same(ta.numpy(), ra)
  _same(Tensor(a, dtype=dtypes.bfloat16).numpy(), ra)   # from numpy data, rounded on the host
  with np.errstate(all="ignore"):
    exact = {"neg": (-ta, -ra), "abs": (ta.abs(), np.abs(ra)), "sqrt": (ta.abs().sqrt(), np.sqrt(np.abs(ra))),
             "add": (ta + tb, ra + rb), "sub": (ta - tb, ra - rb), "mul": (ta * tb, ra * rb),
             "square": (ta.square(), ra * ra), "floor": (ta.floor(), np.floor(ra)), "ceil": (ta.ceil(), np.ceil(ra)),
             "trunc": (ta.trunc(), np.trunc(ra)), "relu": (ta.relu(), np.where(ra > 0, ra, 0).astype(np.float32)),
             "where": ((ta < tb).where(ta, tb), np.where(ra < rb, ra, rb))}
    for name, (tensor, expected) in exact.items():
      assert tensor.dtype == dtypes.bfloat16, name
      _same(tensor.numpy(), _rounded(expected))
    for name, (tensor, expected) in {"lt": (ta < tb, ra < rb), "eq": (ta == tb, ra == rb),
                                      "ne": (ta != tb, ra != rb)}.items():
      np.testing.assert_array_equal(tensor.numpy(), expected, err_msg=name)
    # out of bfloat16: float32 holds every bfloat16 value; float16 rounds them to its grid and range
    _same(ta.float().numpy(), ra)
    np.testing.assert_array_equal(np.isnan(ta.cast(dtypes.float16).numpy()), np.isnan(ra))
    finite = ~np.isnan(ra)
    np.testing.assert_array_equal(ta.cast(dtypes.float16).numpy()[finite], ra.astype(np.float16)[finite])
    small = np.isfinite(ra) & (np.abs(ra) < 2.0 ** 31)
    np.testing.assert_array_equal(ta.cast(dtypes.int32).numpy()[small], np.trunc(ra[small]).astype(np.int32))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_compilers_transcendental_primitives_are_within_one_place_of_the_rounded_result(seed):
  """exp2, log2 and sin computed in float32 and rounded once: within one bfloat16 place of the exactly rounded value
  (or NaN alike). exp, log and the rest are built from these with bfloat16 steps in between (exp(x) is
  exp2(x * log2(e)), and x * log2(e) is rounded to 8 bits first), so their error is the composition's."""
  rng = np.random.default_rng(seed)
  a = _rounded(np.concatenate([rng.uniform(-20, 20, 200), rng.uniform(0.001, 1000, 100), [0.0, -0.0, 1.0, -1.0]]))
  t = Tensor(a, dtype=dtypes.bfloat16)
  x = a.astype(np.float64)
  with np.errstate(all="ignore"):
    for name, (tensor, exact) in {"exp2": (t.exp2(), np.exp2(x)), "log2": (t.log2(), np.log2(x)),
                                  "sin": (t.sin(), np.sin(x))}.items():
      got, want = tensor.numpy().astype(np.float64), _rounded(exact).astype(np.float64)
      place = np.abs(want) * 2.0 ** -7 + 2.0 ** -133   # one bfloat16 place (8 bits of precision), or the smallest
      ok = (got == want) | (np.abs(got - want) <= place) | (np.isnan(got) & np.isnan(want))
      assert ok.all(), f"{name}: at {x[~ok][:3]} got {got[~ok][:3]}, want {want[~ok][:3]}"
