"""Autograd over UOps: the chain rule, one local derivative per op, applied from the root back.

Sits between the Tensor frontend (`Tensor.backward` and `Tensor.gradient` call `compute_gradient`) and
the IR. Each rule takes the gradient flowing into a node's output and the node, and returns one gradient
per source (None where the source gets none: comparisons, the WHERE condition, bitcasts). Rules are the
derivatives themselves, written with the UOp builders.
"""
from __future__ import annotations
import math
from typing import Callable, Optional
from scheduler.dtype import dtypes, sum_acc_dtype
from scheduler.helpers import argsort, Metadata
from scheduler.ops import UOp, Ops, all_metadata

Grads = tuple[Optional[UOp], ...]
LN2 = math.log(2)


def _max_reduce(g: UOp, out: UOp) -> Grads:
  """d max = g shared evenly among the positions that hold the maximum."""
  x, axes = out.src[0], out.arg[1]
  is_max = x.eq(out.expand(x.shape)).cast(g.dtype)
  ties = is_max.r(Ops.ADD, axes).expand(x.shape)
  return ((is_max / ties) * g.expand(x.shape),)


def _reduce(g: UOp, out: UOp) -> Grads:
  x, combine = out.src[0], out.arg[0]
  if combine is Ops.ADD: return (g.expand(x.shape),)          # d sum / dx_i = 1
  if combine is Ops.MUL: return ((g * out).expand(x.shape) / x,)   # d prod / dx_i = prod / x_i
  return _max_reduce(g, out)


def _maximum(g: UOp, out: UOp) -> Grads:
  """max(a, b): the larger side gets g, a tie gives each side half."""
  a, b = out.src
  def share(wins: UOp) -> UOp: return wins.where(g, a.ne(b).where(g.const_like(0), g * 0.5))
  return share(a > b), share(a < b)


def _expand(g: UOp, out: UOp) -> Grads:
  """A broadcast copies one value to many places: its gradient sums them (in the wider accumulator dtype)."""
  before = out.src[0].shape
  widened = tuple(axis for axis, (old, new) in enumerate(zip(before, out.arg)) if old != new)
  return (g.cast(sum_acc_dtype(g.dtype)).r(Ops.ADD, widened).cast(g.dtype),)


def _pad(g: UOp, out: UOp) -> Grads:
  return (g.shrink(tuple((before, before + extent) for extent, (before, _) in zip(out.src[0].shape, out.arg))),)


def _shrink(g: UOp, out: UOp) -> Grads:
  return (g.pad(tuple((begin, extent - end) for extent, (begin, end) in zip(out.src[0].shape, out.arg))),)


def _cast(g: UOp, out: UOp) -> Grads:
  """A cast between floats passes the gradient back; one through an int or a bool is piecewise constant (trunc,
  floor, ceil and round have derivative 0, a comparison cast to float none)."""
  source = out.src[0].dtype
  return (g.cast(source),) if dtypes.is_float(source.scalar) and dtypes.is_float(out.dtype.scalar) else (None,)


def _where(g: UOp, out: UOp) -> Grads:
  condition = out.src[0]
  zero = g.const_like(0)
  return None, condition.where(g, zero), condition.where(zero, g)


LOCAL_GRADIENTS: dict[Ops, Callable[[UOp, UOp], Grads]] = {
  # unary: d f(x) = f'(x) g
  Ops.RECIP: lambda g, out: (-g * out * out,),                               # (1/x)' = -1/x^2
  Ops.SIN: lambda g, out: ((math.pi / 2 - out.src[0]).sin() * g,),           # sin' = cos
  Ops.LOG2: lambda g, out: (g / (out.src[0] * LN2),),                        # log2(x)' = 1/(x ln 2)
  Ops.EXP2: lambda g, out: (out * g * LN2,),                                 # (2^x)' = 2^x ln 2
  Ops.SQRT: lambda g, out: (g / (out * 2),),                                 # sqrt(x)' = 1/(2 sqrt(x))
  Ops.CAST: _cast,
  Ops.BITCAST: lambda g, out: (None,),
  # binary and ternary
  Ops.ADD: lambda g, out: (g, g),
  Ops.MUL: lambda g, out: (out.src[1] * g, out.src[0] * g),
  Ops.MAX: _maximum,
  Ops.CMPLT: lambda g, out: (None, None),
  Ops.CMPNE: lambda g, out: (None, None),
  Ops.WHERE: _where,
  # reductions and markers
  Ops.REDUCE_AXIS: _reduce,
  Ops.CONTIGUOUS: lambda g, out: (g,),
  Ops.CONTIGUOUS_BACKWARD: lambda g, out: (g.contiguous(),),
  # movement: move the gradient back
  Ops.RESHAPE: lambda g, out: (g.reshape(out.src[0].shape),),
  Ops.PERMUTE: lambda g, out: (g.permute(argsort(out.arg)),),
  Ops.FLIP: lambda g, out: (g.flip(out.arg),),
  Ops.EXPAND: _expand,
  Ops.PAD: _pad,
  Ops.SHRINK: _shrink,
}


def _nodes_between(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes on some path from a target up to the root, sources first (DETACH cuts paths)."""
  leads_to_target: dict[UOp, bool] = {}
  for u in root.toposort: leads_to_target[u] = any(s in targets or leads_to_target[s] for s in u.src)
  return root.sources_first(lambda u: u.op is not Ops.DETACH and leads_to_target[u])


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """d root / d node for every node between root and targets, given d loss / d root = root_grad."""
  grads: dict[UOp, UOp] = {root: root_grad}
  for node in reversed(_nodes_between(root, targets)):
    if (g := grads.get(node)) is None: continue
    rule = LOCAL_GRADIENTS.get(node.op)
    if rule is None: raise RuntimeError(f"no gradient rule for {node.op}")
    local = rule(g, node)
    if len(local) != len(node.src):
      raise RuntimeError(f"gradient of {node.op} gave {len(local)} gradients for {len(node.src)} sources")
    forward = all_metadata.get(node)
    for source, contribution in zip(node.src, local):
      if contribution is None: continue
      grads[source] = grads[source] + contribution if source in grads else contribution
      if forward is not None and contribution not in all_metadata:
        all_metadata[contribution] = Metadata(forward.name, forward.caller, True)
  return grads
