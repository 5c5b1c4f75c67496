"""The CPU device against numpy, side by side in one run (warm: compile excluded): a 256x256 matmul, a
long elementwise chain and a large sum; then the per-kernel time of lowering and rendering."""
import time
import numpy as np


def best(fn, reps=7) -> float:
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def main():
  from scheduler import Tensor, Device
  from scheduler.realize import run_schedule
  from scheduler.codegen.lowerer import lower
  from runtimes.cpu import render_c
  Device.DEFAULT = "CPU"
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((256, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32)
  v = rng.standard_normal(1 << 22).astype(np.float32)
  ta, tb, tv = Tensor(a).realize(), Tensor(b).realize(), Tensor(v).realize()
  cases = {
    "matmul 256x256": (lambda: a @ b, lambda: ta @ tb),
    "elementwise chain 4M": (lambda: np.maximum((v * 2 + 1) * v - 0.5, 0), lambda: (((tv * 2 + 1) * tv - 0.5).relu())),
    "sum 4M": (lambda: v.sum(), lambda: tv.sum()),
  }
  asts = []
  for name, (np_fn, t_fn) in cases.items():
    sched = t_fn().schedule()  # the schedule for this program, run repeatedly: only the kernels are timed
    asts += [si.ast for si in sched if si.ast.op.name == "SINK"]
    run_schedule(sched)  # compile + warm
    ours, theirs = best(lambda: run_schedule(sched)), best(np_fn)
    print(f"{name:<22} numpy {theirs * 1e3:8.2f} ms   CPU device {ours * 1e3:8.2f} ms   ratio {ours / theirs:5.2f}x")
  t0 = time.perf_counter()
  reps = 20
  for _ in range(reps):
    for ast in asts: render_c(lower(ast))
  per = (time.perf_counter() - t0) / (reps * len(asts))
  print(f"lowering + rendering: {per * 1e3:.2f} ms per kernel (mean over {len(asts)} kernels x {reps})")
  print("goal: CPU device within 3x of numpy on the elementwise chain and the sum")


if __name__ == "__main__": main()
