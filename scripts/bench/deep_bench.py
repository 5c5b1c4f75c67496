"""Cost of depth: scheduling, capturing and replaying graphs 1k, 10k and 100k elementwise steps deep, and a
1,000-layer MLP (plain and residual) forward and backward (issue 25).

    python -m scripts.bench.deep_bench [--depths 1000 10000 100000] [--mlp-layers 1000]

Each program runs in a fresh interpreter with the default recursion limit, on the PYTHON device (the C compiler's
time on a 200,000-operation function is not the harness's or the scheduler's). Per depth it prints the seconds
and the seconds per node of: building the graph, scheduling it, realizing it with capture on (scheduling, lowering,
running and storing the captures), and replaying the captures; and the peak memory per node. Then the slope of
each phase's time against depth on a log-log scale between the smallest and the largest depth: 1.0 is linear.
"""
from __future__ import annotations
import argparse, json, math, os, subprocess, sys, tempfile, textwrap, time

CHAIN = """
import json, resource, sys, time
import numpy as np
from scheduler import Tensor, Device
Device.DEFAULT = "PYTHON"
depth = {depth}
start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
x = Tensor(np.ones(4, np.float32))
y = x
for _ in range(depth): y = y * 0.999 + x
t1 = time.perf_counter()
nodes = len(y.lazydata.toposort)
t1b = time.perf_counter()
y.schedule() if {schedule_only} else y.realize()
t2 = time.perf_counter()
print(json.dumps({{"build": t1 - t0, "run": t2 - t1b, "nodes": nodes,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss}}))
"""

MLP = """
import json, resource, time
import numpy as np
from scheduler import Tensor, Device
Device.DEFAULT = "PYTHON"
layers = {depth}
start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rng = np.random.default_rng(0)
t0 = time.perf_counter()
weights = [Tensor((rng.standard_normal((8, 8)) * 0.35).astype(np.float32), requires_grad=True) for _ in range(layers)]
h = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
for w in weights: h = (h @ w).relu() + h * 0.5 if {residual} else (h @ w).relu()
loss = (h * h).mean()
loss.backward()
grads = [w.grad for w in weights]
t1 = time.perf_counter()
nodes = len(loss.lazydata.sink(*[g.lazydata for g in grads]).toposort)
t1b = time.perf_counter()
Tensor.schedule(loss, *grads) if {schedule_only} else Tensor.realize(loss, *grads)
t2 = time.perf_counter()
print(json.dumps({{"build": t1 - t0, "run": t2 - t1b, "nodes": nodes,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss}}))
"""


def _python(code: str, env: dict) -> dict:
  proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
  if proc.returncode != 0: raise SystemExit(f"the program failed:\n{proc.stderr[-3000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(template: str, depth: int, folder: str, residual: bool = False) -> dict:
  """Build and schedule; build, realize and capture; replay the captures: seconds and memory."""
  env = {k: v for k, v in os.environ.items() if k not in ("CAPTURE_PROCESS_REPLAY", "REPLAY_DB", "REPLAY_RUN_ID")}
  scheduled = _python(template.format(depth=depth, schedule_only=True, residual=residual), env)
  db = os.path.join(folder, f"deep-{depth}-{residual}.db")
  capture_env = {**env, "CAPTURE_PROCESS_REPLAY": "1", "REPLAY_DB": db}
  captured = _python(template.format(depth=depth, schedule_only=False, residual=residual), capture_env)
  t0 = time.perf_counter()
  replay = subprocess.run([sys.executable, "-m", "replay", "--db", db, "run", "--jobs", "1"], env=env,
                          capture_output=True, text=True)
  replay_s = time.perf_counter() - t0
  if replay.returncode != 0: raise SystemExit(f"the replay failed:\n{replay.stdout[-2000:]}{replay.stderr[-2000:]}")
  return {"depth": depth, "nodes": scheduled["nodes"], "build": scheduled["build"], "schedule": scheduled["run"],
          "capture": captured["run"], "replay": replay_s, "rss_kb": max(scheduled["rss_kb"], captured["rss_kb"])}


def slope(rows: list[dict], phase: str) -> float:
  a, b = rows[0], rows[-1]
  return math.log(b[phase] / a[phase]) / math.log(b["nodes"] / a["nodes"])


def report(title: str, rows: list[dict]) -> None:
  print(f"\n{title}")
  print(f"{'depth':>8} {'nodes':>8} | {'build s':>8} {'schedule s':>10} {'capture s':>9} {'replay s':>8} | "
        f"{'us/node: build':>14} {'schedule':>8} {'capture':>8} {'replay':>7} | {'KiB/node':>8}")
  for r in rows:
    per = {p: r[p] / r["nodes"] * 1e6 for p in ("build", "schedule", "capture", "replay")}
    print(f"{r['depth']:>8} {r['nodes']:>8} | {r['build']:8.2f} {r['schedule']:10.2f} {r['capture']:9.2f} "
          f"{r['replay']:8.2f} | "
          f"{per['build']:14.1f} {per['schedule']:8.1f} {per['capture']:8.1f} {per['replay']:7.1f} | "
          f"{r['rss_kb'] / r['nodes']:8.2f}")
  if len(rows) > 1:
    slopes = ", ".join(f"{p} {slope(rows, p):.2f}" for p in ("build", "schedule", "capture", "replay"))
    print("slope of time against nodes (log-log, 1.0 = linear): " + slopes)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m scripts.bench.deep_bench", description=__doc__.split("\n\n")[0])
  parser.add_argument("--depths", type=int, nargs="+", default=[1000, 10_000, 100_000])
  parser.add_argument("--mlp-layers", type=int, nargs="+", default=[100, 1000])
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix="deep-bench-") as folder:
    report("elementwise chain y = y * 0.999 + x", [measure(CHAIN, d, folder) for d in args.depths])
    report("MLP of 8x8 layers, forward and backward", [measure(MLP, d, folder) for d in args.mlp_layers])
    # with a scaled skip connection the gradient's skip path stays unrealized the whole way down, and the consumer
    # search of each backward reduce (SCHEDULER.md S43) walks it to the end: quadratic in layers, as specified
    report("residual MLP (h = relu(h W) + 0.5 h), forward and backward",
           [measure(MLP, d, folder, residual=True) for d in args.mlp_layers])
  return 0


if __name__ == "__main__": sys.exit(main())
