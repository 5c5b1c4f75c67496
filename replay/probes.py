"""Which changed lines of the system under test run during a capture's computation: the coverage part of the gate.

A replay can only catch a change that some capture runs. The gate therefore asks, for every changed line of the
system under test (`git diff` against the base), whether the captured command ran it after the system under test
was imported: a line that only runs while a module is imported (an entry of a table, a constant, a class body)
says nothing about which computations use it, so it does not count as run.

Not a line tracer: tracing every line doubles the corpus's running time on Python 3.11 even when one file is
traced. Instead an import hook compiles each changed module with a probe before each changed statement of a function
body (a changed `def` line probes the start of its body) and around the body of each changed lambda (a changed import
statement counts as run when its module loads); every other
module loads untouched and unslowed. A probe records its lines once, in a file per folder that every process of the
command appends to (so forked workers and crashed processes keep what they ran), and ignores calls made while a
module of the system under test is being imported.

The plan (which lines are probed where) is made in the harness (`plan`), handed to the command's processes through
the environment (`PLAN_ENV`, `HITS_ENV`) and installed at interpreter start (replay/sut_boot/sitecustomize.py) or at
a replay worker's start (`install`).
"""
from __future__ import annotations
import ast, importlib.abc, importlib.machinery, io, json, os, pathlib, sys, tokenize
from dataclasses import dataclass, field
from typing import Optional

PLAN_ENV, HITS_ENV = "REPLAY_PROBE_PLAN", "REPLAY_PROBE_DIR"
PROBE_NAME = "__replay_probe__"


# ***** the plan: what each changed line is *****

@dataclass
class FilePlan:
  runtime: list[int] = field(default_factory=list)       # changed lines a probe can see run after import
  import_only: list[int] = field(default_factory=list)   # changed lines that run only while the module is imported
  flags: dict[int, str] = field(default_factory=dict)    # import-only lines that define a compiler flag: line -> name


def _is_docstring(node: ast.AST) -> bool:
  return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _sites(tree: ast.Module, lines: set[int]) -> tuple[dict[int, ast.AST], set[int], set[int], set[int]]:
  """Each changed line's probe site (the innermost function-body statement, lambda or function header holding it),
  the changed lines inside module-level or class-level statements only, docstring and raise lines (not guarded),
  and the changed import statements of module level (they ran if the module loaded: a wrong one fails every capture)."""
  site: dict[int, ast.AST] = {}
  toplevel: set[int] = set()
  docs: set[int] = set()
  loads: set[int] = set()

  def claim(node: ast.AST, first: int, last: int) -> None:
    for line in range(first, last + 1):
      if line not in lines: continue
      held = site.get(line)
      # `if c: return x` on one line: the statement that starts the line runs first, whatever its body does
      if isinstance(node, ast.stmt) and isinstance(held, ast.stmt) and held.lineno == line: continue
      site[line] = node

  def visit(node: ast.AST, in_function: bool) -> None:
    if isinstance(node, ast.stmt) and _is_docstring(node):
      docs.update(range(node.lineno, node.end_lineno + 1))
      return
    if isinstance(node, ast.Raise):   # an error path: no capture computes through it (its condition is probed)
      for line in range(node.lineno, node.end_lineno + 1):
        held = site.get(line)
        if isinstance(held, ast.stmt) and held.lineno == line: continue   # `if c: raise X`: the test runs
        site.pop(line, None)
        docs.add(line)
      return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      first = min([d.lineno for d in node.decorator_list] + [node.lineno])
      if in_function: claim(node, first, node.end_lineno)   # a nested def runs when its enclosing function does
      # defaults, annotations, the signature: used by every call
      claim(("header", node), first, node.body[0].lineno - 1)
      for child in node.body: visit(child, True)
      for d in node.decorator_list: visit(d, in_function)
      for a in node.args.defaults + node.args.kw_defaults: visit(a, in_function) if a is not None else None
      return
    if isinstance(node, ast.Lambda):
      if not in_function:
        claim(node, node.lineno, node.end_lineno)   # within a function, its statement's probe suffices
      visit(node.body, True)
      return
    if isinstance(node, (ast.Import, ast.ImportFrom)) and not in_function:
      loads.update(line for line in range(node.lineno, node.end_lineno + 1) if line in lines)
      return
    if isinstance(node, ast.stmt):
      if in_function: claim(node, node.lineno, node.end_lineno)
      else: toplevel.update(range(node.lineno, node.end_lineno + 1))
    for child in ast.iter_child_nodes(node): visit(child, in_function)

  for statement in tree.body: visit(statement, False)
  # a module-level line that names a function of the module (a rule table's entry, a dispatch dict) counts as run
  # when that function runs: a capture used the entry
  functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
  for statement in tree.body:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
      continue
    for node in ast.walk(statement):
      if isinstance(node, ast.Name) and node.id in functions and node.lineno in lines and node.lineno not in site:
        site[node.lineno] = ("header", functions[node.id])
  return site, toplevel, docs, loads


def plan_file(source: str, lines: set[int]) -> FilePlan:
  """The changed `lines` of one module's `source`, sorted into those a probe can see and those only import runs;
  blank lines, comments and docstrings are neither."""
  try: tree = ast.parse(source)
  except SyntaxError: return FilePlan(import_only=sorted(lines))   # cannot be compiled: nothing of it can run
  site, toplevel, docs, loads = _sites(tree, lines)
  import_only = sorted((lines & toplevel & _code_lines(source)) - set(site) - docs - loads)
  return FilePlan(runtime=sorted(set(site) | loads), import_only=import_only, flags=_flag_lines(tree, set(import_only)))


def _flag_lines(tree: ast.Module, lines: set[int]) -> dict[int, str]:
  """The lines among `lines` of module-level `NAME = ContextVar("NAME", default)` statements: line -> flag name."""
  out = {}
  for statement in tree.body:
    value = getattr(statement, "value", None)
    if not (isinstance(statement, ast.Assign) and isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "ContextVar" and value.args and isinstance(value.args[0], ast.Constant)
            and isinstance(value.args[0].value, str)):
      continue
    out.update({line: value.args[0].value for line in range(statement.lineno, statement.end_lineno + 1)
                if line in lines})
  return out


def _code_lines(source: str) -> set[int]:
  """Lines holding code (not blank, not only a comment)."""
  out: set[int] = set()
  skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
  try:
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
      if tok.type in skip or (tok.type == tokenize.OP and tok.string in ")]},:"): continue   # a closing line is no code
      out.update(range(tok.start[0], tok.end[0] + 1))
  except (tokenize.TokenError, SyntaxError): pass
  return out


def plan(changed: dict[str, set[int]], root: pathlib.Path) -> dict[str, FilePlan]:
  out = {}
  for path, lines in sorted(changed.items()):
    full = root / path
    if full.suffix == ".py" and full.exists(): out[path] = plan_file(full.read_text(errors="replace"), set(lines))
  return out


def write_plan(plans: dict[str, FilePlan], root: pathlib.Path, packages: tuple[str, ...], where: pathlib.Path) -> None:
  where.write_text(json.dumps({"root": str(root.resolve()), "packages": list(packages),
                               "files": {path: p.runtime for path, p in plans.items() if p.runtime}}))


# ***** instrumenting a module *****

class _Instrument(ast.NodeTransformer):
  def __init__(self, path: str, site: dict[int, ast.AST]):
    self.path = path
    self.lines_of: dict[int, list[int]] = {}   # id of a site -> its changed lines
    self.headers: dict[int, list[int]] = {}    # id of a function -> its changed header lines
    for line, node in site.items():
      if isinstance(node, tuple): self.headers.setdefault(id(node[1]), []).append(line)
      else: self.lines_of.setdefault(id(node), []).append(line)

  def _probe(self, lines: list[int], like: ast.AST) -> ast.Call:
    call = ast.Call(ast.Name(PROBE_NAME, ast.Load()), [ast.Constant(self.path), ast.Constant(tuple(sorted(lines)))], [])
    return ast.copy_location(call, like)

  def _statements(self, body: list[ast.stmt]) -> list[ast.stmt]:
    out = []
    for statement in body:
      if (lines := self.lines_of.get(id(statement))):
        out.append(ast.copy_location(ast.Expr(self._probe(lines, statement)), statement))
      out.append(statement)
    return out

  def generic_visit(self, node: ast.AST) -> ast.AST:
    super().generic_visit(node)
    for name in ("body", "orelse", "finalbody"):
      value = getattr(node, name, None)
      if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
        setattr(node, name, self._statements(value))
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (lines := self.headers.get(id(node))):
      at = 1 if _is_docstring(node.body[0]) else 0
      node.body.insert(at, ast.copy_location(ast.Expr(self._probe(lines, node.body[0])), node.body[0]))
    if isinstance(node, ast.Lambda) and (lines := self.lines_of.get(id(node))):
      pair = ast.Tuple([self._probe(lines, node.body), node.body], ast.Load())
      node.body = ast.copy_location(ast.Subscript(ast.copy_location(pair, node.body), ast.Constant(1), ast.Load()),
                                    node.body)
    return node


def instrument(source: bytes, filename: str, path: str, lines: set[int]):
  """(code object, lines that count as run once the module loads) of a module with probes at the sites of its
  changed `lines` (reported under `path`)."""
  tree = ast.parse(source, filename)
  site, _, _, loads = _sites(tree, lines)
  tree = ast.fix_missing_locations(_Instrument(path, site).visit(tree))
  return compile(tree, filename, "exec", dont_inherit=True), loads


# ***** in the command's processes *****

class _Probe:
  """Records (path, lines) once per folder of hits; calls made while a system-under-test module is imported do
  not count."""
  def __init__(self, hits_dir: str, sut_dirs: tuple[str, ...]):
    self.file = os.path.join(hits_dir, "hits.txt")
    self.sut_dirs, self.seen = sut_dirs, set()

  def _importing(self) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
      code = frame.f_code
      if code.co_name == "<module>" and code.co_filename.startswith(self.sut_dirs): return True
      frame = frame.f_back
    return False

  def __call__(self, path: str, lines: tuple) -> None:
    if (path, lines) in self.seen or self._importing(): return
    self.record(path, lines)

  def record(self, path: str, lines: tuple) -> None:
    self.seen.add((path, lines))
    with open(self.file, "a") as f: f.write(json.dumps([path, list(lines)]) + "\n")   # one short append: atomic


class _ProbedLoader(importlib.machinery.SourceFileLoader):
  """Loads a changed module compiled with probes; never reads or writes cached bytecode (it would poison the cache)."""
  def __init__(self, fullname: str, origin: str, path: str, lines: set[int], probe: _Probe):
    super().__init__(fullname, origin)
    self.rel, self.lines, self.probe = path, lines, probe

  def get_code(self, fullname: str):
    code, self.loads = instrument(self.get_data(self.path), self.path, self.rel, self.lines)
    return code

  def exec_module(self, module) -> None:
    module.__dict__[PROBE_NAME] = self.probe
    super().exec_module(module)
    if self.loads: self.probe.record(self.rel, tuple(sorted(self.loads)))


class _ProbeFinder(importlib.abc.MetaPathFinder):
  def __init__(self, root: str, files: dict[str, set[int]], probe: _Probe):
    self.by_origin = {os.path.realpath(os.path.join(root, path)): (path, lines) for path, lines in files.items()}
    self.probe = probe

  def find_spec(self, fullname: str, path=None, target=None):
    for finder in sys.meta_path:
      if finder is self or not hasattr(finder, "find_spec"): continue
      spec = finder.find_spec(fullname, path, target)
      if spec is None: continue
      origin = spec.origin and os.path.realpath(spec.origin)
      if origin in self.by_origin and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        rel, lines = self.by_origin[origin]
        spec.loader = _ProbedLoader(fullname, spec.origin, rel, lines, self.probe)
      return spec
    return None


def install() -> bool:
  """Put the probe finder first on `sys.meta_path` when the environment names a plan; True if it did."""
  plan_file_path, hits_dir = os.environ.get(PLAN_ENV), os.environ.get(HITS_ENV)
  if not plan_file_path or not hits_dir: return False
  try: doc = json.loads(pathlib.Path(plan_file_path).read_text())
  except (OSError, ValueError): return False
  root = doc["root"]
  sut_dirs = tuple({os.path.join(base, p, "") for base in (root,
                                                           os.path.realpath(root)) for p in doc.get("packages", [])})
  probe = _Probe(hits_dir, sut_dirs)
  sys.meta_path.insert(0, _ProbeFinder(root, {p: set(lines) for p, lines in doc["files"].items()}, probe))
  return True


def hits(hits_dir: pathlib.Path) -> dict[str, set[int]]:
  """The changed lines the probes saw run, per file."""
  out: dict[str, set[int]] = {}
  try: text = (hits_dir / "hits.txt").read_text()
  except OSError: return out
  for line in text.splitlines():
    try: path, lines = json.loads(line)
    except (ValueError, TypeError): continue   # a line cut short by a killed process
    out.setdefault(path, set()).update(lines)
  return out
