"""Median time of create_schedule_with_vars on an MLP training step (forward, sparse categorical
crossentropy, backward, SGD assign), a small CNN forward and forward+backward, a causal transformer block,
and a 64-layer MLP forward+backward, with kernel counts; then `Tensor.schedule_with_vars` of 16-, 32- and 64-layer
MLP steps with every tensor live (time and memory held, with their slopes against layers), and the memory the
scheduler leaves behind for 16- and 64-layer MLPs (it should grow linearly). If tinygrad is importable it is timed
on the same programs and the ratio printed (the bench installs nothing)."""
import gc, statistics, time, tracemalloc
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


def _arr(seed: int, *shape):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def cnn_train(lib):
  Tensor = lib.Tensor
  x = Tensor(_arr(0, 4, 3, 16, 16)).realize()
  w1, w2 = Tensor(_arr(1, 8, 3, 3, 3), requires_grad=True).realize(), Tensor(_arr(2, 16, 8, 3, 3),
                                                                             requires_grad=True).realize()
  fc = Tensor(_arr(3, 16 * 2 * 2, 10), requires_grad=True).realize()
  y = Tensor(np.random.default_rng(4).integers(0, 10, 4).astype(np.int32)).realize()
  h = x.conv2d(w1).relu().max_pool2d().conv2d(w2).relu().max_pool2d()
  loss = (h.reshape(4, -1) @ fc).sparse_categorical_crossentropy(y)
  loss.backward()
  return [loss, w1.grad, w2.grad, fc.grad]


def transformer_block(lib):
  Tensor = lib.Tensor
  bs, seq, dim, heads = 2, 16, 32, 4
  x = Tensor(_arr(0, bs, seq, dim)).realize()
  wq, wk, wv, wo = (Tensor(_arr(i, dim, dim)).realize() for i in range(1, 5))
  w1, w2 = Tensor(_arr(5, dim, 4 * dim)).realize(), Tensor(_arr(6, 4 * dim, dim)).realize()
  def split(t): return t.reshape(bs, seq, heads, dim // heads).transpose(1, 2)
  h = x.layernorm()
  attn = split(h @ wq).scaled_dot_product_attention(split(h @ wk), split(h @ wv), is_causal=True)
  x = x + attn.transpose(1, 2).reshape(bs, seq, dim) @ wo
  return [x + (x.layernorm() @ w1).gelu() @ w2]


def deep_mlp(lib, layers=64):
  Tensor = lib.Tensor
  x = Tensor(_arr(0, 8, 32)).realize()
  weights = [Tensor(_arr(i + 1, 32, 32) * 0.1, requires_grad=True).realize() for i in range(layers)]
  h = x
  for w in weights: h = (h @ w).relu()
  loss = h.sum()
  loss.backward()
  return [loss, *[w.grad for w in weights]]


def retained_bytes(lib, schedule_fn, layers: int) -> int:
  """Bytes still allocated after scheduling a deep MLP step and dropping the results."""
  outs = deep_mlp(lib, layers)
  sink = outs[0].lazydata.sink(*[t.lazydata for t in outs[1:]])
  gc.collect()
  tracemalloc.start()
  before = tracemalloc.get_traced_memory()[0]
  result = schedule_fn(sink)
  del result
  gc.collect()
  after = tracemalloc.get_traced_memory()[0]
  tracemalloc.stop()
  return after - before


def live_graph(lib, layers: int, trace: bool) -> float:
  """Seconds of `Tensor.schedule_with_vars` on a deep MLP step with every tensor of it still referenced (the
  activations, the weights, their gradients: each must then point at its result), or with `trace` the bytes the graph
  and the schedule hold while they live (tracemalloc slows the run: the two are measured apart)."""
  Tensor = lib.Tensor
  gc.collect()
  if trace:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
  x = Tensor(_arr(0, 8, 32)).realize()
  weights = [Tensor(_arr(i + 1, 32, 32) * 0.1, requires_grad=True).realize() for i in range(layers)]
  live, h = [], x
  for w in weights:
    h = (h @ w).relu()
    live.append(h)
  loss = h.sum()
  loss.backward()
  t0 = time.perf_counter()
  sched = loss.schedule_with_vars(*[w.grad for w in weights])
  seconds = time.perf_counter() - t0
  if not trace: return seconds
  held = tracemalloc.get_traced_memory()[0] - before
  tracemalloc.stop()
  del sched, live
  return held


def slope(xs: list, ys: list) -> float:
  """The log-log slope of ys against xs (1.0: linear)."""
  import math
  lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-12)) for y in ys]
  mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
  return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def live_graphs(lib, label: str, depths=(16, 32, 64), reps=5) -> dict[int, float]:
  live_graph(lib, depths[0], trace=False)   # warm the pattern tables
  times = {n: statistics.median(live_graph(lib, n, trace=False) for _ in range(reps)) for n in depths}
  live_graph(lib, depths[0], trace=True)   # caches that fill on first use under tracing are not the graph's
  held = {n: live_graph(lib, n, trace=True) for n in depths}
  print(f"schedule_with_vars, all tensors live ({label}): " +
        ", ".join(f"{n} layers {times[n] * 1e3:.1f} ms / {held[n] / 1e6:.2f} MB" for n in depths) +
        f"; slope against layers: time {slope(list(depths), [times[n] for n in depths]):.2f}, memory "
        f"{slope(list(depths), [held[n] for n in depths]):.2f} (1.0 = linear)")
  return times


def time_schedule(lib, build, schedule_fn, reps=11):
  """Median over `reps` runs after one untimed run (the first builds each library's pattern tables and caches)."""
  times, count = [], 0
  for rep in range(reps + 1):
    outs = build(lib)
    sink = outs[0].lazydata.sink(*[t.lazydata for t in outs[1:]])
    t0 = time.perf_counter()
    sched = schedule_fn(sink)
    if rep: times.append(time.perf_counter() - t0)
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
  for name, build in (("mlp training step", mlp_step), ("cnn forward", cnn_forward), ("cnn fwd+bwd", cnn_train),
                      ("transformer block", transformer_block), ("64-layer mlp f+b", deep_mlp)):
    ours, n = time_schedule(scheduler, build, create_schedule_with_vars)
    line = f"{name:<18} ours: {ours*1e3:7.2f} ms median, {n} kernels"
    if peer is not None:
      theirs, pn = time_schedule(peer[0], build, peer[1])
      line += f" | tinygrad: {theirs*1e3:7.2f} ms, {pn} kernels | ratio ours/tinygrad {ours/theirs:.2f}"
    else: line += " | tinygrad not installed: no ratio"
    print(line)
  ours_live = live_graphs(scheduler, "ours")
  if peer is not None:
    theirs_live = live_graphs(peer[0], "tinygrad")
    print("ratio ours/tinygrad, all tensors live: " +
          ", ".join(f"{n} layers {ours_live[n] / theirs_live[n]:.2f}" for n in ours_live))
  for lib, fn, label in ((scheduler, create_schedule_with_vars, "ours"),) + (((peer[0], peer[1], "tinygrad"),) if peer
                                                                             else ()):
    small, large = retained_bytes(lib, fn, 16), retained_bytes(lib, fn, 64)
    print(f"memory left after scheduling ({label}): 16 layers {small / 1e6:.2f} MB, 64 layers {large / 1e6:.2f} MB "
          f"(ratio {large / max(small, 1):.1f} for 4x the layers)")


if __name__ == "__main__": main()
