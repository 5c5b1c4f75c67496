"""The toy's replay contract: the same names as the real compiler's (scheduler/contract.py), over toy nodes."""
from __future__ import annotations
import contextlib
from typing import Any, Callable, Iterator, Optional
from toyc import ir

VERSION = 1
READS = frozenset({1})
PICKLABLE = frozenset({"node", "op"})


def node(op_name: str, src: tuple, arg: Any, dtype: str): return ir.Node(ir.Op[op_name], src, arg, dtype)
def op(name: str): return ir.Op[name]


ir.RECONSTRUCTORS.update(node=node, op=op)


def flag_defaults() -> dict[str, int]: return dict(ir.FLAG_DEFAULTS)
def flag_values() -> dict[str, int]: return dict(ir.FLAGS)


@contextlib.contextmanager
def flags_applied(flags: dict[str, int]):
  saved = dict(ir.FLAGS)
  ir.FLAGS.update({k: v for k, v in flags.items() if k in ir.FLAGS})
  try: yield
  finally: ir.FLAGS.update(saved)


def without_pickled_buffers(): return contextlib.nullcontext()
def enable_capture() -> None: pass   # the toy reads the environment at every capture point


def graph_buffers(graph) -> Iterator[tuple[Any, int, str, int, Callable]]:
  for n in graph.toposort:
    if n.op is ir.Op.INPUT and n in ir.BUFFERS:
      data = ir.BUFFERS[n]
      yield n, data.size, "float32", data.nbytes, (lambda data=data: data)


def fresh_buffers(graph, contents: Optional[dict] = None, decode: Optional[Callable] = None,
                  tmpdir: Optional[str] = None):
  contents, made = contents or {}, {}
  for n in graph.toposort:
    if n.op is ir.Op.INPUT:
      data = decode(contents[n], n.size) if n in contents and decode is not None else ir.np.zeros(n.size, ir.np.float32)
      made[n] = ir.new_input(ir.np.asarray(data, ir.np.float32))
    else: made[n] = ir.Node(n.op, tuple(made[s] for s in n.src), n.arg, n.dtype)
  return made[graph]


def schedule(graph) -> tuple[list, dict]: return ir.schedule(graph)


def render(device_name: str, ast) -> dict:
  src, name = ir.render(ast)
  return {"src": src, "name": name}


def realize(graph) -> list: return ir.realize(graph)
def kernel_name(ast) -> str: return f"k_{len(ast.toposort)}"
def kernel_kind(ast) -> str: return "E"
def describe(n) -> str: return n if isinstance(n, str) else f"{n.op.name} {n.dtype}"


@contextlib.contextmanager
def traced_rules() -> Iterator[list]: yield []   # the toy has no rewrite rules
