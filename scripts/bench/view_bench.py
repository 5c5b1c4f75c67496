"""Cost of view algebra on masked views (issue 28): reshaping padded and shrunk views of large tensors, and the
ShapeTracker queries the scheduler asks of them (real_size, real_strides, axis_is_masked).

    python -m scripts.bench.view_bench [--rounds 5]

Each case is timed next to the same operation on the unmasked view of the same shape, in one run: the first call
(views cache their reshapes, so later calls are lookups) and the best of the rounds; the ratio masked / unmasked of
the first calls says what the mask costs. Masked reshapes must stay in milliseconds.
"""
from __future__ import annotations
import argparse, time
from scheduler.shape.shapetracker import ShapeTracker

# (name, shape, movement that masks it, the reshape applied after it)
CASES = [
  ("pad 2-d, flatten", (1024, 1024), ("pad", ((2, 2), (0, 0))), (1028 * 1024,)),
  ("pad image, merge hw", (3, 224, 224), ("pad", ((0, 0), (1, 1), (1, 1))), (3, 226 * 226)),
  ("pad 4-d, regroup", (4, 256, 256), ("pad", ((0, 0), (3, 3), (3, 3))), (4 * 262, 262)),
  ("shrink 1-d, split", (1 << 20,), ("shrink", ((3, 1_000_003),)), (1000, 1000)),
  ("shrink 2-d, split to 4-d", (1024, 1024), ("shrink", ((1, 1023), (2, 1000))), (2, 511, 2, 499)),
  ("pad 1-d, split in 13 axes", (8190,), ("pad", ((1, 1),)), (2,) * 13),
]


def first_and_best(fn, rounds: int) -> tuple[float, float]:
  times = []
  for _ in range(rounds):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return times[0], min(times)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  print(f"{'case':<28} {'masked ms':>10} {'unmasked ms':>12} {'ratio':>7} {'cached ms':>10}   first queries ms "
        "(real_size, real_strides, axis_is_masked)")
  for name, shape, (movement, arg), new_shape in CASES:
    masked = getattr(ShapeTracker.from_shape(shape), movement)(arg)
    plain = ShapeTracker.from_shape(masked.shape)
    masked_s, cached_s = first_and_best(lambda: masked.reshape(new_shape), args.rounds)
    plain_s, _ = first_and_best(lambda: plain.reshape(new_shape), args.rounds)
    reshaped = masked.reshape(new_shape)
    queries = [first_and_best(q, 1)[0] for q in (reshaped.real_size, reshaped.real_strides,
                                                   lambda: reshaped.axis_is_masked(0))]
    print(f"{name:<28} {masked_s * 1e3:>10.3f} {plain_s * 1e3:>12.3f} {masked_s / max(plain_s, 1e-9):>7.1f} "
          f"{cached_s * 1e3:>10.4f}   " + ", ".join(f"{q * 1e3:.2f}" for q in queries))


if __name__ == "__main__": main()
