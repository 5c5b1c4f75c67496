"""Rewrites per second of graph_rewrite on a graph of at least 10,000 nodes (symbolic rules on a
long chain of index arithmetic). Prints numbers; asserts nothing."""
import time
from scheduler.ops import UOp, graph_rewrite
from scheduler.symbolic import symbolic, symbolic_simple, Variable
from scheduler.dtype import dtypes


def build(n: int) -> UOp:
  vs = [Variable(f"v{i}", 0, 16) for i in range(8)]
  e = UOp.const(dtypes.int32, 0)
  nodes = []
  for i in range(n):
    e = (e + vs[i % 8] * (i % 5 + 1) + 0) * 1 if i % 3 else (e + vs[i % 8]) // 1
    nodes.append(e % (i + 7))
  return UOp.sink(*nodes)


def main():
  sink = build(2500)
  n_nodes = len(sink.toposort)
  for name, pm in (("symbolic (full index simplifier)", symbolic),
                   ("symbolic_simple (folding and identities)", symbolic_simple)):
    best = None
    for _ in range(3):
      t0 = time.perf_counter()
      out = graph_rewrite(sink, pm)
      dt = time.perf_counter() - t0
      best = dt if best is None else min(best, dt)
    print(f"{name:<42} graph of {n_nodes} nodes -> {len(out.toposort)} nodes; best of 3: {best*1e3:7.1f} ms; "
          f"{n_nodes/best:,.0f} nodes rewritten per second")


if __name__ == "__main__": main()
