"""Workloads for paths the models never take: integer arithmetic on negative operands, float floor division, views
of views of realized buffers (also across devices), and the orderings of assigns that a scheduler must respect."""
from __future__ import annotations
import math
import numpy as np
from scheduler import Tensor, dtypes


def int_arith_negative() -> dict:
  """Division, modulo, shifts and casts of int32 tensors holding negative values (and int8/uint8 wrap-around)."""
  a = Tensor(np.array([-7, -6, -1, 0, 1, 5, 7, -128, 127, -2**20], dtype=np.int32)).realize()
  b = Tensor(np.array([2, -4, 3, 5, -3, -5, 2, 7, -8, 3], dtype=np.int32)).realize()
  wrapped = a.cast(dtypes.uint32)   # shifts are defined on unsigned integers: negative values wrap around first
  outs = [a // b, a % b, a * -3 + b, a // -3, a % 7, wrapped << 3, wrapped >> 5, (-a).cast(dtypes.uint32) >> 1,
          a.maximum(b) - a.minimum(b),
          (a.cast(dtypes.float32) / 3).cast(dtypes.int32), a.cast(dtypes.int8), a.cast(dtypes.uint8),
          (a * 3 // -2).abs(),
          a.sign() * (a.abs() % 4), (a < b).where(a, -b),
          a / b, (a % 5).exp2(), a * 0.5]   # integers promoted to float: true division, a float op, a float scalar
  Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}


def float_floor_division() -> dict:
  """Float // and % as data pipelines use them: hour of day and day of week of minute timestamps (exact multiples of
  60 and 1440 among them, and times before the epoch), histogram buckets of signed values, grid coordinates of flat
  indices held as floats (also in float16), and angles wrapped into [0, 2 pi)."""
  minutes = Tensor(np.array([0, 59, 60, 61, 1439, 1440, 10079, 10080, 525600, -1, -60, -1441, -1785],
                            dtype=np.float32)).realize()
  values = Tensor(np.linspace(-3.5, 3.5, 29, dtype=np.float32)).realize()
  flat = Tensor(np.arange(-21, 36, dtype=np.float32)).realize()
  width = Tensor(np.full(57, 7.0, dtype=np.float32)).realize()
  angles = Tensor(np.linspace(-20.0, 20.0, 17, dtype=np.float32)).realize()
  hour = (minutes // 60) % 24
  outs = [hour, (minutes // 1440) % 7, minutes % 60, hour * 60 + minutes % 60,
          values // 0.25, values % 0.5, (values // 0.5).clip(-4, 3) + 4,
          flat // width, flat % width, flat // -7, flat % -3, flat.cast(dtypes.float16) % 7,
          angles % (2 * math.pi)]
  Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}


def nested_views() -> dict:
  """Views of views of realized buffers: shrinks of shrinks, a permuted pad of a flip, strided slices copied to
  another device, and a reshape of a slice used as a reduce input."""
  base = Tensor(np.arange(96, dtype=np.float32).reshape(8, 12)).realize()
  inner = base[1:7, 2:10][1:5, ::2]
  outs = [inner.contiguous(), inner.flip(1).pad(((1, 0), (0, 2))).permute(1, 0).contiguous(),
          base[2:6].to("PYTHON").contiguous(), base[3:5, 4:8].reshape(8).to("PYTHON") * 2,
          base[:, 3:9].reshape(8, 2, 3).sum(2), base.reshape(4, 24)[1:3].reshape(2, 4, 6)[:, 1:3].contiguous(),
          # flips of padded views (the mask flips with the data), uneven pads on both sides of both axes
          base[:5, :7].pad(((1, 3), (2, 0))).flip(0).contiguous(), base[2:, 1:].pad(((0, 2), (3, 1))).flip((0, 1)) + 1,
          base[1:4].pad(((2, 1), (1, 2))).flip(1).sum(0),
          # strided and offset reshapes whose index divisions reach their divisor exactly
          base.reshape(96)[1:95].reshape(2, 47)[:, ::3].contiguous(),
          base.reshape(96)[5:].reshape(7, 13)[:, 1:].reshape(12, 7).sum(1),
          # permuted views flattened and cut one past an inner extent: index // and % whose numerator reaches the
          # divisor
          base[:4, :6].permute(1, 0).reshape(24)[:5].contiguous(),
          base[:2, :12].reshape(2, 3, 4).permute(2, 0, 1).reshape(24)[:7] * 3]
  Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}


def constant_reductions() -> dict:
  """Reductions whose input is a constant or a masked constant (max, min, prod and sum of fills, pads and
  triangles), which the scheduler folds or keeps depending on the reduce op and FUSE_ARANGE."""
  outs = [Tensor.full((4, 8), 2.5).max(1), Tensor.full((3, 5), -1.5).min(0), Tensor.full((6,), 1.5).prod(),
          Tensor.ones(4, 4).pad(((1, 0), (0, 2)), value=-3.0).max(0), Tensor.ones(5, 5).tril().max(1),
          Tensor.ones(5, 5).triu(1).sum(0),
          Tensor.ones(8).cumsum().max(), Tensor.full((4, 6), 3).cummax(1).sum(0),
          (Tensor.arange(12).reshape(3, 4) * 0 + 2).max(1)]
  Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}


def assign_orderings() -> dict:
  """Reads scheduled before an assign to the same buffer, a swap of two buffers, and chained assigns."""
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  b = Tensor(np.arange(8, dtype=np.float32) * -1).realize()
  read_before = a + 1                 # must see a before the assign below
  a.assign(a * 2)
  Tensor.realize(read_before, a)
  old_a, old_b = a.clone(), b.clone()
  Tensor.realize(old_a, old_b)
  a.assign(old_b); b.assign(old_a)    # a swap through copies
  Tensor.realize(a, b)
  c = Tensor.zeros(8).contiguous().realize()
  for i in range(3): c.assign(c + a * (i + 1))   # chained assigns, one realize
  c.realize()
  d = Tensor(np.ones((4, 4), dtype=np.float32)).realize()
  d.assign(d.T.contiguous() + d)      # an assign that reads its own target transposed, through a copy
  d.realize()
  return {"outputs": [read_before.numpy(), a.numpy(), b.numpy(), c.numpy(), d.numpy()]}


def big_reductions() -> dict:
  """Reductions long enough to be split in two kernels (SPLIT_REDUCEOP, REDUCEOP_SPLIT_THRESHOLD), which no model
  workload reaches: a full sum and max, per-row sums of long rows, a root mean square."""
  x = Tensor(np.random.default_rng(8).standard_normal(1 << 17).astype(np.float32)).realize()
  outs = [x.sum(), x.max(), x.reshape(2, 1 << 16).sum(1), (x * x).mean().sqrt(), x.reshape(1 << 9, 1 << 8).sum(0)]
  Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}


def special_values_input() -> np.ndarray:
  """128x256 normal floats with NaN, +inf, -inf and -0.0 sown in a fixed pattern."""
  a = np.random.default_rng(21).standard_normal((128, 256)).astype(np.float32)
  a[::7, ::5], a[::11, ::3], a[::13, ::4], a[::17, ::6] = np.nan, np.inf, -np.inf, -0.0
  return a


def special_values() -> dict:
  """IEEE special values (NaN, infinities, signed zero) through comparisons, arithmetic, math functions and
  reductions (max only where no NaN is left: which NaN wins a max is not specified), on tensors large enough that
  the C compiler optimizes their kernels: x != x, x - x, 1/x, sqrt and sums
  must keep their IEEE meaning (a compiler flag or rewrite that assumes finite values changes them)."""
  x = Tensor(special_values_input()).realize()
  finite = (x != x).where(0, x).clip(-3, 3)
  outs = [x != x, x - x, 1 / x, x.sqrt(), x.sum(1), (x != x).where(0, x).sum(1), x.maximum(0.5),
          (x != x).where(0, x).max(1), -x,
          x < 1e30, finite.sum(1) * 1e-3, (finite * finite).sum(0)]
  Tensor.realize(*outs)
  return {"outputs": [o.numpy() for o in outs]}


def disk_views() -> dict:
  """Views of a file on the DISK device: a bitcast slice realized as a view of the file's buffer, then sliced again
  (a view of a view: the offsets add up), and a view read through two slices before anything is realized."""
  import os
  from scripts.workloads.files import exclusive_folder
  with exclusive_folder("process-replay-disk-views") as folder:
    path = os.path.join(folder, "values.bin")   # a fixed path: the device name is part of the captured graph
    np.arange(32, dtype=np.float32).tofile(path)
    disk = Tensor.empty(128, dtype=dtypes.uint8, device=f"DISK:{path}")
    second_half = disk[64:128].bitcast(dtypes.float32).realize()
    outs = [second_half[1:3].to("CPU"), second_half[5:].to("CPU") * 2,
            disk[16:96][8:40].bitcast(dtypes.float32).to("CPU") + 1]
    return {"outputs": [o.numpy() for o in outs]}
