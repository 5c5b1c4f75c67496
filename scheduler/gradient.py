"""Autograd over UOps: one gradient rule per op, applied in reverse topological order.

Sits between the Tensor frontend (which calls `compute_gradient` from `backward`) and the IR.
"""
from __future__ import annotations
import math
from scheduler.dtype import dtypes, sum_acc_dtype
from scheduler.helpers import argsort, Metadata
from scheduler.ops import UOp, Ops, UPat, PatternMatcher, all_metadata


def _reduce_gradient(ctx: UOp, ret: UOp):
  src = ret.src[0]
  if ret.arg[0] is Ops.ADD: return (ctx.expand(src.shape),)
  if ret.arg[0] is Ops.MAX:
    max_is_1s = src.ne(ret.expand(src.shape)).ne(src.const_like(1).cast(dtypes.bool)).cast(ctx.dtype)
    div = max_is_1s.r(Ops.ADD, ret.arg[1]).expand(src.shape)
    return ((max_is_1s / div) * ctx.expand(src.shape),)
  if ret.arg[0] is Ops.MUL: return ((ctx * ret).expand(src.shape) / src,)
  return None


def _expand_gradient(ctx: UOp, ret: UOp):
  axes = tuple(i for i, (si, so) in enumerate(zip(ret.src[0].shape, ret.arg)) if si != so)
  return (ctx.cast(sum_acc_dtype(ctx.dtype)).r(Ops.ADD, axes).cast(ctx.dtype),)


# each rule gets the gradient of the output as ctx and returns one gradient per source (None: no gradient)
pm_gradient = PatternMatcher([
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),)),
  (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: ((math.pi / 2 - ret.src[0]).sin() * ctx,)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (ctx / (ret.src[0] * math.log(2)),)),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ret * ctx * math.log(2),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * 2),)),
  (UPat((Ops.CMPLT, Ops.CMPNE)), lambda: (None, None)),
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
  (UPat(Ops.MAX, name="ret"), lambda ctx, ret: (
    (ret.src[0] > ret.src[1]).where(ctx, (ret.src[0].ne(ret.src[1])).where(ctx.const_like(0), ctx * 0.5)),
    (ret.src[0] < ret.src[1]).where(ctx, (ret.src[0].ne(ret.src[1])).where(ctx.const_like(0), ctx * 0.5)))),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ret.src[1] * ctx, ret.src[0] * ctx)),
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, ret.src[0].where(ctx, ctx.const_like(0)), ret.src[0].where(ctx.const_like(0), ctx))),
  (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_gradient),
  (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),
  (UPat(Ops.CONTIGUOUS_BACKWARD), lambda ctx: (ctx.contiguous(),)),
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(argsort(ret.arg)),)),
  (UPat(Ops.PAD, name="ret"), lambda ctx, ret: (ctx.shrink(tuple((p[0], s + p[0]) for s, p in zip(ret.src[0].shape, ret.arg))),)),
  (UPat(Ops.SHRINK, name="ret"), lambda ctx, ret: (ctx.pad(tuple((p[0], s - p[1]) for s, p in zip(ret.src[0].shape, ret.arg))),)),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
  (UPat(Ops.EXPAND, name="ret"), _expand_gradient),
  (UPat(Ops.BITCAST), lambda ctx: (None,)),
])


def _deepwalk(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes between the root and the targets, sources before users (DETACH cuts the walk)."""
  in_path: dict[UOp, bool] = {}
  for u in root.toposort: in_path[u] = any(s in targets or in_path[s] for s in u.src)
  out: list[UOp] = []
  visited: set[UOp] = set()
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    node, done = stack.pop()
    if done:
      out.append(node)
      continue
    if node in visited: continue
    visited.add(node)
    if node.op is Ops.DETACH or not in_path[node]: continue
    stack.append((node, True))
    for s in reversed(node.src):
      if s not in visited: stack.append((s, False))
  return out


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  grads = {root: root_grad}
  for t0 in reversed(_deepwalk(root, targets)):
    if t0 not in grads: continue
    lgrads = pm_gradient.rewrite(t0, ctx=grads[t0])
    if lgrads is None: raise RuntimeError(f"no gradient rule for {t0.op}")
    if len(lgrads) != len(t0.src): raise RuntimeError(f"gradient of {t0.op} gave {len(lgrads)} gradients for {len(t0.src)} sources")
    for k, v in zip(t0.src, lgrads):
      if v is None: continue
      grads[k] = grads[k] + v if k in grads else v
      if (fwd := all_metadata.get(t0)) is not None and v not in all_metadata: all_metadata[v] = Metadata(fwd.name, fwd.caller, True)
  return grads
