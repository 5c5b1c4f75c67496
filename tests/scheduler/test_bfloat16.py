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
                         math.copysign(math.inf, x))
  if abs(x - down) != abs(up - x): return down if abs(x - down) < abs(up - x) else up
  return down if (low >> 16) % 2 == 0 else up


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
