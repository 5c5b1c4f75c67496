"""`replay reduce`: shrink a capture whose replay at a base differs into a small graph that still differs, and write it
as a standalone pytest file.

Sits beside the runner: the capture is loaded in this process (through the contract), candidates are built here with
the contract's reduction primitives, and every candidate runs in two isolated workers, one on the base and one on the
working tree (`replay/worker.py`'s evaluate mode). A candidate is kept when the two trees still differ the same way:
outputs that mismatch (exec captures) or kernels that differ (schedule captures). The passes: keep one output, make
the smallest inner node that still differs the output, replace subgraphs by inputs that hold their values at the
base (delta debugging over the cut points, upstream first), skip nodes whose source can stand in their place; again
until none shrinks the graph; then give the axes the smallest extents, the constants and each input the simplest
values that keep the difference. The result is checked once more as a pytest file run with each tree.
"""
from __future__ import annotations
import base64, json, math, os, pathlib, selectors, subprocess, sys, tempfile, time
from dataclasses import dataclass, field
from typing import Any, Optional
import numpy as np
from replay import buffers, parts, serialize, sut
from replay.compare import DEFAULT_TOLERANCES, ast_text, compare_exec

INLINE_ELEMENTS = 64       # inputs and expected outputs up to this size are written into the test file
VALUE_CHUNK = 64           # cut-point values are computed this many nodes at a time
# values computed from constants (every arange and random draw) are cut in graphs up to this size: in the 4,319-node
# graph of a training step, computing their values at the base took most of the budget, and cutting them while the
# graph is large left it larger in the end (c_recip_epsilon: 11 nodes with 500, 34 with 2,000)
CONSTANT_CUT_NODES = 500
ROOT_SCAN = 40             # up to this many candidate roots are tried one by one, smallest first; more are bisected


class ReduceError(Exception):
  """The capture cannot be reduced (wrong kind, no difference to keep, a tree that cannot run it); says why."""


# ***** two trees side by side *****

class Trees:
  """Two persistent workers, one per tree, that run candidate graphs; a worker that dies or hangs is restarted and
  its answer is an error."""
  def __init__(self, paths: dict[str, list[str]], memory_mb: int = 8192):
    self.paths, self.memory_mb = paths, memory_mb
    self.workers = self._start(list(paths))

  def _start(self, names: list[str]) -> dict:
    """New workers for these trees, started together and ready."""
    from replay.runner import _Worker
    started = {name: _Worker(self.paths[name], {"REPLAY_WORKER_MEMORY_MB": str(self.memory_mb)}) for name in names}
    answers = self._wait(started, time.monotonic() + 120)
    if (failed := [name for name in names if not answers.get(name, {}).get("ready")]):
      for w in started.values(): w.kill()
      raise ReduceError(f"the {failed[0]} tree's worker did not start: {answers.get(failed[0], {}).get('reason', '')}")
    return started

  def _wait(self, workers: dict, deadline: float) -> dict[str, dict]:
    """The next message of each worker, or an error for one that died or passed the deadline."""
    answers: dict[str, dict] = {}
    sel = selectors.DefaultSelector()
    for name, w in workers.items(): sel.register(w.proc.stdout, selectors.EVENT_READ, name)
    try:
      while len(answers) < len(workers):
        left = deadline - time.monotonic()
        if left <= 0:
          for name in workers:
            answers.setdefault(name, {"status": "error", "reason": "timed out", "error_type": "Timeout"})
          break
        for key, _ in sel.select(timeout=min(left, 1.0)):
          name = key.data
          try: messages = workers[name].messages()
          except EOFError:
            messages = [{"status": "error", "reason": workers[name].death_reason(), "error_type": "WorkerDied"}]
          if messages and name not in answers:
            answers[name] = messages[0]
            sel.unregister(key.fileobj)
    finally: sel.close()
    return answers

  def run(self, kind: str, payload: bytes, flags: dict, timeout: float, names=None) -> dict[str, dict]:
    """The result of one graph on each tree (or the named ones), run at the same time."""
    chosen = {name: self.workers[name] for name in (names or self.workers)}
    for w in chosen.values():
      try: w.send_graph(kind, payload, flags, timeout)
      except BrokenPipeError: pass   # died before: read() reports it
    answers = self._wait(chosen, time.monotonic() + timeout)
    for name, answer in answers.items():
      if answer.get("error_type") in ("Timeout", "WorkerDied"):
        self.workers[name].kill()
        self.workers.update(self._start([name]))
      elif answer.get("status") == "ok": answer["value"] = serialize.loads(base64.b64decode(answer.pop("result")))
    return answers

  def close(self) -> None:
    for w in self.workers.values(): w.kill()


# ***** the reduction *****

@dataclass
class Reduction:
  capture: dict
  kind: str
  graph: Any
  original_size: int
  size: int = 0
  original_elements: int = 0   # elements of the buffers the graph reads and writes
  elements: int = 0
  evaluations: int = 0
  seconds: float = 0.0
  base: dict = field(default_factory=dict)      # the base tree's result on the reduced graph
  current: dict = field(default_factory=dict)   # the working tree's
  difference: str = ""
  passes: list[str] = field(default_factory=list)


def differs(kind: str, answers: dict[str, dict], tolerances: Optional[dict]) -> Optional[str]:
  """How the working tree's result differs from the base's, or None when it does not (or either failed)."""
  base, current = answers.get("base", {}), answers.get("current", {})
  if base.get("status") != "ok" or current.get("status") != "ok": return None
  if kind == "exec":
    result = compare_exec(current["value"], base["value"], tolerances)
    return result.diff if result.status == "mismatch" else None
  b, c = base["value"]["kernels"], current["value"]["kernels"]
  if b == c: return None
  return f"{len(b)} kernels at the base, {len(c)} with the working tree" if len(b) != len(c) else \
    f"kernel {next(i for i, (x, y) in enumerate(zip(b, c)) if x != y)} differs"


class Reducer:
  """Delta debugging of one capture's graph within a time budget (`budget` seconds)."""
  def __init__(self, contract, trees: Trees, kind: str, flags: dict, tolerances: Optional[dict], budget: float):
    self.contract, self.prims, self.trees = contract, contract.reduction(), trees
    self.kind, self.flags, self.tolerances = kind, flags, tolerances
    self.deadline = time.monotonic() + budget
    self.timeout = 30.0
    self.evaluations = 0
    self.answers: dict = {}   # the last candidate's results
    self.last: dict = {}      # the last candidate's that kept the difference

  def payload(self, graph) -> bytes:
    contents = {u: read() for u, _, _, _, read in self.contract.graph_buffers(graph)}
    with self.contract.without_pickled_buffers(): return serialize.dumps({"graph": graph, "buffers": contents})

  def check(self, graph) -> Optional[str]:
    """The difference this graph shows between the trees, or None."""
    self.evaluations += 1
    answers = self.answers = self.trees.run(self.kind, self.payload(graph), self.flags, self.timeout)
    difference = differs(self.kind, answers, self.tolerances)
    if difference is not None: self.last = {**answers, "difference": difference}
    return difference

  def time_left(self) -> bool: return time.monotonic() < self.deadline

  def start(self, graph) -> str:
    t0 = time.monotonic()
    difference = self.check(graph)
    if difference is None:
      base, current = (self._said(self.answers.get(n, {})) for n in ("base", "current"))
      raise ReduceError("the capture does not differ between the base and the working tree when its graph runs "
                        f"again (base: {base}; working tree: {current}); a difference made above the captured graph "
                        "(the frontend built another graph, a flag default differs, the captured run's buffers were "
                        "views the replay does not rebuild) shows in the end-to-end rerun, not here")
    # a candidate may take a few times as long as the whole capture (compiling new kernels), not minutes
    self.timeout = max(10.0, 5 * (time.monotonic() - t0))
    return difference

  def _summary(self, name: str, before, after) -> str:
    if name == "shapes": return f"extents {self.prims.extents(before)} -> {self.prims.extents(after)}"
    if name == "constants":
      n, left = len(self.prims.constants(before)), len(self.prims.constants(after))
      return f"{n - left} of {n} made 0, 1, 2 or -1"
    return f"buffer contents made simpler ({self.prims.elements(after)} elements)"

  @staticmethod
  def _said(answer: dict) -> str:
    return "ran" if answer.get("status") == "ok" else f"{answer.get('status')} {answer.get('reason', '')}".strip()

  # ----- passes -----

  def one_output(self, graph):
    outs = self.prims.outputs(graph)
    if len(outs) < 2: return graph
    for out in outs:
      if not self.time_left(): break
      candidate = self.prims.with_outputs(graph, [out])
      if self.check(candidate) is not None: return candidate
    return graph

  def base_values(self, nodes: list) -> dict:
    """The value of each node at the base (nodes whose value cannot be computed are left out)."""
    values: dict = {}
    for k in range(0, len(nodes), VALUE_CHUNK):
      if not self.time_left(): break
      chunk = nodes[k:k + VALUE_CHUNK]
      payload = self.payload(self.prims.with_outputs(None, chunk))
      answer = self.trees.run("exec", payload, self.flags, self.timeout * 4, names=["base"])["base"]
      if answer.get("status") == "ok": values.update(zip(chunk, answer["value"]["outputs"]))
    return values

  def cut(self, graph):
    """Replace subgraphs by inputs holding their base values: first those that read buffers, then (time left, and the
    graph at most CONSTANT_CUT_NODES) those computed from constants alone."""
    graph = self.cut_some(graph, False)
    if self.time_left() and self.prims.size(graph) <= CONSTANT_CUT_NODES: graph = self.cut_some(graph, True)
    return graph

  def cut_some(self, graph, from_constants: bool):
    """Chunks of cut points, upstream first, halving the chunk size when no chunk keeps the difference (ddmin)."""
    values = self.base_values(self.prims.cut_points(graph, from_constants))
    inputs: dict = {}

    def input_of(node):
      if node not in inputs: inputs[node] = self.prims.as_input(node, values[node])
      return inputs[node]
    points = [p for p in self.prims.cut_points(graph, from_constants) if p in values]
    n = 2
    while len(points) > 0 and self.time_left():
      size = -(-len(points) // n)
      chunks = [points[k:k + size] for k in range(0, len(points), size)]
      for chunk in chunks:
        if not self.time_left(): break
        candidate = self.prims.substitute(graph, {p: input_of(p) for p in chunk})
        if candidate is graph: continue
        if self.check(candidate) is not None:
          graph = candidate
          points = [p for p in self.prims.cut_points(graph, from_constants) if p in values]
          n = max(n - 1, 2)
          break
      else:
        if size == 1: break
        n = min(len(points), n * 2)
    return graph

  def bypass(self, graph):
    """Let a node's source stand in its place, one node at a time, while that keeps the difference."""
    tried: set = set()
    progress = True
    while progress and self.time_left():
      progress = False
      for node, source in self.prims.bypasses(graph):
        if (node, source) in tried or not self.time_left(): continue
        tried.add((node, source))
        candidate = self.prims.substitute(graph, {node: source})
        if candidate is not graph and self.check(candidate) is not None:
          graph, progress = candidate, True
          break
    return graph

  def new_root(self, graph):
    """Make a node inside the graph its output: the smallest subgraph that still differs (what a bug's value flows
    through on its way out, reductions and reshapes the other passes cannot skip, falls away)."""
    size = self.prims.size(graph)
    nodes = [n for n in sorted(self.prims.cut_points(graph), key=self.prims.size) if self.prims.size(n) < size - 1]
    if len(nodes) > ROOT_SCAN:
      # many candidates: bisect by size (a value that differs usually makes every larger one on its path differ)
      low, high, best = 0, len(nodes) - 1, None
      while low <= high and self.time_left():
        mid = (low + high) // 2
        if self.check(self.prims.with_outputs(graph, [nodes[mid]])) is not None: best, high = mid, mid - 1
        else: low = mid + 1
      return self.prims.with_outputs(graph, [nodes[best]]) if best is not None else graph
    for node in nodes:
      if not self.time_left(): break
      candidate = self.prims.with_outputs(graph, [node])
      if self.check(candidate) is not None: return candidate
    return graph

  def smaller_shapes(self, graph):
    """Give each axis extent the smallest of 1, 2, 3, 4, half that keeps the difference (every axis of that extent at
    once: the graph stays consistent), largest extents first."""
    def uop_nodes(g) -> float:
      try: return self.prims.program(g)["uop_nodes"]
      except Exception: return math.inf
    tried: set = set()
    while self.time_left():
      old = next((e for e in self.prims.extents(graph) if e not in tried), None)
      if old is None: break
      tried.add(old)
      writable = uop_nodes(graph)
      for new in sorted({n for n in (1, 2, 3, 4, old // 2) if 0 < n < old}):
        if not self.time_left(): break
        candidate = self.prims.resized(graph, old, new)
        # a shape the Tensor API does not build (a reduce over an axis of 1 it would skip) makes a worse reproducer
        if candidate is not None and uop_nodes(candidate) <= writable and self.check(candidate) is not None:
          graph = candidate
          tried.add(new)
          break
    return graph

  def simpler_constants(self, graph):
    """Give each constant the simplest number that keeps the difference: 0, 1, 2, -1, itself rounded."""
    done: set = set()
    while self.time_left():
      node, value = next(((n, v) for n, v in self.prims.constants(graph) if n not in done), (None, None))
      if node is None: break
      done.add(node)
      for number in simple_numbers(value):
        if not self.time_left(): break
        candidate = self.prims.with_constant(graph, node, number)
        if candidate is not graph and self.check(candidate) is not None:
          graph = candidate
          break
    return graph

  def simpler_values(self, graph):
    """Give each input the simplest values that keep the difference: zeros, ones, 0..6 repeating, 0..n-1."""
    for buffer, _, _, _, read in list(self.contract.graph_buffers(graph)):
      if not self.time_left(): break
      current = read()
      for values in simple_values(current):
        if np.array_equal(values, current): break   # already this simple
        candidate = self.prims.substitute(graph, {buffer: self.prims.refilled(buffer, values)})
        if self.check(candidate) is not None:
          graph = candidate
          break
    return graph

  def run(self, graph, reduction: Reduction) -> Reduction:
    t0, original = time.monotonic(), graph
    self.start(graph)
    steps = [("outputs", self.one_output), ("root", self.new_root), ("cut", self.cut), ("bypass", self.bypass),
             ("root", self.new_root)]
    while steps and self.time_left():
      start = self.prims.size(graph)
      for name, step in steps:
        before = self.prims.size(graph)
        graph = step(graph)
        if (after := self.prims.size(graph)) < before: reduction.passes.append(f"{name}: {before} -> {after} nodes")
      if self.prims.size(graph) == start: break
      steps = steps[1:]   # cuts and bypasses open each other up: again, until neither shrinks the graph
    # smaller shapes, constants and values may make a difference that depends on memory past a buffer's end show
    # only sometimes: each pass's result is checked once more, and dropped when the difference does not show again
    for name, step in (("shapes", self.smaller_shapes), ("constants", self.simpler_constants),
                       ("values", self.simpler_values)):
      if not self.time_left(): break
      before = graph
      if (graph := step(graph)) is before: continue
      if self.check(graph) is None:
        reduction.passes.append(f"{name}: undone (the difference did not show again)")
        graph = before
      else: reduction.passes.append(f"{name}: {self._summary(name, before, graph)}")
    if self.check(graph) is None: raise ReduceError("the reduced graph lost the difference (a nondeterministic one?)")
    reduction.graph, reduction.size = graph, self.prims.size(graph)
    reduction.original_elements = reduction.original_elements or self.prims.elements(original)
    reduction.elements = self.prims.elements(graph)
    reduction.evaluations, reduction.seconds = self.evaluations, time.monotonic() - t0
    reduction.base, reduction.current = self.last["base"], self.last["current"]
    reduction.difference = self.last["difference"]
    return reduction


def simple_numbers(value) -> list:
  """Simpler numbers to try in place of a constant, simplest first."""
  rounded = round(value)
  return list(dict.fromkeys(n for n in (0, 1, 2, -1, rounded) if n != value))


def simple_values(like: np.ndarray) -> list[np.ndarray]:
  """Candidate contents for an input like `like`, simplest first (`_array_source` writes each as a formula)."""
  n, dtype = like.size, like.dtype
  ramp = np.arange(n)
  if dtype == np.bool_: return [np.zeros(n, dtype), np.ones(n, dtype), (ramp % 2).astype(dtype)]
  return [np.zeros(n, dtype), np.ones(n, dtype), (ramp % 7).astype(dtype), ramp.astype(dtype)]


# ***** loading a capture *****

def load_capture(store, cap: dict, contract, tmpdir: str):
  """The capture's graph with its input buffers filled in this process."""
  if cap["kind"] == "kernel":
    raise ReduceError(f"capture {cap['id']} is a kernel capture: reduce the schedule or exec capture at the same "
                      f"location ({cap['location']}), whose graph made the kernel")
  try:
    shared = store.shared_blobs(cap["id"])
    inp = parts.join_input(cap["kind"], serialize.loads(store.get_blob(cap["input_sha"])), shared)
    graph = serialize.loads(inp["graph_pickle"]) if "graph_pickle" in inp else inp["graph"]
    contents = inp.get("buffers") or {}
    return contract.fresh_buffers(graph, contents, lambda entry, n: buffers.decode(entry, shared, n), tmpdir)
  except Exception as e:
    raise ReduceError(f"cannot load capture {cap['id']} with the working tree: {type(e).__name__}: {e}") from None


# ***** the pytest file *****

def _formula(array: np.ndarray) -> Optional[str]:
  """Numpy source for an array of a simple form (a fill, 0..n-1, 0..m-1 repeating), else None."""
  flat, shape, dtype = array.reshape(-1), tuple(array.shape), array.dtype.name
  if flat.size == 0: return None
  if (flat == flat[0]).all() and np.isfinite(flat.astype(np.float64)).all():
    return f"np.full({shape!r}, {flat[0].item()!r}, dtype=np.{dtype})"
  ramp = np.arange(flat.size)
  if np.array_equal(flat, ramp.astype(array.dtype)):
    return f"np.arange({flat.size}).astype(np.{dtype}).reshape({shape!r})"
  for m in range(2, 17):
    if np.array_equal(flat, (ramp % m).astype(array.dtype)):
      return f"(np.arange({flat.size}) % {m}).astype(np.{dtype}).reshape({shape!r})"
  return None


def _array_source(array: np.ndarray) -> str:
  array = np.asarray(array)
  if (formula := _formula(array)) is not None: return formula
  values = array.reshape(-1).tolist()
  return f"np.array({values!r}, dtype=np.{array.dtype.name}).reshape({tuple(np.shape(array))!r})" \
    .replace("nan", "np.nan").replace("inf", "np.inf")


def write_test(reduction: Reduction, contract, out_dir: pathlib.Path, base_label: str,
               tolerances: Optional[dict], flags: dict) -> tuple[pathlib.Path, dict]:
  """The pytest file of the reduced graph (and `.npy` files of its large arrays): fails with the working tree, passes
  at the base. Returns its path and the program the contract wrote."""
  prog = contract.reduction().program(reduction.graph)
  cid = reduction.capture["id"]
  stem = f"test_reduce_{cid}"
  out_dir.mkdir(parents=True, exist_ok=True)

  def array_expr(name: str, array: np.ndarray) -> str:
    if (np.asarray(array).size <= INLINE_ELEMENTS or _formula(np.asarray(array)) is not None) and \
       np.asarray(array).dtype.kind in "biuf":
      return _array_source(array)
    path = out_dir / f"{stem}.{name}.npy"
    np.save(path, np.asarray(array))
    return f"np.load(HERE / {path.name!r})"
  body = [f"  {name} = Tensor({array_expr(name, array)}, device={device!r}, dtype={dtype}).realize()"
          for name, array, device, dtype in prog["inputs"]]
  body += [f"  {line}" for line in prog["lines"]]
  body.append(f"  outs = [{', '.join(prog['outputs'])}]")
  if reduction.kind == "exec":
    expected = reduction.base["value"]["outputs"]
    body.append("  Tensor.realize(*outs)")
    body.append("  expected = [" + ", ".join(array_expr(f"expected{i}", e) for i, e in enumerate(expected)) + "]")
    tol = {**DEFAULT_TOLERANCES, **(tolerances or {})}
    body.append(f"  tolerances = {tol!r}")
    body.append("  for out, want in zip(outs, expected):")
    body.append("    rtol, atol = tolerances.get(want.dtype.name, (0, 0))")
    body.append("    np.testing.assert_allclose(out.numpy(), want, rtol=rtol, atol=atol, equal_nan=True)")
  else:
    body.append("  from scheduler.contract import schedule, kernel_name")
    body.append("  kernels = schedule(UOp(Ops.SINK, dtypes.void, tuple(o.lazydata for o in outs)))[0]")
    body.append(f"  assert [kernel_name(k) for k in kernels] == {reduction.base['value'].get('names')!r}")
  first = reduction.difference.splitlines()[0] if reduction.difference else ""
  name = reduction.capture["name"] if len(reduction.capture["name"]) < 60 else reduction.capture["name"][:57] + "..."
  doc = (f'"""Reproducer of capture {cid} ({reduction.capture["kind"]} {name}), written by `replay reduce`.\n'
         f'Captured at {reduction.capture["location"]}.\n\n'
         f"Passes at the base ({base_label}); the working tree it was reduced with differs: {first}\n"
         f'{reduction.original_size} graph nodes reduced to {reduction.size}.\n"""')
  defaults = contract.flag_defaults()
  changed = {k: v for k, v in flags.items()
             if k in defaults and defaults[k] != v and k not in serialize.NON_COMPILER_FLAGS}
  env = [f"os.environ.update({ {k: str(v) for k, v in changed.items()}!r})   # the capture's flags"] if changed else []
  imports = [i for i in prog["imports"] if prog["uop_nodes"] or reduction.kind == "schedule" or
             not i.startswith(("from scheduler.ops", "from scheduler.shape"))]
  text = "\n".join([doc, "import os", *env, *imports, "import pathlib", "", "HERE = pathlib.Path(__file__).parent",
                    "", "",
                    "def test_reproducer():", *body]) + "\n"
  path = out_dir / f"{stem}.py"
  path.write_text(text)
  return path, prog


def verify_test(path: pathlib.Path, paths: dict[str, list[str]]) -> dict[str, bool]:
  """Whether the test passes with each tree (run with pytest, each with that tree's packages on the path)."""
  procs = {}
  for name, python_path in paths.items():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path), "CAPTURE_PROCESS_REPLAY": "0"}
    env.pop("PYTEST_ADDOPTS", None)
    procs[name] = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                                    "no:randomly", str(path.name)], cwd=str(path.parent), env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  return {name: p.wait() == 0 for name, p in procs.items()}


def graph_text(graph) -> str: return ast_text(graph)


def reduce_capture(store, cap: dict, paths: dict[str, list[str]], budget: float,
                   tolerances: Optional[dict]) -> Reduction:
  """Reduce one capture: `paths` holds the python path of the "base" and the "current" tree."""
  if cap["kind"] not in ("exec", "schedule"):
    raise ReduceError(f"capture {cap['id']} is a {cap['kind']} capture: reduce the schedule or exec capture at the "
                      f"same location ({cap['location']})")
  try: contract = sut.contract()
  except sut.NoContract as e: raise ReduceError(str(e)) from None
  if not hasattr(contract, "reduction"):
    raise ReduceError(f"the system under test's contract ({sut.contract_name()}) has no reduction primitives")
  # a flag the capture left at the working tree's default runs at each tree's own default: a change of a default is
  # then a difference between the trees, as it is between the two runs of the program
  defaults = contract.flag_defaults()
  flags = {k: v for k, v in json.loads(cap["flags"] or "{}").items()
           if k not in serialize.NON_COMPILER_FLAGS and defaults.get(k) != v}
  with tempfile.TemporaryDirectory(prefix="replay-reduce-") as tmp:
    # the graph is cut down in this process: nothing it builds or realizes here is captured
    with contract.flags_applied({**flags, "CAPTURE_PROCESS_REPLAY": 0}):
      graph = load_capture(store, cap, contract, tmp)
      reduction = Reduction(cap, cap["kind"], graph, contract.reduction().size(graph))
      trees = Trees(paths)
      try: return Reducer(contract, trees, cap["kind"], flags, tolerances, budget).run(graph, reduction)
      finally: trees.close()
