"""Replayers: re-run one captured input with the compiler that is on `sys.path` (the working tree, or a
base revision through the overlay) and compare the result with the captured output.

Runs inside a worker process. A capture that this revision cannot load or call is `Incompatible`.
"""
from __future__ import annotations
import tempfile, time
from typing import Any, Optional
from replay import buffers, parts, serialize, sut
from replay.compare import Comparison, compare_schedule, compare_kernel, compare_exec
from replay.serialize import NON_COMPILER_FLAGS



class Incompatible(Exception):
  """This revision cannot load or call the capture; the message says why."""


def load_payload(data: bytes) -> Any:
  try: return serialize.loads(data)
  except serialize.UnsafePickleError: raise
  except (ImportError, AttributeError, KeyError, TypeError, ValueError, EOFError) as e:
    raise Incompatible(f"cannot load the capture with this revision: {type(e).__name__}: {e}") from e


def load_joined(kind: str, input_data: bytes, output_data: Optional[bytes],
                shared: Optional[dict[str, bytes]]) -> tuple[Any, Any]:
  """A capture's input and output payloads with their parts joined back in (`replay/parts.py`)."""
  try:
    inp = parts.join_input(kind, load_payload(input_data), shared)
    return inp, None if output_data is None else parts.join_output(kind, load_payload(output_data), shared)
  except parts.PartError as e: raise Incompatible(str(e)) from None


def _contract():
  try: return sut.contract()
  except sut.NoContract as e: raise Incompatible(str(e)) from None


def _flag_context(flags: dict[str, int]):
  return _contract().flags_applied({k: v for k, v in flags.items() if k not in NON_COMPILER_FLAGS})


def flag_defaults() -> Optional[dict[str, int]]:
  """The default of every flag of the compiler under test (None when it cannot be imported)."""
  try: return _contract().flag_defaults()
  except Exception: return None


def _decode(shared: Optional[dict[str, bytes]]):
  def decode(entry, size: int):
    try: return buffers.decode(entry, shared, size)
    except buffers.BufferEntryError as e: raise Incompatible(str(e)) from None
  return decode


def _fresh_buffers(graph, contents: Optional[dict] = None, tmpdir: Optional[str] = None,
                   shared: Optional[dict[str, bytes]] = None):
  """The graph with new buffers of this process, filled with the captured contents (the contract's
  fresh_buffers)."""
  return _contract().fresh_buffers(graph, contents, _decode(shared), tmpdir)


def graph_of(inp: dict):
  """The tensor graph of a schedule or exec input (pickled once, shared by a realize and its schedule)."""
  return load_payload(inp["graph_pickle"]) if "graph_pickle" in inp else inp["graph"]


def run_schedule_capture(inp: dict) -> dict:
  asts, var_vals = _contract().schedule(_fresh_buffers(graph_of(inp)))
  return {"asts": asts, "var_vals": var_vals}


def run_kernel_capture(inp: dict) -> dict: return _contract().render(inp["device"], inp["ast"])


def run_exec_capture(inp: dict, shared: Optional[dict[str, bytes]] = None) -> dict:
  with tempfile.TemporaryDirectory(prefix="replay-disk-") as tmp:
    return {"outputs": _contract().realize(_fresh_buffers(graph_of(inp), inp["buffers"], tmp, shared))}


def trace_schedule(inp: dict) -> list[dict]:
  """Every rewrite rule application and realize decision of scheduling this graph, in order:
  {file, line, rule, node, result}, with files as package paths so two trees compare; a schedule that fails ends
  with an entry that says how ({failed})."""
  contract = _contract()
  graph = _fresh_buffers(graph_of(inp))
  failure = None
  with contract.traced_rules() as entries:
    try: contract.schedule(graph)
    except Exception as e:
      failure = f"{type(e).__name__}: {e}"   # the trace up to the failure still says which rule ran
  trace = [{"file": sut.package_path(file), "line": line, "rule": rule, "node": contract.describe(node),
            "result": contract.describe(out)}
           for file, line, rule, node, out in entries]
  return trace + ([{"file": "", "line": 0, "rule": "", "node": "(the schedule)", "result": "", "failed": failure}]
                  if failure else [])


RUNNERS = {"schedule": run_schedule_capture, "kernel": run_kernel_capture, "exec": run_exec_capture}
COMPARE = {"schedule": compare_schedule, "kernel": compare_kernel, "exec": compare_exec}


def evaluate(kind: str, input_data: bytes, flags: dict[str, int]) -> dict:
  """Run a graph that is not a capture (a candidate of `replay reduce`) and return what it gave, for the harness to
  compare across trees: {status: ok, result: base64 of the payload} or {status: error, reason, error_type}. An exec
  graph gives its outputs, a schedule graph the text of its kernels."""
  import base64
  from replay.compare import ast_text
  try:
    inp = load_payload(input_data)
    with _flag_context(flags):
      if kind == "exec": result: dict = {"outputs": run_exec_capture(inp)["outputs"]}
      else:
        asts = run_schedule_capture(inp)["asts"]
        result = {"kernels": [ast_text(a) for a in asts], "names": [_contract().kernel_name(a) for a in asts]}
    return {"status": "ok", "result": base64.b64encode(serialize.dumps(result)).decode()}
  except Exception as e:
    return {"status": "error", "reason": f"{type(e).__name__}: {e}"[:2000], "error_type": type(e).__name__}


def replay_one(kind: str, input_data: bytes, output_data: bytes, flags: dict[str, int],
               tolerances: Optional[dict] = None,
               names: Optional[list] = None, trace: bool = False, shared: Optional[dict[str, bytes]] = None) -> dict:
  """One capture's outcome: {status, reason, diff, metrics, compiler_seconds}; with `trace`, a schedule or exec
  capture is scheduled once more with rewrite tracing and the outcome carries the trace."""
  t0 = time.perf_counter()
  if trace:
    try:
      with _flag_context(flags):
        return {"status": "same", "reason": "", "diff": "", "metrics": {}, "compiler_seconds": 0.0,
                                         "trace": trace_schedule(load_joined(kind, input_data, None, shared)[0])}
    except Exception as e:
      return {"status": "error", "reason": f"cannot trace this capture: {type(e).__name__}: {e}", "diff": "",
              "metrics": {}, "compiler_seconds": 0.0}
  try:
    inp, captured = load_joined(kind, input_data, output_data, shared)
    if kind == "exec":
      try: captured = buffers.decode_outputs(captured, shared)
      except buffers.BufferEntryError as e: raise Incompatible(f"captured output: {e}") from None
    load_s = time.perf_counter() - t0
    with _flag_context(flags):
      t1 = time.perf_counter()
      try: replayed = run_exec_capture(inp, shared) if kind == "exec" else RUNNERS[kind](inp)
      except (ImportError, AttributeError) as e:
        raise Incompatible(f"this revision cannot run the capture: {type(e).__name__}: {e}") from e
      compiler_s = time.perf_counter() - t1
    result: Comparison = compare_exec(captured, replayed, tolerances,
                                      names) if kind == "exec" else COMPARE[kind](captured, replayed)
    return {"status": result.status, "reason": "", "diff": result.diff, "metrics": result.metrics,
            "compiler_seconds": compiler_s, "load_seconds": load_s}
  except serialize.UnsafePickleError as e:
    return {"status": "incompatible", "reason": str(e), "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  except serialize.PayloadFormatError as e:
    return {"status": "incompatible", "reason": str(e), "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  except Incompatible as e:
    return {"status": "incompatible", "reason": str(e), "diff": "", "metrics": {}, "compiler_seconds": 0.0}
  except Exception as e:
    return {"status": "error", "reason": f"{type(e).__name__}: {e}", "diff": "", "metrics": {}, "compiler_seconds": 0.0}
