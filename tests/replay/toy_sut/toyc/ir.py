"""The toy's IR (nodes with an op, sources and an arg), its frontend (`Array`) and its three captured calls."""
from __future__ import annotations
import contextlib, enum, itertools, os
import numpy as np

FLAGS = {"TOY_UNROLL": int(os.getenv("TOY_UNROLL", "1"))}   # a flag that changes how kernels render
FLAG_DEFAULTS = {"TOY_UNROLL": 1}
RECONSTRUCTORS: dict = {}   # filled by toyc.contract: what nodes pickle as
BUFFERS: dict = {}          # INPUT node -> its numpy data
_ids = itertools.count()


class Op(enum.Enum):
  INPUT = 1; CONST = 2; ADD = 3; MUL = 4; SUM = 5; STORE = 6; SINK = 7; PARAM = 8

  def __reduce_ex__(self, protocol): return RECONSTRUCTORS["op"], (self.name,)


class Node:
  __slots__ = ("op", "src", "arg", "dtype", "_key", "__weakref__")

  def __init__(self, op: Op, src: tuple = (), arg=None, dtype: str = "float32"):
    self.op, self.src, self.arg, self.dtype = op, tuple(src), arg, dtype
    self._key = (op, self.src, arg, dtype)

  # equal by structure: a payload's graph and the buffer contents stored beside it are unpickled apart
  def __eq__(self, other) -> bool: return isinstance(other, Node) and self._key == other._key
  def __hash__(self) -> int: return hash(self._key)

  def __reduce__(self): return RECONSTRUCTORS["node"], (self.op.name, self.src, self.arg, self.dtype)

  @property
  def toposort(self) -> list[Node]:
    order, seen, todo = [], set(), [(self, False)]
    while todo:
      node, expanded = todo.pop()
      if expanded: order.append(node); continue
      if node in seen: continue
      seen.add(node)
      todo.append((node, True))
      todo.extend((s, False) for s in reversed(node.src))
    return order

  @property
  def size(self) -> int: return self.arg[1] if self.op is Op.INPUT else 0


def new_input(data: np.ndarray) -> Node:
  node = Node(Op.INPUT, (), (next(_ids), data.size))
  BUFFERS[node] = np.ascontiguousarray(data, dtype=np.float32).reshape(-1)
  return node


def _capture(kind: str, *inputs, **meta):
  if os.getenv("CAPTURE_PROCESS_REPLAY", "0") in ("", "0"): return contextlib.nullcontext(_NoCapture())
  from replay.capture import CapturePoint
  return CapturePoint(kind, inputs, meta)


class _NoCapture:
  def set_output(self, output) -> None: pass


# ***** the three calls a capture records *****

def schedule(sink: Node) -> tuple[list[Node], dict]:
  """One kernel per output: STORE of its expression, whose inputs are numbered parameters (not buffers)."""
  with _capture("schedule", sink) as cap:
    asts = [Node(Op.STORE, (_parameters(out),)) for out in sink.src]
    cap.set_output((asts, {}))
  return asts, {}


def _parameters(expr: Node) -> Node:
  made: dict = {}
  for n in expr.toposort:
    if n.op is Op.INPUT: made[n] = Node(Op.PARAM, (), sum(1 for m in made if m.op is Op.INPUT))
    else: made[n] = Node(n.op, tuple(made[s] for s in n.src), n.arg, n.dtype)
  return made[expr]


def render(ast: Node) -> tuple[str, str]:
  """C-like text of a kernel and its name."""
  with _capture("kernel", ast, "TOY", None) as cap:
    names: dict = {}
    lines = []
    for i, node in enumerate(ast.toposort):
      if node.op is Op.PARAM: names[node] = f"p{node.arg}[i]"
      elif node.op is Op.CONST: names[node] = repr(float(node.arg))
      elif node.op is Op.ADD: names[node] = f"({names[node.src[0]]}+{names[node.src[1]]})"
      elif node.op is Op.MUL: names[node] = f"({names[node.src[0]]}*{names[node.src[1]]})"
      elif node.op is Op.SUM:
        lines.append(f"float acc{i} = 0; for (int i = 0; i < n; i++) acc{i} += {names[node.src[0]]};")
        names[node] = f"acc{i}"
      elif node.op is Op.STORE: lines.append(f"out[i] = {names[node.src[0]]};")
    unroll = f"#pragma unroll({FLAGS['TOY_UNROLL']})\n" if FLAGS["TOY_UNROLL"] > 1 else ""
    src, name = unroll + "\n".join(lines), f"k_{len(ast.toposort)}"
    cap.set_output((src, name))
  return src, name


def evaluate(node: Node) -> np.ndarray:
  values: dict = {}
  for n in node.toposort:
    if n.op is Op.INPUT: values[n] = BUFFERS[n]
    elif n.op is Op.CONST: values[n] = np.float32(n.arg)
    elif n.op is Op.ADD: values[n] = values[n.src[0]] + values[n.src[1]]
    elif n.op is Op.MUL: values[n] = values[n.src[0]] * values[n.src[1]]
    elif n.op is Op.SUM: values[n] = np.asarray(values[n.src[0]], np.float32).sum(dtype=np.float32).reshape(1)
  return np.asarray(values[node], dtype=np.float32).reshape(-1)


def realize(sink: Node) -> list[np.ndarray]:
  with _capture("exec", sink) as cap:
    asts, _ = schedule(sink)
    for ast in asts: render(ast)
    outputs = [evaluate(out) for out in sink.src]
    cap.set_output(outputs)
  return outputs


class Array:
  """The frontend: lazy expressions; `numpy()` realizes."""
  def __init__(self, node: Node): self.node = node

  @staticmethod
  def input(data) -> Array: return Array(new_input(np.asarray(data, np.float32)))

  def _lift(self, other) -> Node: return other.node if isinstance(other, Array) else Node(Op.CONST, (), float(other))
  def __add__(self, other) -> Array: return Array(Node(Op.ADD, (self.node, self._lift(other))))
  def __mul__(self, other) -> Array: return Array(Node(Op.MUL, (self.node, self._lift(other))))
  def sum(self) -> Array: return Array(Node(Op.SUM, (self.node,)))
  def numpy(self) -> np.ndarray: return realize(Node(Op.SINK, (self.node,)))[0]
