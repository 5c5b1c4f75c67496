"""Comparison of a replayed result with the captured one, per kind.

ASTs compare by structure and diff as a canonical, indented text form; rendered sources diff as
text; outputs compare with a numeric policy (exact for ints and bools, per-dtype tolerances for
floats, NaN and inf equal to themselves). Works on UOps of any revision: it reads only op names,
dtypes, args and sources.
"""
from __future__ import annotations
import difflib, hashlib, json
from dataclasses import dataclass, field
from typing import Optional
import numpy as np
from replay.cost import static_cost, growth

# (rtol, atol) per float dtype; the C and numpy runtimes differ in the last bits of transcendental math
DEFAULT_TOLERANCES = {"float16": (1e-2, 1e-3), "float32": (1e-5, 1e-6), "float64": (1e-9, 1e-12)}
MAX_DIFF_LINES = 400
SLOWER_THRESHOLD = 0.05   # a changed kernel whose static cost grows by more than this fraction is flagged `slower`


@dataclass
class Comparison:
  status: str  # same, changed, mismatch
  diff: str = ""
  metrics: dict = field(default_factory=dict)


def _arg_text(u) -> str:
  arg = u.arg
  if arg is None: return ""
  if hasattr(arg, "views"):  # a ShapeTracker
    return " ".join(f"shape={v.shape} strides={v.strides}" + (f" offset={v.offset}" if v.offset
                                                              else "") + (f" mask={v.mask}" if v.mask else "")
                    for v in arg.views)
  if isinstance(arg, tuple) and arg and hasattr(arg[0], "name") and not isinstance(arg[0], str):
    return f"({arg[0].name}, {arg[1]})"
  return repr(arg)


def _labels(ast) -> dict:
  """A short label per node, derived from the node's content (op, dtype, arg and its sources' labels): the same
  subtree gets the same label in the base's AST and the captured one, so back-references stay put in a diff."""
  labels: dict = {}
  for u in ast.toposort:
    text = f"{u.op.name}|{u.dtype!r}|{_arg_text(u)}|" + ",".join(labels[s] for s in u.src)
    labels[u] = hashlib.sha1(text.encode()).hexdigest()[:6]
  return labels


def ast_text(ast) -> str:
  """Indented, deterministic text of an AST. A node used more than once is printed once with its label (`#a1b2c3`)
  and referenced by it later (`^a1b2c3 LOAD`); labels come from content, so an unchanged subtree reads the same."""
  labels = _labels(ast)
  uses: dict = {}
  for u in ast.toposort:
    for s in u.src: uses[s] = uses.get(s, 0) + 1
  lines: list[str] = []
  printed: set = set()
  todo = [(ast, 0)]   # a stack, not recursion: an AST may be thousands of nodes deep
  while todo:
    u, depth = todo.pop()
    if u in printed:
      lines.append(indent(depth) + f"^{labels[u]} {u.op.name}")
      continue
    printed.add(u)
    arg = _arg_text(u)
    lines.append(indent(depth) + f"{u.op.name} {u.dtype!r}" + (f" {arg}" if arg
                                                               else "") + (f"  #{labels[u]}" if uses.get(u, 0) > 1
                                                                           else ""))
    todo.extend((s, depth + 1) for s in reversed(u.src))
  return "\n".join(lines)


MAX_INDENT = 40


def indent(depth: int) -> str:
  """Two spaces a level; deeper than MAX_INDENT levels the depth is written out, so a deep graph's text stays linear."""
  return "  " * depth if depth <= MAX_INDENT else "  " * MAX_INDENT + f"[{depth}] "


def kernel_label(ast) -> str:
  """The kernel's name (`r_16_32`) when the compiler on the path can name it, else its top op."""
  try:
    from replay import sut
    return sut.contract().kernel_name(ast)
  except Exception: return getattr(getattr(ast, "op", None), "name", "?")


def schedule_text(asts: list) -> str:
  return "\n".join(f"=== kernel {i} ({kernel_label(a)}) ===\n{ast_text(a)}" for i, a in enumerate(asts))


def unified(base: str, captured: str, base_name: str = "base", captured_name: str = "captured") -> str:
  lines = list(difflib.unified_diff(base.splitlines(), captured.splitlines(), base_name, captured_name, lineterm="",
                                    n=3))
  if len(lines) > MAX_DIFF_LINES:
    lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
  return "\n".join(lines)


def _span(first: int, end: int) -> str: return f"kernel {first}" if end - first == 1 else f"kernels {first}-{end - 1}"


def _names(asts: list, first: int, end: int) -> str: return ", ".join(kernel_label(a) for a in asts[first:end])


def kernel_changes(base: list, captured: list) -> tuple[list[str], list[str]]:
  """Kernels of the base's schedule matched with the captured one's (equal structure first, then position):
  (one summary line per change, a diff of only the kernels that changed). Indices count from 0; a base index is
  said so, a plain index is the captured schedule's."""
  base_texts, cap_texts = [ast_text(a) for a in base], [ast_text(a) for a in captured]
  summary, diffs = [], []
  for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, base_texts, cap_texts, autojunk=False).get_opcodes():
    if tag == "equal": continue
    if tag == "delete":
      summary.append(f"{_span(i1, i2)} of the base ({_names(base, i1, i2)}) removed")
      diffs.append(unified("\n".join(base_texts[i1:i2]), "", f"base {_span(i1, i2)}", "captured (none)"))
    elif tag == "insert":
      summary.append(f"{_span(j1, j2)} ({_names(captured, j1, j2)}) added")
      diffs.append(unified("", "\n".join(cap_texts[j1:j2]), "base (none)", f"captured {_span(j1, j2)}"))
    elif i2 - i1 == j2 - j1:
      for i, j in zip(range(i1, i2), range(j1, j2)):
        moved = "" if i == j else f" (kernel {i} of the base)"
        summary.append(f"kernel {j} ({kernel_label(captured[j])}) changed{moved}")
        diffs.append(unified(base_texts[i], cap_texts[j], f"base kernel {i} ({kernel_label(base[i])})",
                             f"captured kernel {j} ({kernel_label(captured[j])})"))
    else:
      if j2 - j1 == 1:
        what = (f"{_span(i1, i2)} of the base ({_names(base, i1, i2)}) fused into kernel {j1} "
                f"({_names(captured, j1, j2)})")
      elif i2 - i1 == 1:
        what = (f"kernel {i1} of the base ({_names(base, i1, i2)}) split into {_span(j1, j2)} "
                f"({_names(captured, j1, j2)})")
      else:
        what = (f"{_span(i1, i2)} of the base ({_names(base, i1, i2)}) became {_span(j1, j2)} "
                f"({_names(captured, j1, j2)})")
      summary.append(what)
      diffs.append(unified("\n".join(base_texts[i1:i2]), "\n".join(cap_texts[j1:j2]), f"base {_span(i1, i2)}",
                           f"captured {_span(j1, j2)}"))
  return summary, diffs


def compare_schedule(captured: dict, replayed: dict) -> Comparison:
  cap_vars = sorted((k.arg[0], v) for k, v in captured["var_vals"].items())
  rep_vars = sorted((k.arg[0], v) for k, v in replayed["var_vals"].items())
  metrics = {"kernels_captured": len(captured["asts"]), "kernels_base": len(replayed["asts"])}
  # UOps are hash-consed: kernels of equal structure are the same objects, and need no text to compare
  same_objects = all(a is b for a, b in zip(captured["asts"], replayed["asts"]))
  if len(captured["asts"]) == len(replayed["asts"]) and same_objects and cap_vars == rep_vars:
    return Comparison("same", metrics=metrics)
  cap_keys = [ast_text(a) for a in captured["asts"]]
  rep_keys = [ast_text(a) for a in replayed["asts"]]
  if cap_keys == rep_keys and cap_vars == rep_vars: return Comparison("same", metrics=metrics)
  if len(cap_keys) > len(rep_keys) and rep_keys:
    metrics["slower"] = (len(cap_keys) - len(rep_keys)) / len(rep_keys)   # more kernels to run
  summary, diffs = kernel_changes(replayed["asts"], captured["asts"])
  head = [f"schedule: {len(rep_keys)} kernels in the base, {len(cap_keys)} captured"] + summary
  if cap_vars != rep_vars: head.append(f"variables: base {rep_vars}, captured {cap_vars}")
  return Comparison("changed", "\n".join(head + [""] + diffs), metrics)


def _options_text(options: dict) -> str:
  return "\n".join(f"{key}: {json.dumps(options[key], sort_keys=True)}" for key in sorted(options))


def compare_kernel(captured: dict, replayed: dict) -> Comparison:
  """Source, kernel name, and (when both sides record them) the compile options: flags and compiler."""
  same_source = captured["src"] == replayed["src"] and captured["name"] == replayed["name"]
  options_known = isinstance(captured.get("options"), dict) and isinstance(replayed.get("options"), dict)
  same_options = not options_known or captured["options"] == replayed["options"]
  if same_source and same_options: return Comparison("same")
  metrics = {}
  if not same_source:
    base_cost, captured_cost = static_cost(replayed["src"],
                                           replayed["name"]), static_cost(captured["src"], captured["name"])
    metrics = {"cost_base": base_cost, "cost_captured": captured_cost}
    if (grew := growth(base_cost, captured_cost)) is not None and grew > SLOWER_THRESHOLD: metrics["slower"] = grew
  parts = [] if same_options else ["compile options changed:\n" + unified(_options_text(replayed["options"]),
                                                                          _options_text(captured["options"]))]
  if "slower" in metrics:
    b, c = metrics["cost_base"], metrics["cost_captured"]
    parts.append(f"slower: static cost {b['cost']:.0f} -> {c['cost']:.0f} ({_percent(metrics['slower'])}; alu "
                 f"{b['alu']} -> {c['alu']}, "
                 f"loads {b['loads']} -> {c['loads']}, stores {b['stores']} -> {c['stores']})")
  if not same_source:
    parts.append(unified(f"// {replayed['name']}\n{replayed['src']}", f"// {captured['name']}\n{captured['src']}"))
  return Comparison("changed", "\n".join(parts), metrics)


def _percent(fraction: float) -> str: return "+inf%" if fraction == float("inf") else f"+{fraction * 100:.0f}%"


def compare_arrays(captured: np.ndarray, replayed: np.ndarray, tolerances: Optional[dict] = None) -> tuple[bool, dict]:
  """(equal under the policy, metrics: max abs and rel error, mismatch count)."""
  tolerances = {**DEFAULT_TOLERANCES, **(tolerances or {})}
  captured, replayed = np.asarray(captured), np.asarray(replayed)
  if captured.shape != replayed.shape or captured.dtype != replayed.dtype:
    return False, {"reason": f"captured {captured.dtype}{list(captured.shape)} vs base "
                             f"{replayed.dtype}{list(replayed.shape)}"}
  if captured.size == 0: return True, {"max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0}
  if captured.dtype.kind in "biu":
    bad = captured != replayed
    diff = np.abs(captured.astype(np.float64) - replayed.astype(np.float64))
    return not bad.any(), {"max_abs_err": float(diff.max()),
                           "max_rel_err": float((diff / np.maximum(np.abs(captured.astype(np.float64)), 1e-300)).max()),
                           "mismatches": int(bad.sum())}
  rtol, atol = tolerances.get(captured.dtype.name, DEFAULT_TOLERANCES["float32"])
  a, b = captured.astype(np.float64), replayed.astype(np.float64)
  same_special = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b)))
  finite = np.isfinite(a) & np.isfinite(b)
  with np.errstate(all="ignore"):
    abs_err = np.where(finite, np.abs(a - b), 0.0)
    rel_err = np.where(finite, abs_err / np.maximum(np.abs(a), 1e-30), 0.0)
  bad = ~(same_special | (finite & (abs_err <= atol + rtol * np.abs(a))))
  metrics = {"max_abs_err": float(abs_err.max()), "max_rel_err": float(rel_err.max()), "mismatches": int(bad.sum())}
  if (special := int((bad & ~finite).sum())): metrics["nonfinite"] = special   # the errors above are over finite pairs
  # drift: elements inside the tolerance that are not the same bits (NaNs of any payload count as equal)
  bits = _BITS[captured.itemsize]
  drifted = ~bad & ~(np.isnan(a) & np.isnan(b)) & (captured.view(bits) != replayed.view(bits))
  if drifted.any():
    metrics.update(drift=int(drifted.sum()), max_ulp=int(ulp_distance(captured[drifted], replayed[drifted]).max()),
                   drift_max_rel_err=float(rel_err[drifted].max()))
  return not bad.any(), metrics


_BITS = {2: np.int16, 4: np.int32, 8: np.int64}


def ulp_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """How many representable floats lie between x and y (same dtype, finite): the bit patterns mapped to one
  monotonic integer line, then subtracted."""
  ints = _BITS[x.itemsize]
  def line(v):
    i = v.view(ints).astype(np.int64)
    return np.where(i < 0, np.iinfo(ints).min - i, i)
  return np.abs(line(x) - line(y))


def output_names(meta) -> Optional[list]:
  """The names an exec capture recorded for its outputs (dtype, shape, the function and the line that made each)."""
  if isinstance(meta, str):
    try: meta = json.loads(meta or "{}")
    except ValueError: return None
  names = meta.get("outputs") if isinstance(meta, dict) else None
  return [str(n) for n in names] if isinstance(names, list) else None


def compare_exec(captured: dict, replayed: dict, tolerances: Optional[dict] = None,
                 names: Optional[list] = None) -> Comparison:
  outs_c, outs_r = captured["outputs"], replayed["outputs"]
  if len(outs_c) != len(outs_r):
    return Comparison("mismatch", f"captured {len(outs_c)} outputs, base produced {len(outs_r)}")
  lines, total = [], {"max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0}
  for i, (c, r) in enumerate(zip(outs_c, outs_r)):
    ok, m = compare_arrays(c, r, tolerances)
    for k in ("max_abs_err", "max_rel_err", "mismatches"):
      total[k] = max(total[k], m.get(k, 0)) if k != "mismatches" else total[k] + m.get(k, 0)
    if m.get("drift"):
      total["drift"] = total.get("drift", 0) + m["drift"]
      total["max_ulp"] = max(total.get("max_ulp", 0), m["max_ulp"])
      total["drift_max_rel_err"] = max(total.get("drift_max_rel_err", 0.0), m["drift_max_rel_err"])
    if not ok:
      detail = (m.get("reason")
                or f"{m['mismatches']} of {np.asarray(c).size} elements differ, max abs err {m['max_abs_err']:.3g}, "
                   f"max rel err {m['max_rel_err']:.3g}"
                + (f" ({m['nonfinite']} of them nan or inf against another value)" if m.get("nonfinite") else ""))
      name = f" ({names[i]})" if names and i < len(names) else f" ({np.asarray(c).dtype}{list(np.asarray(c).shape)})"
      lines.append(f"output {i}{name}: {detail}")
      if "reason" not in m:
        flat_c, flat_r = np.asarray(c).reshape(-1), np.asarray(r).reshape(-1)
        where = np.flatnonzero(~np.isclose(flat_c.astype(np.float64), flat_r.astype(np.float64),
                                           equal_nan=True))[:5] if flat_c.dtype.kind == "f" \
          else np.flatnonzero(flat_c != flat_r)[:5]
        for j in where: lines.append(f"-  [{j}] {flat_r[j]!r}\n+  [{j}] {flat_c[j]!r}")
  return Comparison("mismatch" if lines else "same", "\n".join(lines), total)
