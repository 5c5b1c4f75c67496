"""Median time of create_schedule_with_vars on a 2-layer MLP training step (forward, sparse
categorical crossentropy, backward, SGD assign) and on a small CNN forward, with kernel counts.
If tinygrad is importable it is timed on the same programs and the ratio printed."""
import statistics, time
import numpy as np


def mlp_step(lib):
  Tensor = lib.Tensor
  x = Tensor(np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)).realize()
  y = Tensor(np.random.default_rng(1).integers(0, 10, 32).astype(np.int32)).realize()
  w1 = Tensor(np.random.default_rng(2).standard_normal((64, 128)).astype(np.float32), requires_grad=True).realize()
  w2 = Tensor(np.random.default_rng(3).standard_normal((128, 10)).astype(np.float32), requires_grad=True).realize()
  loss = ((x @ w1).relu() @ w2).sparse_categorical_crossentropy(y)
  loss.backward()
  w1.assign(w1.detach() - w1.grad * 0.01); w2.assign(w2.detach() - w2.grad * 0.01)
  return [loss, w1, w2]


def cnn_forward(lib):
  Tensor = lib.Tensor
  x = Tensor(np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)).realize()
  w1 = Tensor(np.random.default_rng(1).standard_normal((8, 3, 3, 3)).astype(np.float32)).realize()
  w2 = Tensor(np.random.default_rng(2).standard_normal((16, 8, 3, 3)).astype(np.float32)).realize()
  fc = Tensor(np.random.default_rng(3).standard_normal((16 * 2 * 2, 10)).astype(np.float32)).realize()
  h = x.conv2d(w1).relu().max_pool2d().conv2d(w2).relu().max_pool2d()
  return [h.reshape(4, -1) @ fc]


def time_schedule(lib, build, schedule_fn, reps=7):
  times, count = [], 0
  for _ in range(reps):
    outs = build(lib)
    sink = outs[0].lazydata.sink(*[t.lazydata for t in outs[1:]])
    t0 = time.perf_counter()
    sched = schedule_fn(sink)
    times.append(time.perf_counter() - t0)
    count = len(sched[0])
  return statistics.median(times), count


def main():
  import scheduler
  from scheduler.schedule import create_schedule_with_vars
  scheduler.Device.DEFAULT = "PYTHON"
  peer = None
  try:
    import tinygrad  # optional peer; never a dependency
    from tinygrad.engine.schedule import create_schedule_with_vars as peer_schedule
    tinygrad.Device.DEFAULT = "CPU" if "CPU" in tinygrad.Device._devices else tinygrad.Device.DEFAULT
    peer = (tinygrad, peer_schedule)
  except Exception: pass
  for name, build in (("mlp training step", mlp_step), ("cnn forward", cnn_forward)):
    ours, n = time_schedule(scheduler, build, create_schedule_with_vars)
    line = f"{name:<18} ours: {ours*1e3:7.2f} ms median, {n} kernels"
    if peer is not None:
      theirs, pn = time_schedule(peer[0], build, peer[1])
      line += f" | tinygrad: {theirs*1e3:7.2f} ms, {pn} kernels | ratio ours/tinygrad {ours/theirs:.2f}"
    else: line += " | tinygrad not installed: no ratio"
    print(line)


if __name__ == "__main__": main()
