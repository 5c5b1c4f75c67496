"""Cutting a tensor graph down and writing it back as a program: the compiler's half of `replay reduce`.

The harness (`replay/reduce.py`) reaches this module only through the contract. It asks which nodes of a captured
graph can stand as inputs (`cut_points`), turns a node into an input that holds given values (`as_input`), gives an
input simpler values (`refilled`), asks which nodes can be skipped (`bypasses`), and finally asks for the reduced
graph as Python (`program`): Tensor API calls where a call builds exactly the node (checked by building it: UOps are
hash-consed, so the same structure is the same object), a `UOp(...)` expression where none does.
"""
from __future__ import annotations
import math, re
from typing import Any, Optional
import numpy as np
from scheduler.dtype import dtypes, to_np_dtype
from scheduler.ops import UOp, Ops, GroupOp

# nodes that are not values of their own: they carry a device, storage, a view of nothing or the graph's outputs
_STRUCTURE = {Ops.SINK, Ops.DEVICE, Ops.BUFFER}
# nodes whose value a cut would not make simpler to read or that have effects beyond their value
_NOT_CUT = _STRUCTURE | {Ops.CONST, Ops.ASSIGN, Ops.DEFINE_VAR, Ops.BIND}


def _concrete_shape(u: UOp) -> Optional[tuple]:
  try: shape = u.shape if u.st is not None else None
  except Exception: return None
  return tuple(shape) if shape is not None and all(isinstance(d, int) for d in shape) else None


def is_input(u: UOp) -> bool:
  """A realized buffer seen whole as a tensor: VIEW(BUFFER) of its size, contiguous."""
  if not (u.op is Ops.VIEW and len(u.src) == 1 and u.src[0].op is Ops.BUFFER): return False
  view = u.arg.views[-1] if len(u.arg.views) == 1 else None
  return view is not None and view.contiguous and view.offset == 0 and u.arg.size == u.src[0].size


def _reads_buffers(graph: UOp) -> set:
  """Nodes that depend on some buffer (the rest are constants and their views)."""
  reading: set = set()
  for u in graph.toposort:
    if u.op is Ops.BUFFER or any(s in reading for s in u.src): reading.add(u)
  return reading


def _computes(graph: UOp) -> set:
  """Nodes with arithmetic or a reduce among their sources (an arange, random bits), not mere views of constants."""
  computing: set = set()
  for u in graph.toposort:
    if u.op in GroupOp.ALU or u.op is Ops.REDUCE_AXIS or any(s in computing for s in u.src): computing.add(u)
  return computing


def cut_points(graph: UOp, from_constants: bool = False) -> list:
  """Nodes that can be replaced by an input holding their value, sources first: computed, of a concrete shape on one
  plain device, depending on some buffer; with `from_constants`, those computed from constants alone instead (an
  arange, random bits: many in a large graph, so the reduction tries them after the others; a constant broadcast
  stays as it is, an input would say less)."""
  reading = _reads_buffers(graph)
  worth = _computes(graph) - reading if from_constants else reading
  out = []
  for u in graph.toposort:
    if u.op in _NOT_CUT or u.dtype == dtypes.void or is_input(u) or u not in worth: continue
    if _concrete_shape(u) is None or not isinstance(getattr(u, "device", None), str): continue
    if u.device.startswith("DISK"): continue
    out.append(u)
  return out


def _realized(value: np.ndarray, shape: tuple, like: UOp) -> UOp:
  """The graph of a realized tensor of `shape` holding `value`, on `like`'s device with its dtype."""
  from scheduler.tensor import Tensor
  data = np.ascontiguousarray(np.asarray(value)).reshape(shape)
  return Tensor(data, device=like.device, dtype=like.dtype).realize().lazydata


def as_input(node: UOp, value: np.ndarray) -> UOp:
  """A realized buffer in the node's place holding `value` (the node's shape, dtype and device)."""
  return _realized(value, _concrete_shape(node) or (), node)


def refilled(buffer: UOp, value: np.ndarray) -> UOp:
  """A new realized buffer like `buffer` (size, dtype, device) holding `value`."""
  new = _realized(value, (-1,), buffer)
  assert new.op is Ops.BUFFER, new.op
  return new


def bypasses(graph: UOp) -> list[tuple]:
  """(node, source) pairs where the source could stand in the node's place: same shape, dtype and device. An assign
  can give way to its value (the write goes, the computation stays) or to its target (the write goes, readers see the
  old contents): what is left of an ordering bug once the writes it does not need are gone."""
  out = []
  for u in graph.toposort:
    if (u.op in _NOT_CUT and u.op is not Ops.ASSIGN) or is_input(u) or u.op is Ops.VIEW: continue
    shape = _concrete_shape(u)
    if shape is None: continue
    for s in (u.src[::-1] if u.op is Ops.ASSIGN else u.src):
      # an assign's target may be its bare buffer: a realized tensor whose view is the plain one of its size
      if s.dtype == u.dtype and (s.op not in _STRUCTURE or u.op is Ops.ASSIGN and s.op is Ops.BUFFER) and \
         _concrete_shape(s) == shape and \
         getattr(s, "device", None) == getattr(u, "device", None):
        out.append((u, s))
        if u.op is not Ops.ASSIGN: break
  return out


def outputs(graph: UOp) -> tuple: return graph.src


def with_outputs(graph: UOp, outs) -> UOp: return UOp(Ops.SINK, dtypes.void, tuple(outs))


def substitute(graph: UOp, mapping: dict) -> UOp: return graph.substitute(mapping) if mapping else graph


def size(graph: UOp) -> int: return len(graph.toposort)


def elements(graph: UOp) -> int:
  """How many elements the graph's buffers hold together."""
  return sum(u.size for u in graph.toposort if u.op is Ops.BUFFER)


# ***** the graph as a program *****

def _literal(x: Any) -> str:
  """Python source that evaluates to `x` under the program's imports (floats that repr cannot write, Ops, dtypes,
  views)."""
  if isinstance(x, float):
    if math.isnan(x): return "math.nan"
    if math.isinf(x): return "math.inf" if x > 0 else "-math.inf"
    return repr(x)
  if isinstance(x, tuple): return "(" + ", ".join(_literal(e) for e in x) + ("," if len(x) == 1 else "") + ")"
  if isinstance(x, list): return "[" + ", ".join(_literal(e) for e in x) + "]"
  return repr(x)


_BINARY = {Ops.ADD: "{0} + {1}", Ops.MUL: "{0} * {1}", Ops.IDIV: "{0} // {1}", Ops.MOD: "{0} % {1}",
           Ops.MAX: "{0}.maximum({1})", Ops.CMPLT: "{0} < {1}", Ops.CMPNE: "{0} != {1}", Ops.AND: "{0} & {1}",
           Ops.OR: "{0} | {1}", Ops.XOR: "{0} ^ {1}", Ops.SHL: "{0} << {1}", Ops.SHR: "{0} >> {1}"}
_UNARY = {Ops.EXP2: "{0}.exp2()", Ops.LOG2: "{0}.log2()", Ops.SIN: "{0}.sin()", Ops.SQRT: "{0}.sqrt()",
          Ops.RECIP: "{0}.reciprocal()", Ops.NEG: "-{0}", Ops.CONTIGUOUS: "{0}.contiguous()",
          Ops.DETACH: "{0}.detach()"}
_REDUCE = {Ops.ADD: "sum", Ops.MAX: "max", Ops.MUL: "prod"}


def _scalar_constant(u: UOp) -> Optional[Any]:
  """The value of a constant broadcast by reshapes and expands (how `x * 2` carries its 2), else None."""
  while u.op in (Ops.RESHAPE, Ops.EXPAND): u = u.src[0]
  if u.op is Ops.CONST and u.src and _concrete_shape(u.src[0]) == (): return u.arg
  return None


def _method_forms(u: UOp, names: list[str]) -> list[str]:
  """Tensor expressions that may build `u` from its sources' variables (each is checked before it is used)."""
  op, arg = u.op, u.arg
  if op is Ops.CONST and u.src and u.src[0].op is Ops.VIEW and u.src[0].src and u.src[0].src[0].op is Ops.DEVICE:
    device = u.src[0].src[0].arg
    shape = _concrete_shape(u.src[0])
    if shape == (): return [f"Tensor({_literal(arg)}, dtype={u.dtype!r}, device={device!r})"]
    return [f"Tensor.full({shape!r}, {_literal(arg)}, dtype={u.dtype!r}, device={device!r})"]
  if any(n is None for n in names): return []
  a = names[0] if names else ""
  if op is Ops.FLIP: return [f"{a}.flip({tuple(i for i, f in enumerate(arg) if f)!r})"]
  if op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK):
    return [f"{a}.{op.name.lower()}({_literal(arg)})"]
  if op in _BINARY and len(names) == 2:
    consts = [_scalar_constant(s) for s in u.src]
    literal = [n if c is None else _literal(c) for n, c in zip(names, consts)]
    return ([_BINARY[op].format(*literal)] if literal != names and consts[0] is None else []) + \
      [_BINARY[op].format(*names)]
  if op in _UNARY and len(names) == 1: return [_UNARY[op].format(*names)]
  if op is Ops.WHERE: return [f"{names[0]}.where({names[1]}, {names[2]})"]
  if op in (Ops.CAST, Ops.BITCAST): return [f"{a}.{op.name.lower()}({u.dtype!r})"]
  if op is Ops.COPY: return [f"{a}.to({u.device!r})"]
  if op is Ops.ASSIGN: return [f"{names[0]}.assign({names[1]})"]
  if op is Ops.REDUCE_AXIS and arg[0] in _REDUCE:
    return [f"{a}.{_REDUCE[arg[0]]}({_literal(tuple(arg[1]))}, keepdim=True)"]
  return []


def _uop_form(u: UOp, names: dict) -> str:
  """`UOp(...)` source for a node; sources with a variable are that variable's graph."""
  srcs = [f"{names[s]}.lazydata" if names.get(s) else _uop_form(s, names) for s in u.src]
  return f"UOp(Ops.{u.op.name}, {u.dtype!r}, ({', '.join(srcs)}{',' if len(srcs) == 1 else ''}), {_literal(u.arg)})"


PROGRAM_IMPORTS = ("import math", "import numpy as np", "from scheduler.tensor import Tensor",
                   "from scheduler.dtype import dtypes", "from scheduler.ops import UOp, Ops",
                   "from scheduler.shape.shapetracker import ShapeTracker", "from scheduler.shape.view import View")


def _without_unused(lines: list[str], outputs: list[str]) -> list[str]:
  """Drop lines whose variable nothing later reads (constants a literal replaced); building a node has no effect."""
  needed, kept = set(outputs), []
  for line in reversed(lines):
    name, expr = line.split(" = ", 1)
    if name not in needed: continue
    kept.append(line)
    needed |= set(re.findall(r"\b[tx]\d+\b", expr))
  return kept[::-1]


def program(graph: UOp) -> dict:
  """The graph as Python: {imports, inputs: [(name, array, device, dtype source)], lines, outputs: [names],
  uop_nodes: how many nodes needed the UOp form}. Each line is checked by running it: it builds the very node."""
  from scheduler.tensor import Tensor
  import scheduler.shape.shapetracker as shapetracker_module, scheduler.shape.view as view_module
  env: dict = {"math": math, "np": np, "Tensor": Tensor, "dtypes": dtypes, "UOp": UOp, "Ops": Ops,
               "ShapeTracker": shapetracker_module.ShapeTracker, "View": view_module.View}
  names: dict = {}
  inputs, lines, uop_nodes = [], [], 0
  # a realized tensor is VIEW(BUFFER), or the BUFFER itself where its view is the plain one of its size
  bare = {s for u in graph.toposort for s in u.src if s.op is Ops.BUFFER and u.op not in _STRUCTURE and not is_input(u)}
  for u in graph.toposort:
    if (u.op in _STRUCTURE and u not in bare) or (u.op is Ops.VIEW and u.dtype == dtypes.void): continue
    if is_input(u) or u in bare:
      name = f"x{len(inputs)}"
      buffer = u if u.op is Ops.BUFFER else u.src[0]
      # a schedule's graph was captured without contents: its kernels do not depend on them
      data = buffer.buffer.numpy() if buffer.realized is not None else np.zeros(buffer.size, to_np_dtype(u.dtype))
      inputs.append((name, data.reshape(_concrete_shape(u) or (buffer.size,)), u.device, repr(u.dtype)))
      names[u] = name
      env[name] = Tensor(u, device=u.device)   # the check below runs against the graph's own buffers
      continue
    name = f"t{len(names) - len(inputs)}"
    device = f", device={u.device!r}" if isinstance(getattr(u, "device", None), str) else ""
    for expr in _method_forms(u, [names.get(s) for s in u.src]) + [f"Tensor({_uop_form(u, names)}{device})"]:
      try: built = eval(expr, env)
      except Exception: continue
      if built.lazydata is u:
        if expr.startswith("Tensor(UOp("): uop_nodes += 1
        env[name], names[u] = built, name
        lines.append(f"{name} = {expr}")
        break
    else: raise ValueError(f"cannot write {u.op.name} {u.dtype!r} as Python")
  lines, outs = _renumbered(_without_unused(lines, [names[s] for s in graph.src]), [names[s] for s in graph.src])
  return {"imports": PROGRAM_IMPORTS, "inputs": inputs, "lines": lines, "outputs": outs, "uop_nodes": uop_nodes}


def _renumbered(lines: list[str], outputs: list[str]) -> tuple[list[str], list[str]]:
  """Number the variables t0, t1, ... in the order the lines define them."""
  order = {line.split(" = ", 1)[0]: f"t{k}" for k, line in enumerate(lines)}
  rename = lambda text: re.sub(r"\bt\d+\b", lambda m: order.get(m.group(0), m.group(0)), text)
  return [rename(line) for line in lines], [rename(o) for o in outputs]


# ***** smaller shapes *****

def extents(graph: UOp) -> list[int]:
  """The extents above 1 of the graph's axes, largest first (what `resized` can shrink)."""
  found: set = set()
  for u in graph.toposort:
    if u.op not in _STRUCTURE and (shape := _concrete_shape(u)) is not None: found.update(d for d in shape if d > 1)
  return sorted(found, reverse=True)


def _mapped(shape: tuple, old: int, new: int) -> tuple: return tuple(new if d == old else d for d in shape)


def _leading(values: np.ndarray, shape: tuple, old: int, new: int) -> np.ndarray:
  """The first `new` elements along each axis of extent `old`."""
  return values.reshape(shape)[tuple(slice(0, new) if d == old else slice(None) for d in shape)]


def _buffer_shapes(graph: UOp) -> dict:
  """The shape each buffer is seen with: the view of it as an input, else flat."""
  shapes = {u.src[0]: _concrete_shape(u) for u in reversed(graph.toposort) if is_input(u)}
  return {u: shapes.get(u, (u.size,)) for u in graph.toposort if u.op is Ops.BUFFER}


def _resized_node(u: UOp, src: tuple, old: int, new: int) -> UOp:
  """The node over its resized sources with its own arguments resized (itself when neither changes); raises where the
  sizes do not fit."""
  from scheduler.shape.shapetracker import ShapeTracker
  arg = u.arg
  if is_input(u) and src != u.src: arg = ShapeTracker.from_shape(_mapped(_concrete_shape(u), old, new))
  elif u.op in (Ops.RESHAPE, Ops.EXPAND): arg = _mapped(arg, old, new)
  elif u.op is Ops.SHRINK:
    before, after = _concrete_shape(u.src[0]), _concrete_shape(src[0])
    arg = tuple((0, a) if (b, e) == (0, d) else (b, e) for (b, e), d, a in zip(arg, before, after))
  elif u.op is Ops.VIEW and src != u.src:
    # a view of a computed value: only the plain view of its source's shape follows the source
    if u.arg != ShapeTracker.from_shape(_concrete_shape(u.src[0])): raise ValueError("a view that does not resize")
    arg = ShapeTracker.from_shape(_concrete_shape(src[0]))
  elif u.op is Ops.VIEW and u.dtype == dtypes.void and (shape := _concrete_shape(u)) and old in shape:
    # the view a constant carries: plain or broadcast (strides 0) resize; others do not
    if u.arg == ShapeTracker.from_shape(shape): arg = ShapeTracker.from_shape(_mapped(shape, old, new))
    elif all(s == 0 for v in u.arg.views for s in v.strides) and len(u.arg.views) == 1 and u.arg.views[0].mask is None:
      arg = ShapeTracker.from_shape((1,) * len(shape)).expand(_mapped(shape, old, new))
    else: raise ValueError("a constant's view that does not resize")
  return u.replace(src=src, arg=arg)


def resized(graph: UOp, old: int, new: int) -> Optional[UOp]:
  """The graph with every axis of extent `old` given extent `new` (< old): inputs keep their leading elements along
  those axes, reshapes and expands to `old` go to `new`, a shrink of a whole axis stays whole. None when the graph
  does not allow it (a reshape that joins such an axis with another, a shrink past the new end, a strided view)."""
  shapes = _buffer_shapes(graph)
  done: dict = {}
  try:
    for u in graph.toposort:
      if u.op is Ops.BUFFER:
        shape = shapes[u]
        if old not in shape: done[u] = u
        else:
          data = u.buffer.numpy() if u.realized is not None else np.zeros(u.size, to_np_dtype(u.dtype))
          done[u] = refilled(u, _leading(data, shape, old, new).reshape(-1))
        continue
      done[u] = _resized_node(u, tuple(done[s] for s in u.src), old, new)
      if done[u].op not in _STRUCTURE: done[u].st   # raises on sources of different shapes
  except (ValueError, AssertionError, TypeError, IndexError, KeyError): return None
  out = done[graph]
  return out if out is not graph else None


# ***** simpler constants *****

def constants(graph: UOp) -> list[tuple]:
  """(node, value) of the graph's numeric constants that are finite and not already 0, 1, -1 or 2."""
  return [(u, u.arg) for u in graph.toposort if u.op is Ops.CONST and u.dtype != dtypes.bool and
          isinstance(u.arg, (int, float)) and math.isfinite(u.arg) and u.arg not in (0, 1, -1, 2)]


def _divisors(graph: UOp) -> set:
  """Constants an integer division or modulo divides by (through reshapes, expands and casts)."""
  found = set()
  for u in graph.toposort:
    if u.op in (Ops.IDIV, Ops.MOD):
      d = u.src[1]
      while d.op in (Ops.RESHAPE, Ops.EXPAND, Ops.CAST): d = d.src[0]
      found.add(d)
  return found


def with_constant(graph: UOp, node: UOp, value) -> UOp:
  """The graph with the constant `node` holding `value` (cast to its dtype's kind) instead; the graph itself when
  that would divide by zero (undefined in C: not a simpler program)."""
  value = float(value) if dtypes.is_float(node.dtype) else int(value)
  if value == 0 and node in _divisors(graph): return graph
  return graph.substitute({node: node.replace(arg=value)})
