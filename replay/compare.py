"""Comparison of a replayed result with the captured one, per kind.

ASTs compare by structure and diff as a canonical, indented text form; rendered sources diff as
text; outputs compare with a numeric policy (exact for ints and bools, per-dtype tolerances for
floats, NaN and inf equal to themselves). Works on UOps of any revision: it reads only op names,
dtypes, args and sources.
"""
from __future__ import annotations
import difflib, json
from dataclasses import dataclass, field
from typing import Any, Optional
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
    return " ".join(f"shape={v.shape} strides={v.strides}" + (f" offset={v.offset}" if v.offset else "") + (f" mask={v.mask}" if v.mask else "")
                    for v in arg.views)
  if isinstance(arg, tuple) and arg and hasattr(arg[0], "name") and not isinstance(arg[0], str): return f"({arg[0].name}, {arg[1]})"
  return repr(arg)


def ast_text(ast) -> str:
  """Indented, deterministic text of an AST; a subtree seen before prints as a reference to its first line."""
  lines: list[str] = []
  seen: dict[Any, int] = {}

  def walk(u, depth: int):
    if u in seen:
      lines.append("  " * depth + f"^{seen[u]}")
      return
    seen[u] = len(lines)
    arg = _arg_text(u)
    lines.append("  " * depth + f"{u.op.name} {u.dtype!r}" + (f" {arg}" if arg else ""))
    for s in u.src: walk(s, depth + 1)
  walk(ast, 0)
  return "\n".join(lines)


def schedule_text(asts: list) -> str:
  return "\n".join(f"=== kernel {i} ===\n{ast_text(a)}" for i, a in enumerate(asts))


def unified(base: str, captured: str, base_name: str = "base", captured_name: str = "captured") -> str:
  lines = list(difflib.unified_diff(base.splitlines(), captured.splitlines(), base_name, captured_name, lineterm="", n=3))
  if len(lines) > MAX_DIFF_LINES: lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
  return "\n".join(lines)


def compare_schedule(captured: dict, replayed: dict) -> Comparison:
  cap_keys = [ast_text(a) for a in captured["asts"]]
  rep_keys = [ast_text(a) for a in replayed["asts"]]
  cap_vars = sorted((k.arg[0], v) for k, v in captured["var_vals"].items())
  rep_vars = sorted((k.arg[0], v) for k, v in replayed["var_vals"].items())
  metrics = {"kernels_captured": len(cap_keys), "kernels_base": len(rep_keys)}
  if cap_keys == rep_keys and cap_vars == rep_vars: return Comparison("same", metrics=metrics)
  if len(cap_keys) > len(rep_keys) and rep_keys: metrics["slower"] = (len(cap_keys) - len(rep_keys)) / len(rep_keys)   # more kernels to run
  diff = unified(schedule_text(replayed["asts"]) + f"\nvars {rep_vars}", schedule_text(captured["asts"]) + f"\nvars {cap_vars}")
  return Comparison("changed", diff, metrics)


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
    base_cost, captured_cost = static_cost(replayed["src"], replayed["name"]), static_cost(captured["src"], captured["name"])
    metrics = {"cost_base": base_cost, "cost_captured": captured_cost}
    if (grew := growth(base_cost, captured_cost)) is not None and grew > SLOWER_THRESHOLD: metrics["slower"] = grew
  parts = [] if same_options else ["compile options changed:\n" + unified(_options_text(replayed["options"]), _options_text(captured["options"]))]
  if "slower" in metrics:
    b, c = metrics["cost_base"], metrics["cost_captured"]
    parts.append(f"slower: static cost {b['cost']:.0f} -> {c['cost']:.0f} ({_percent(metrics['slower'])}; alu {b['alu']} -> {c['alu']}, "
                 f"loads {b['loads']} -> {c['loads']}, stores {b['stores']} -> {c['stores']})")
  if not same_source: parts.append(unified(f"// {replayed['name']}\n{replayed['src']}", f"// {captured['name']}\n{captured['src']}"))
  return Comparison("changed", "\n".join(parts), metrics)


def _percent(fraction: float) -> str: return "+inf%" if fraction == float("inf") else f"+{fraction * 100:.0f}%"


def compare_arrays(captured: np.ndarray, replayed: np.ndarray, tolerances: Optional[dict] = None) -> tuple[bool, dict]:
  """(equal under the policy, metrics: max abs and rel error, mismatch count)."""
  tolerances = {**DEFAULT_TOLERANCES, **(tolerances or {})}
  captured, replayed = np.asarray(captured), np.asarray(replayed)
  if captured.shape != replayed.shape or captured.dtype != replayed.dtype:
    return False, {"reason": f"captured {captured.dtype}{list(captured.shape)} vs base {replayed.dtype}{list(replayed.shape)}"}
  if captured.size == 0: return True, {"max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0}
  if captured.dtype.kind in "biu":
    bad = captured != replayed
    diff = np.abs(captured.astype(np.float64) - replayed.astype(np.float64))
    return not bad.any(), {"max_abs_err": float(diff.max()), "max_rel_err": float((diff / np.maximum(np.abs(captured.astype(np.float64)), 1e-300)).max()),
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
  # drift: elements inside the tolerance that are not the same bits (NaNs of any payload count as equal)
  drifted = ~bad & ~(np.isnan(a) & np.isnan(b)) & (captured.view(_BITS[captured.itemsize]) != replayed.view(_BITS[captured.itemsize]))
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


def compare_exec(captured: dict, replayed: dict, tolerances: Optional[dict] = None, names: Optional[list] = None) -> Comparison:
  outs_c, outs_r = captured["outputs"], replayed["outputs"]
  if len(outs_c) != len(outs_r): return Comparison("mismatch", f"captured {len(outs_c)} outputs, base produced {len(outs_r)}")
  lines, total = [], {"max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0}
  for i, (c, r) in enumerate(zip(outs_c, outs_r)):
    ok, m = compare_arrays(c, r, tolerances)
    for k in ("max_abs_err", "max_rel_err", "mismatches"): total[k] = max(total[k], m.get(k, 0)) if k != "mismatches" else total[k] + m.get(k, 0)
    if m.get("drift"):
      total["drift"] = total.get("drift", 0) + m["drift"]
      total["max_ulp"] = max(total.get("max_ulp", 0), m["max_ulp"])
      total["drift_max_rel_err"] = max(total.get("drift_max_rel_err", 0.0), m["drift_max_rel_err"])
    if not ok:
      detail = m.get("reason") or f"{m['mismatches']} of {np.asarray(c).size} elements differ, max abs err {m['max_abs_err']:.3g}, max rel err {m['max_rel_err']:.3g}"
      name = f" ({names[i]})" if names and i < len(names) else f" ({np.asarray(c).dtype}{list(np.asarray(c).shape)})"
      lines.append(f"output {i}{name}: {detail}")
      if "reason" not in m:
        flat_c, flat_r = np.asarray(c).reshape(-1), np.asarray(r).reshape(-1)
        where = np.flatnonzero(~np.isclose(flat_c.astype(np.float64), flat_r.astype(np.float64), equal_nan=True))[:5] if flat_c.dtype.kind == "f" \
          else np.flatnonzero(flat_c != flat_r)[:5]
        for j in where: lines.append(f"-  [{j}] {flat_r[j]!r}\n+  [{j}] {flat_c[j]!r}")
  return Comparison("mismatch" if lines else "same", "\n".join(lines), total)
