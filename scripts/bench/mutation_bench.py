"""Mutation benchmark: how many planted compiler bugs does the harness catch, and does it stay quiet on refactors?

    python -m scripts.bench.mutation_bench [--only NAME...] [--gate-args "..."] [--keep] [--reduce]

Clones the committed HEAD into a temporary directory, then for each mutant commits one small edit on top of it and
runs `replay gate --base <clean commit> <gate args> -- <corpus>` there with a fresh database, exactly as CI would.
A bug is *reported* when the replay shows anything (a changed, mismatched, errored or nondeterministic capture, a
flag default note, slower kernels or drift), and *killed* when the gate fails (exit != 0). An equivalent refactor
that fails the gate is a false positive. Prints one line per mutant and the rates.

The bugs are ours (they span the Tensor frontend, autograd, optimizers, dtype promotion, flags, the scheduler, views,
symbolic folding, lowering and both runtimes); the harness is not tuned to any outside set.

With `--reduce`, the first capture whose outputs (else kernels) differ is reduced with `replay reduce` (60 s budget)
for each killed bug, and a table gives the graph's nodes before and after, the lines of the test file, the seconds and
whether the test fails with the bug and passes at the clean commit.
"""
from __future__ import annotations
import argparse, json, os, shlex, subprocess, sys, tempfile, time
from dataclasses import dataclass

# (file, old text, new text); the old text must occur in the file, the first occurrence is replaced (all with count=0)
@dataclass
class Mutant:
  name: str
  where: str
  edits: list[tuple[str, str, str]]
  equivalent: bool = False


def bug(name, path, old, new): return Mutant(name, path.split("/")[0], [(path, old, new)])
def same(name, *edits): return Mutant(name, edits[0][0].split("/")[0], list(edits), equivalent=True)


MOVE = "scheduler/tensor/movement.py"
EW, RED, FN, OPT, NN, GRAD = ("scheduler/tensor/elementwise.py", "scheduler/tensor/reduce.py",
                              "scheduler/tensor/functional.py",
                              "scheduler/nn/optim.py", "scheduler/nn/__init__.py", "scheduler/gradient.py")
SYM, VIEW, GROUP, KERN, SIMP = ("scheduler/symbolic.py", "scheduler/shape/view.py", "scheduler/sched_grouping.py",
                                "scheduler/sched_kernels.py",
                                "scheduler/sched_simplify.py")
LOWER, CPU, PY, DEV, DT, HELP = ("scheduler/codegen/lowerer.py", "runtimes/cpu.py", "runtimes/python.py",
                                 "scheduler/device.py", "scheduler/dtype.py",
                                 "scheduler/helpers.py")

MUTANTS = [
  # the Tensor frontend, autograd, optimizers, layers: above the captured graph
  bug("gelu_constant", EW, "0.044715 * x ** 3", "0.04715 * x ** 3"),
  bug("tanh_slope", EW, "(x.abs() < 0.05).where(series, 2.0 * (2.0 * x).sigmoid() - 1.0)",
      "(x.abs() < 0.05).where(series, 2.0 * (2.1 * x).sigmoid() - 1.0)"),
  bug("relu_leaks", EW, '"relu": lambda x: (x > 0).where(x, 0),', '"relu": lambda x: (x > -0.01).where(x, 0),'),
  bug("mean_count", RED, "return total.div(self._reduced_count(axis)).cast(result_dtype)",
      "return total.div(self._reduced_count(axis) + 1).cast(result_dtype)"),
  bug("layernorm_eps", FN, "return centered.mul(variance.add(eps).rsqrt())",
      "return centered.mul(variance.add(eps * 1000).rsqrt())"),
  bug("sgd_momentum_ignored", OPT, "velocity.assign(self.momentum * velocity + step)", "velocity.assign(step)"),
  bug("adam_no_bias_correction", OPT, "m_hat, v_hat = m / (1.0 - self.b1_t), v / (1.0 - self.b2_t)",
      "m_hat, v_hat = m, v / (1.0 - self.b2_t)"),
  bug("adamw_decay_sign", OPT, "direction = m_hat / (v_hat.sqrt() + self.eps) + self.wd * w.detach()",
      "direction = m_hat / (v_hat.sqrt() + self.eps) - self.wd * w.detach()"),
  bug("sgd_decay_sign", OPT, "step = g + self.wd * w.detach()", "step = g - self.wd * w.detach()"),
  bug("batchnorm_momentum", NN,
      "self.running_mean.assign(self.running_mean * (1 - self.momentum) + mean.detach() * self.momentum)",
      "self.running_mean.assign(self.running_mean * (1 - self.momentum) + mean.detach() * (1 - self.momentum))"),
  bug("grad_sqrt", GRAD, "Ops.SQRT: lambda g, out: (g / (out * 2),)", "Ops.SQRT: lambda g, out: (g / (out * 3),)"),
  bug("grad_exp2", GRAD, "Ops.EXP2: lambda g, out: (out * g * LN2,)", "Ops.EXP2: lambda g, out: (out * g,)"),
  bug("grad_recip_sign", GRAD, "Ops.RECIP: lambda g, out: (-g * out * out,)",
      "Ops.RECIP: lambda g, out: (g * out * out,)"),
  bug("int_promotes_to_float64", DT,
      "return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)",
      "return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.float64)"),
  # flag defaults
  bug("split_reduceop_off_by_default", HELP, 'SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)',
      'SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 0)'),
  bug("split_threshold_default", HELP, 'ContextVar("REDUCEOP_SPLIT_THRESHOLD", 32768)',
      'ContextVar("REDUCEOP_SPLIT_THRESHOLD", 4096)'),
  # the scheduler
  bug("no_write_after_read_edges", KERN, "deps = dedup(_kernel_inputs(k, kernels) + k.readers_first)",
      "deps = dedup(_kernel_inputs(k, kernels))"),
  bug("expand_never_realizes", GROUP, "if resolve(prod(t.shape) < prod(view.shape)) and not DONT_REALIZE_EXPAND:",
      "if False:"),
  bug("split_threshold_compare", SIMP, "if prod(x.shape) // out_size < REDUCEOP_SPLIT_THRESHOLD.value: return None",
      "if prod(x.shape) // out_size < REDUCEOP_SPLIT_THRESHOLD.value // 64: return None"),
  bug("fuse_arange_any_reduce", GROUP, "if FUSE_ARANGE and r.arg[0] is Ops.ADD and r.src[0].base.op is Ops.CONST",
      "if FUSE_ARANGE and r.src[0].base.op is Ops.CONST"),
  bug("conv_bw_fuses_always", GROUP, "if FUSE_CONV_BW and r.src[0].op is Ops.VIEW", "if r.src[0].op is Ops.VIEW"),
  # views and symbolic folding
  bug("flip_mask", VIEW, "if mask is not None: mask[axis] = (extent - mask[axis][1], extent - mask[axis][0])",
      "if mask is not None: mask[axis] = (extent - mask[axis][1], extent - mask[axis][0] + 1)"),
  bug("div_fold_bound", SYM, "if x.vmax < c.arg: return x.const_like(0)", "if x.vmax <= c.arg: return x.const_like(0)"),
  bug("mod_fold_bound", SYM, "if x.vmax < c.arg: return x\n", "if x.vmax <= c.arg: return x\n"),
  bug("const_product_fold", SYM, "return inner.src[0] * (inner.src[1].arg * c.arg)",
      "return inner.src[0] * (inner.src[1].arg + c.arg)"),
  bug("no_index_simplify", LOWER, "return idx.simplify(), valid.simplify()",
      "return idx, valid"),
  bug("load_ignores_valid", LOWER, "ret = self.emit(Ops.LOAD, u.dtype, (self.define_global(u.src[0]), idx, valid))",
      "ret = self.emit(Ops.LOAD, u.dtype, (self.define_global(u.src[0]), idx, self.const(True, dtypes.bool)))"),
  # runtimes and buffers
  bug("c_max_is_min", CPU, 'if op is Ops.MAX: return f"(({s[0]}>{s[1]})?{s[0]}:{s[1]})"',
      'if op is Ops.MAX: return f"(({s[0]}<{s[1]})?{s[0]}:{s[1]})"'),
  bug("c_fast_math", CPU, '"-ffp-contract=off", "-nostdlib")', '"-ffp-contract=off", "-nostdlib", "-ffast-math")'),
  bug("c_recip_epsilon", CPU, 'if op is Ops.RECIP: return f"(({ct})1/({s[0]}))"',
      'if op is Ops.RECIP: return f"(({ct})1/({s[0]}*({ct})1.0000001))"'),
  bug("python_idiv_sign", PY, "np.where((a < 0) != (b_safe < 0), np.zeros_like(magnitude) - magnitude, magnitude)",
      "np.where(a < 0, np.zeros_like(magnitude) - magnitude, magnitude)"),
  bug("python_max_is_min", PY, "Ops.MAX: lambda a, b: np.where(a > b, a, b)",
      "Ops.MAX: lambda a, b: np.where(a < b, a, b)"),
  bug("buffer_view_offset", DEV, "return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)",
      "return Buffer(self.device, size, dtype, base=self.base, offset=offset)"),
  # added for issue 24 (before the corpus was run against them), of the classes the outside suite found missed
  bug("grad_mul_swapped", GRAD, "Ops.MUL: lambda g, out: (out.src[1] * g, out.src[0] * g),",
      "Ops.MUL: lambda g, out: (out.src[0] * g, out.src[1] * g),"),
  bug("sgd_nesterov_dropped", OPT, "step = step + self.momentum * velocity if self.nesterov else velocity",
      "step = velocity"),
  bug("adamw_eps_inside_sqrt", OPT, "direction = m_hat / (v_hat.sqrt() + self.eps) + self.wd * w.detach()",
      "direction = m_hat / (v_hat + self.eps).sqrt() + self.wd * w.detach()"),
  bug("label_smoothing_mean_of_probs", FN, "label_smoothing * (log_probs.mean(-1) * counted)",
      "label_smoothing * (log_probs.exp().mean(-1) * counted)"),
  bug("promote_uint8_int8_to_uint16", DT, "dtypes.uint8: (dtypes.int16, dtypes.uint16),",
      "dtypes.uint8: (dtypes.uint16,),"),
  bug("promote_int64_to_float32", DT, "dtypes.int64: (dtypes.float16, dtypes.bfloat16),\n",
      "dtypes.int64: (dtypes.float32,),\n"),
  bug("conv_bias_on_wrong_axis", RED, "return result.add(bias.reshape(1, -1, *([1] * nk)))",
      "return result.add(bias.reshape(1, *([1] * nk), -1))"),
  bug("fuse_arange_on_by_default", HELP, 'FUSE_ARANGE = ContextVar("FUSE_ARANGE", 0)',
      'FUSE_ARANGE = ContextVar("FUSE_ARANGE", 1)'),
  bug("second_upcast_lanes_8", LOWER, "SECOND_UPCAST_LANES = (4, 2)", "SECOND_UPCAST_LANES = (8, 2)"),
  bug("c_idiv_zero_is_one", CPU, 'if op is Ops.IDIV: return f"(({s[1]})==0?({ct})0:({s[0]}/{s[1]}))"',
      'if op is Ops.IDIV: return f"(({s[1]})==0?({ct})1:({s[0]}/{s[1]}))"'),
  bug("python_cmplt_is_le", PY, "Ops.CMPLT: np.less,", "Ops.CMPLT: np.less_equal,"),
  # vector lanes (added with them, before the corpus was run against them)
  bug("vector_choice_lanes_reversed", CPU, 'for x in s]) for k in range(dtype.count))',
      'for x in s]) for k in reversed(range(dtype.count)))'),
  bug("gep_lanes_reversed", LOWER, "lane.scope[red] = self.emit(Ops.GEP, red.dtype, (vector,), k)",
      "lane.scope[red] = self.emit(Ops.GEP, red.dtype, (vector,), len(run) - 1 - k)"),
  bug("vector_load_at_last_lane", LOWER,
      "first = self.in_lane(run[0], lambda: self.value(node) if form",
      "first = self.in_lane(run[-1], lambda: self.value(node) if form"),
  bug("regions_drop_last_border", LOWER,
      "parts = [({axis: (0, start)}, False), *inner, ({axis: (at, shape[axis])}, False)]",
      "parts = [({axis: (0, start)}, False), *inner]"),
  bug("avx2_version_unused", CPU, 'if (__builtin_cpu_supports(\\"avx2\\"))',
      'if (0 && __builtin_cpu_supports(\\"avx2\\"))'),
  # bfloat16, LARS and the cast gradient (added with them, before the corpus was run against them)
  bug("c_bf16_truncates", CPU, "return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);",
      "return (unsigned short)(u >> 16);"),
  bug("lars_trust_ratio_inverted", OPT,
      "return both.where(self.tcoef * weight_norm / (grad_norm + self.wd * weight_norm), 1.0)",
      "return both.where(self.tcoef * grad_norm / (weight_norm + self.wd * grad_norm), 1.0)"),
  bug("cast_gradient_through_ints", GRAD,
      "return (g.cast(source),) if dtypes.is_float(source.scalar) and dtypes.is_float(out.dtype.scalar) else (None,)",
      "return (g.cast(source),) if dtypes.is_float(source.scalar) or dtypes.is_float(out.dtype.scalar) else (None,)"),
  # planted 2026-12-07, before looking at what the corpus runs: attention, losses, pooling, padding, resampling,
  # sorting, rolling
  bug("causal_mask_drops_diagonal", FN, "attn_mask = scores._band_mask(0, lower=True)",
      "attn_mask = scores._band_mask(-1, lower=True)"),
  bug("sparse_ce_mean_counts_ignored", FN, "return -(per_sample.sum() / counted.sum()) if reduction",
      "return -(per_sample.sum() / Y.numel()) if reduction"),
  bug("avg_pool_pad_flag_confused", RED, "value=1.0 if count_include_pad", "value=1.0 if not ceil_mode"),
  bug("reflect_pad_repeats_edge", MOVE, "left, right = part(1, before + 1).flip(axis), part(n - 1 - after, n - 1)",
      "left, right = part(0, before).flip(axis), part(n - after, n)"),
  bug("align_corners_scale", MOVE, "source = positions * ((n - 1) / (out - 1))",
      "source = positions * ((n - 1) / out)"),
  bug("descending_sort_ties", RED, "before = (theirs > mine) if descending", "before = (theirs >= mine) if descending"),
  bug("roll_negative_shift", MOVE, "cut = size - shift % size", "cut = size - abs(shift) % size"),
  # equivalent refactors: none of these may fail the gate
  same("rename_local", (KERN, "emitted", "scheduled_kernels", 0)),
  same("rename_private_helper", (SYM, "_fold_nested", "_fold_repeated_op", 0)),
  same("comments_and_docstring",
       (LOWER, "def _is_one(s) -> bool:", "# an extent of one needs no loop\ndef _is_one(s) -> bool:"),
       (CPU, "def render_const(val, dtype: DType) -> str:",
        'def render_const(val, dtype: DType) -> str:\n  """A constant as a C literal."""')),
  same("extract_helper", (EW, '"square": lambda x: x * x,', '"square": _square,'),
       (EW, "def _gelu(x):", "def _square(x): return x * x\n\n\ndef _gelu(x):")),
  same("reverse_with_slice",
       (LOWER, "for rng in reversed(opened): self.emit(Ops.ENDRANGE",
        "for rng in opened[::-1]: self.emit(Ops.ENDRANGE")),
  same("reorder_imports",
       (OPT, "from scheduler.tensor import Tensor\nfrom scheduler.dtype import dtypes, least_upper_dtype\n",
        "from scheduler.dtype import dtypes, least_upper_dtype\nfrom scheduler.tensor import Tensor\n")),
  same("error_message_wording",
       (VIEW, 'raise ValueError(f"invalid shrink {arg} for {self.shape}")',
        'raise ValueError(f"shrink {arg} does not fit {self.shape}")')),
  same("flag_default_unchanged_restated",
       (HELP, 'FUSE_ARANGE = ContextVar("FUSE_ARANGE", 0)', 'FUSE_ARANGE = ContextVar("FUSE_ARANGE", int(False))')),
]


def git(cwd, *args) -> str:
  return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def apply(clone: str, mutant: Mutant) -> None:
  for path, old, new, *count in mutant.edits:
    full = os.path.join(clone, path)
    text = open(full).read()
    if old not in text: raise SystemExit(f"mutant {mutant.name}: {old!r} is not in {path} (update the benchmark)")
    open(full, "w").write(text.replace(old, new) if count and count[0] == 0 else text.replace(old, new, 1))


def reported(report: dict) -> bool:
  totals = report.get("totals", {})
  return bool(sum(v for k, v in totals.items() if k != "same") or report.get("notes")
              and any("flag defaults" in n for n in report["notes"])
              or report.get("drift") or report.get("slower"))


def reduce_first(clone: str, base: str, env: dict, report: dict, workdir: str) -> dict:
  """`replay reduce` of the first differing capture: mismatching outputs first, then changed schedules."""
  import re
  outcomes = report.get("outcomes", [])
  pick = next((o for o in outcomes if o["kind"] == "exec" and o["status"] == "mismatch"), None) or \
    next((o for o in outcomes if o["kind"] in ("exec", "schedule") and o["status"] == "changed"), None)
  if pick is None: return {"note": "no exec or schedule capture differs in the replay"}
  t0 = time.perf_counter()
  proc = subprocess.run([sys.executable, "-m", "replay", "reduce", str(pick["capture_id"]), "--base", base,
                         "--budget", "60", "--out", os.path.join(workdir, "reduced")], cwd=clone, env=env,
                        capture_output=True, text=True)
  seconds = time.perf_counter() - t0
  sizes = re.search(r": (\d+) nodes -> (\d+) in", proc.stdout)
  lines = re.search(r": (\d+) lines? of Tensor code", proc.stdout)
  elements = re.search(r"buffer elements (\d+) -> (\d+)", proc.stdout)
  if proc.returncode != 0 or not sizes:
    return {"note": (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:100], "seconds": seconds}
  return {"capture": pick["capture_id"], "status": pick["status"], "original": int(sizes.group(1)),
          "reduced": int(sizes.group(2)), "lines": int(lines.group(1)) if lines else None, "seconds": seconds,
          "elements": f"{elements.group(1)}->{elements.group(2)}" if elements else "",
          "verified": "with the base: passes; with the working tree: fails" in proc.stdout}


def run_one(clone: str, base: str, mutant: Mutant, gate_args: list[str], corpus: list[str], workdir: str,
            reduce: bool = False) -> dict:
  git(clone, "checkout", "-q", "-B", f"mutant-{mutant.name}", base)
  apply(clone, mutant)
  git(clone, "commit", "-qam", f"mutant {mutant.name}")
  db = os.path.join(workdir, f"{mutant.name}.db")
  env = {**os.environ, "REPLAY_DB": db, "REPLAY_CACHE_DIR": os.path.join(workdir, "cache"), "PYTHONPATH": clone}
  for k in ("CAPTURE_PROCESS_REPLAY", "PR_TITLE", "PYTEST_CURRENT_TEST"): env.pop(k, None)
  t0 = time.perf_counter()
  gate = subprocess.run([sys.executable, "-m", "replay", "gate", "--base", base, *gate_args, "--", sys.executable, "-m",
                         "scripts.workloads", *corpus],
                        cwd=clone, env=env, capture_output=True, text=True)
  seconds = time.perf_counter() - t0
  rep = subprocess.run([sys.executable, "-m", "replay", "report", "--format", "json"], cwd=clone, env=env,
                       capture_output=True, text=True)
  try: report = json.loads(rep.stdout)
  except ValueError: report = {}
  verdict = report.get("verdict") or (gate.stdout.strip().splitlines() or ["(no output)"])[-1]
  reduced = reduce_first(clone, base, env, report, workdir) if reduce and gate.returncode != 0 else None
  return {"name": mutant.name, "where": mutant.where, "equivalent": mutant.equivalent, "exit": gate.returncode,
          "reported": reported(report) or gate.returncode != 0, "seconds": seconds, "verdict": verdict,
          "reduced": reduced}


def print_reductions(results: list[dict]) -> None:
  done = [r for r in results if r.get("reduced")]
  print(f"\n{'bug':<32} {'capture':>8} {'nodes':>6} {'reduced':>8} {'lines':>6} {'elements':>16} {'seconds':>8}  test")
  for r in done:
    red = r["reduced"]
    if "reduced" not in red:
      print(f"{r['name']:<32} {'':>8} {'':>6} {'':>8} {'':>6} {'':>16} {red.get('seconds', 0):8.1f}  {red['note']}")
      continue
    print(f"{r['name']:<32} {red['capture']:>8} {red['original']:>6} {red['reduced']:>8} {str(red['lines']):>6} "
          f"{red['elements']:>16} "
          f"{red['seconds']:8.1f}  {'fails with the bug, passes without' if red['verified'] else 'NOT VERIFIED'}")
  small = [r for r in done if r["reduced"].get("reduced") is not None and
           (r["reduced"]["reduced"] <= 15 or (r["reduced"]["lines"] or 99) <= 10) and r["reduced"]["seconds"] <= 60]
  print(f"{len(small)} of {len(done)} killed bugs reduced to at most 15 nodes or 10 lines within 60 s")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m scripts.bench.mutation_bench", description=__doc__.split("\n\n")[0])
  parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
  parser.add_argument("--gate-args", default="--allow-incompatible",
                      help="options for `replay gate` (default: %(default)s, as .ci/run runs it: end to end, guard of "
                           "changed lines)")
  parser.add_argument("--corpus", default="",
                      help="arguments for `python -m scripts.workloads` (default: the whole corpus)")
  parser.add_argument("--list", action="store_true", help="list the mutants and exit")
  parser.add_argument("--keep", action="store_true", help="keep the temporary clone and databases")
  parser.add_argument("--reduce", action="store_true", help="reduce the first differing capture of each killed bug")
  args = parser.parse_args(argv)
  mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
  if args.list:
    for m in MUTANTS: print(f"{'refactor' if m.equivalent else 'bug':<9} {m.where:<10} {m.name}")
    return 0
  repo = git(".", "rev-parse", "--show-toplevel")
  workdir = tempfile.mkdtemp(prefix="mutation-bench-")
  clone = os.path.join(workdir, "clone")
  subprocess.run(["git", "clone", "-q", repo, clone], check=True)
  git(clone, "config", "user.email", "bench@example.com"); git(clone, "config", "user.name", "bench")
  base = git(clone, "rev-parse", "HEAD")
  print(f"mutation benchmark: {len(mutants)} mutants on {base[:10]}, gate {args.gate_args!r}, corpus "
        f"{args.corpus or '(all)'!r}")
  results = []
  for m in mutants:
    r = run_one(clone, base, m, shlex.split(args.gate_args), shlex.split(args.corpus), workdir, args.reduce)
    results.append(r)
    tag = ("FALSE POSITIVE" if r["exit"] else "quiet" if not r["reported"] else "reported") if m.equivalent else \
          ("killed" if r["exit"] else "reported" if r["reported"] else "MISSED")
    print(f"{tag:<15} {'refactor' if m.equivalent else 'bug':<9} {m.where:<10} {m.name:<32} exit {r['exit']}  "
          f"{r['seconds']:6.1f}s  {r['verdict'][:110]}",
          flush=True)
  bugs, refactors = [r for r in results if not r["equivalent"]], [r for r in results if r["equivalent"]]
  if bugs:
    print(f"\nbugs: {len(bugs)}; reported {sum(r['reported'] for r in bugs)} "
          f"({sum(r['reported'] for r in bugs) / len(bugs):.0%}), "
          f"gate failed {sum(r['exit'] != 0 for r in bugs)} ({sum(r['exit'] != 0 for r in bugs) / len(bugs):.0%})")
  if refactors:
    print(f"refactors: {len(refactors)}; false positives (gate failed) {sum(r['exit'] != 0 for r in refactors)}, "
          f"reported anything {sum(r['reported'] for r in refactors)}")
  if args.reduce: print_reductions(results)
  if not args.keep: subprocess.run(["rm", "-rf", workdir])
  else: print(f"kept {workdir}")
  return 0


if __name__ == "__main__": sys.exit(main())
