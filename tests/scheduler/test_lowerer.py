"""Lowering: a sum of a constant over the valid part of a view (arange, cumsum of a constant, triangular masks)
is counted in closed form, not looped over, exactly where that gives the same bits; index % folds coefficients."""
import numpy as np
import pytest
from scheduler import Tensor, Device, dtypes
from scheduler.ops import Ops, exact_key
from scheduler.codegen import lowerer
from scheduler.codegen.lowerer import lower
from scheduler.symbolic import Variable
from scheduler.helpers import Context
from scheduler.realize import run_schedule
from tests.conftest import DEVICES



def loops(t: Tensor) -> list[int]:
  """RANGE instructions (loops) of each kernel of t's schedule."""
  return [sum(1 for i in lower(si.ast).instrs if i.op is Ops.RANGE) for si in t.schedule() if si.ast.op is Ops.SINK]


def on(device, make):
  old = Device.DEFAULT
  Device.DEFAULT = device
  try: return make().numpy()
  finally: Device.DEFAULT = old


@pytest.mark.parametrize("device,n",
                         [(d, n) for d in DEVICES for n in (1, 7, 64, 1000)] + [(d, 131072) for d in DEVICES
                                                                                if d == "CPU"])
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


def accumulators(t: Tensor) -> int:
  """The most outputs a kernel of t's schedule accumulates at once (a vector accumulator holds one per lane)."""
  return max(sum(i.dtype.count for i in lower(si.ast).instrs if i.op is Ops.DEFINE_ACC) for si in t.schedule()
             if si.ast.op is Ops.SINK)


def only_kernel(t: Tensor):
  (ast,) = [si.ast for si in t.schedule() if si.ast.op is Ops.SINK]
  return ast


@pytest.fixture(params=["wide", "portable"])
def upcast_any_size(monkeypatch, request):
  """Upcast kernels of any size, and build them optimized, so that small test shapes exercise the tiles as the
  compiler vectorizes them; with the AVX2 version beside the portable one (x86-64), and with the portable alone (what
  a host without AVX2 runs)."""
  import runtimes.cpu as cpu
  monkeypatch.setattr(lowerer, "UPCAST_MIN_WORK", 0)
  monkeypatch.setattr(cpu, "SMALL_KERNEL_STEPS", 0)
  if request.param == "portable": monkeypatch.setattr(cpu, "WIDE_VECTOR", None)


def test_a_matmul_computes_a_tile_of_outputs_per_iteration():
  assert accumulators(Tensor.empty(128, 128) @ Tensor.empty(128, 128)) == 32  # 4 rows x 8 columns
  assert accumulators(Tensor.empty(3, 5) @ Tensor.empty(5, 7)) == 1         # no extent divides: one output at a time
  assert accumulators(Tensor.empty(64) + 1) == 0                            # nothing reduces: nothing to upcast


def test_small_and_random_kernels_are_not_upcast():
  """Their C would grow by the lanes for no measurable run time (see UPCAST_MIN_WORK)."""
  assert accumulators(Tensor.empty(64, 64) @ Tensor.empty(64, 64)) == 4      # 2**18 multiply-adds: the reduce unrolled
  assert accumulators(Tensor.empty(128, 128) @ Tensor.empty(128, 64)) == 32  # 2**20: a tile of outputs
  with Context(FUSE_ARANGE=1):   # the counter's reduce (2**21 steps) fuses into the kernel that hashes it
    items = Tensor.rand(64, 32).schedule()
  kernels = [si.ast for si in items if si.ast.op is Ops.SINK]
  # run: the schedule advances the random counter, which later draws in this process read
  run_schedule(items)
  drawing = [ast for ast in kernels if any(u.op is Ops.THREEFRY for u in ast.toposort)
             and any(u.op is Ops.REDUCE_AXIS for u in ast.toposort)]
  assert drawing and all(sum(1 for i in lower(ast).instrs if i.op is Ops.DEFINE_ACC) <= 4 for ast in drawing)


def test_a_padded_convolution_lowers_its_interior_apart_from_the_padded_border():
  """Lanes along a padded axis would each test their own mask on every step of the reduce (the C of a 16->32 3x3
  conv over 32x32 was 57 KB and 1.5 ms). The columns no mask cuts into (1..30) are lowered apart, in runs of 8 and 4
  lanes that load whole vectors without a mask; the border columns (0, 29..31) test masks, upcast along channels."""
  conv = lambda: Tensor.empty(1, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3), padding=1)
  ast = only_kernel(conv())
  store = ast.src[0]
  axes = [i for i, d in enumerate(store.src[1].arg.shape) if d != 1]
  parts = lowerer.regions(store, axes)
  assert [(bounds[4], inside) for bounds, inside in parts] == [((0, 1), False), ((1, 25), True), ((25, 29), True),
                                                                ((29, 32), False)]
  assert lowerer.interior(store, 4) == (1, 31) and lowerer.interior(store, 3) == (1, 31)
  assert [a for a, _ in lowerer.upcast_choice(store, axes)] == [2]            # the border: along the 32 channels
  assert [a for a, _ in lowerer.upcast_choice(store, axes, {4: (1, 25)}, inside=True)] == [4, 2]   # interior
  instrs = lower(ast).instrs
  vector_loads = [i for i in instrs if i.op is Ops.LOAD and i.dtype.count > 1]
  assert vector_loads and all(instrs[i.src[2]].op is not Ops.CONST or instrs[i.src[2]].arg for i in vector_loads)
  unpadded = only_kernel(Tensor.empty(1, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3)))
  # 30 columns: runs of 8 (0..23) and 4 (24..27), the last two without upcast along them
  assert [b[4] for b, _ in lowerer.regions(unpadded.src[0], [2, 3, 4])] == [(0, 24), (24, 28), (28, 30)]


def test_lanes_along_the_unit_stride_axis_accumulate_as_vectors():
  ast = only_kernel(Tensor.empty(128, 128) @ Tensor.empty(128, 128))
  instrs = lower(ast).instrs
  accs = [i for i in instrs if i.op is Ops.DEFINE_ACC]
  assert len(accs) == 8 and all(i.dtype == dtypes.float32.vec(4) for i in accs)   # 4 rows x 2 vectors of 4 columns
  # each run of 4 columns stores its vector at once (no lane is taken out of it)
  stores = [i for i in instrs if i.op is Ops.STORE]
  assert len(stores) == 8 and all(instrs[i.src[3]].dtype.count == 4 for i in stores)
  assert not any(i.op is Ops.GEP for i in instrs)
  # an output the runs cannot store as vectors (a half result) takes each lane out of its run's vector
  half = lower(only_kernel((Tensor.empty(128, 128) @ Tensor.empty(128, 128)).cast(dtypes.float16))).instrs
  assert sum(1 for i in half if i.op is Ops.GEP) == 32 and sum(1 for i in half if i.op is Ops.STORE) == 32
  # a max reduce, or an int sum, keeps scalar lanes
  assert all(i.dtype.count == 1 for i in lower(only_kernel((Tensor.empty(256, 256, 32).max(-1)))).instrs)


def test_wide_vectors_serve_runs_of_eight_lanes_and_narrow_ones_runs_of_four():
  ast = only_kernel(Tensor.empty(128, 128) @ Tensor.empty(128, 128))
  wide = [i for i in lower(ast, vector_width=8).instrs if i.op is Ops.DEFINE_ACC]
  assert len(wide) == 4 and all(i.dtype == dtypes.float32.vec(8) for i in wide)   # 4 rows x 8 columns
  conv = only_kernel(Tensor.empty(1, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3), padding=1))
  counts = {i.dtype.count for i in lower(conv, vector_width=8).instrs if i.op is Ops.DEFINE_ACC}
  assert counts == {4, 8}   # the border along channels (weights gathered), the columns 25..28, runs of 8 (1..24)


def test_pure_instructions_are_computed_once_per_loop():
  """The lanes of a tile repeat index math and shared loads; an instruction already computed in an open loop is
  reused (a load only until a store)."""
  for t in (Tensor.empty(128, 128) @ Tensor.empty(128, 128),
            Tensor.empty(1, 16, 32, 32).conv2d(Tensor.empty(32, 16, 3, 3), padding=1)):
    instrs = lower(only_kernel(t)).instrs
    open_keys: list[set] = [set()]
    for i in instrs:
      if i.op in lowerer._PURE and not any(instrs[s].op is Ops.DEFINE_ACC for s in i.src):
        key = (i.op, i.dtype, i.src, i.arg)
        assert not any(key in level for level in open_keys), i
        open_keys[-1].add(key)
      if i.op is Ops.RANGE: open_keys.append(set())
      elif i.op is Ops.ENDRANGE: open_keys.pop()
      elif i.op is Ops.STORE: open_keys = [{k for k in level if k[0] is not Ops.LOAD} for level in open_keys]


rng = np.random.default_rng(5)
X, W = rng.standard_normal((2, 4, 10, 12)).astype(np.float32), rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
S, I = rng.standard_normal((16, 40)).astype(np.float32), rng.integers(-50, 50, (24, 16)).astype(np.int32)
MATMULS = {f"matmul_{m}x{k}x{n}": (rng.standard_normal((m, k)).astype(np.float32),
                                   rng.standard_normal((k, n)).astype(np.float32))
           for m, k, n in [(16, 16, 16), (8, 24, 32), (12, 7, 20), (30, 8, 6), (1, 64, 8), (64, 3, 2)]}


def _softmax(m): return np.exp(m - m.max(1, keepdims=True)) / np.exp(m - m.max(1, keepdims=True)).sum(1, keepdims=True)


CASES = {**{name: (lambda a=a, b=b: Tensor(a) @ Tensor(b), a @ b) for name, (a, b) in MATMULS.items()},
         "conv2d": (lambda: Tensor(X).conv2d(Tensor(W)),
                    np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks.sliding_window_view(X, (3, 3), axis=(2, 3)),
                              W)),
         "conv2d_padded": (lambda: Tensor(X).conv2d(Tensor(W), padding=1),
                           np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks.sliding_window_view(
                             np.pad(X, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)), W)),
         "softmax_rows": (lambda: Tensor(S).softmax(1), _softmax(S)),
         "layernorm": (lambda: Tensor(S).layernorm(),
                       (S - S.mean(-1, keepdims=True)) / np.sqrt(S.var(-1, keepdims=True) + 1e-5)),
         "int_sum_cols": (lambda: Tensor(I).sum(0), I.sum(0)),
         "max_rows": (lambda: Tensor(S).max(1), S.max(1))}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CASES))
def test_upcast_kernels_match_numpy_and_the_other_device(device, name, upcast_any_size):
  """Tiles of 8, 4x8, 8x2 outputs, and extents no lane count divides, against numpy and the other runtime."""
  make, expect = CASES[name]
  got = on(device, lambda: make().contiguous())
  other = on("PYTHON" if device == "CPU" else device, lambda: make().contiguous())
  np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(got, other, rtol=1e-5, atol=1e-5)


def conv_numpy(x, w, stride=1, padding=0, dilation=1, groups=1):
  x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  k = (w.shape[2] - 1) * dilation + 1
  windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride, ::dilation,
                                                                              ::dilation]
  cin, cout = x.shape[1] // groups, w.shape[0] // groups
  with np.errstate(invalid="ignore"):
    return np.concatenate([np.einsum("nchwij,ocij->nohw", windows[:, g * cin:(g + 1) * cin],
                                     w[g * cout:(g + 1) * cout]) for g in range(groups)], axis=1)


WIDE = rng.standard_normal((1, 3, 9, 37)).astype(np.float32)
W3, W5 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32), rng.standard_normal((6, 3, 5, 5)).astype(np.float32)
WG = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
MASK = rng.standard_normal((1, 8, 9, 37)) > 0   # a bool buffer read along the runs: loaded lane by lane
W_INF = W3.copy()
W_INF[2, 1, 0, 0], W_INF[5, 0, 2, 2] = np.inf, -np.inf   # where the padding meets them: 0 * inf is nan
CONVS = {  # name: (program over tensors, numpy result): widths no lane count divides, masks of every border width
  "pad1": (lambda: Tensor(WIDE).conv2d(Tensor(W3), padding=1), conv_numpy(WIDE, W3, padding=1)),
  "pad2_k5": (lambda: Tensor(WIDE).conv2d(Tensor(W5), padding=2), conv_numpy(WIDE, W5, padding=2)),
  "stride2": (lambda: Tensor(WIDE).conv2d(Tensor(W3), padding=1, stride=2), conv_numpy(WIDE, W3, 2, 1)),
  "dilation2": (lambda: Tensor(WIDE).conv2d(Tensor(W3), padding=2, dilation=2), conv_numpy(WIDE, W3, 1, 2, 2)),
  "depthwise": (lambda: Tensor(WIDE[:, :1].repeat(8, 1)).conv2d(Tensor(WG), padding=1, groups=8),
                conv_numpy(WIDE[:, :1].repeat(8, 1), WG, padding=1, groups=8)),
  "bias_relu": (lambda: Tensor(WIDE).conv2d(Tensor(W3), Tensor(np.arange(8, dtype=np.float32) - 4), padding=1).relu(),
                np.maximum(conv_numpy(WIDE, W3, padding=1) + (np.arange(8, dtype=np.float32) - 4)[:, None, None], 0)),
  "relu_masked": (lambda: Tensor(MASK).where(Tensor(WIDE).conv2d(Tensor(W3), padding=1).relu(), -1.0),
                  np.where(MASK, np.maximum(conv_numpy(WIDE, W3, padding=1), 0), np.float32(-1))),
  "clip": (lambda: Tensor(WIDE).conv2d(Tensor(W3), padding=1).clip(-0.5, 0.5),
           np.clip(conv_numpy(WIDE, W3, padding=1), -0.5, 0.5)),
  "inf_weights": (lambda: Tensor(WIDE).conv2d(Tensor(W_INF), padding=1), conv_numpy(WIDE, W_INF, padding=1)),
  "avg_pool": (lambda: Tensor(WIDE).avg_pool2d(kernel_size=3, stride=1, padding=1, count_include_pad=True),
               conv_numpy(WIDE, np.eye(3, dtype=np.float32)[:, :, None, None] * np.full((3, 3), 1 / 9, np.float32),
                          padding=1)),
  "max_pool": (lambda: Tensor(WIDE).max_pool2d(kernel_size=3, stride=1, padding=1),
               np.lib.stride_tricks.sliding_window_view(np.pad(WIDE, ((0, 0), (0, 0), (1, 1), (1, 1)),
                                                               constant_values=-np.inf),
                                                        (3, 3), axis=(2, 3)).max((4, 5))),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CONVS))
def test_padded_and_odd_width_convolutions_match_numpy_and_the_other_device(device, name, upcast_any_size):
  """The interior, its runs of 8 and 4 lanes, and the masked border parts together give every output, with the nan
  that a padded zero times an infinite weight makes."""
  make, expect = CONVS[name]
  got = on(device, lambda: make().contiguous())
  other = on("PYTHON" if device == "CPU" else device, lambda: make().contiguous())
  np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(got, other, rtol=1e-5, atol=1e-5)
  if name == "inf_weights": assert np.isnan(got).any() and np.array_equal(np.isnan(got), np.isnan(expect))


def test_negative_and_positive_zero_constants_stay_apart():
  # where(valid, -0.0, 0.0) + where(valid, 0.0, -inf): one instruction for both zeros made it -0.0 + -0.0 on CPU
  # (-0.0, sign kept), while PYTHON computed -0.0 + 0.0 (+0.0); the pad of a negated constant 0 builds this
  program = lower((-Tensor.zeros(2)).cummax(0).schedule()[0].ast)
  zeros = [i.arg for i in program.instrs if i.op is Ops.CONST and i.arg == 0 and isinstance(i.arg, float)]
  assert sorted(np.signbit(zeros).tolist()) == [False, True], program.listing()
  results = [on(device, lambda: (-Tensor.zeros(2)).cummax(0)) for device in DEVICES]
  for got in results: assert np.signbit(got).tolist() == [False, False]
  assert exact_key(-0.0) != exact_key(0.0) and exact_key(1.5) == 1.5
