"""CPU device: renders a lowered kernel to C, compiles it with the system C compiler (`CC`, default
`cc`) into a shared object cached on disk by source hash, and calls it through ctypes.

Rendering is capture point **kernel**: (AST, device, options) in, (source, kernel name) out.
"""
from __future__ import annotations
import ctypes, functools, math, os, pathlib, platform, re, shutil, subprocess
from typing import Callable, Optional
from scheduler.dtype import DType, dtypes, truncate_const
from scheduler.device import BUILDS, HostDevice, Buffer, build_all, cache_dir, cache_path, find_c_compiler, DeviceError
from scheduler.ops import UOp, Ops
from scheduler.codegen.lowerer import lower, Program
from scheduler import hooks

# Portable on purpose (no -march=native: a kernel built here runs, and replays, on any x86-64/arm64 host of the same
# compiler). -nostdlib links no C runtime start files or libc (a kernel calls only math functions and compiler
# helpers for half floats); libm is still linked so that those calls bind to its current symbol versions, and
# libgcc for the helpers. That takes about a tenth off every build.
CFLAGS = ("-O2", "-shared", "-fPIC", "-fwrapv", "-std=c11", "-ffp-contract=off", "-nostdlib")
LIBS = ("-lm", "-lgcc")
# A kernel of fewer loop steps than this is marked to build unoptimized (gcc's optimize attribute: -O0 for that one
# function): its run takes microseconds either way, while -O2 quadruples its share of the build (the corpus: 8.9 s of
# gcc at -O2, 2.1 s with its small kernels, 774 of 807, at -O0). Results are the same: IEEE arithmetic without
# contraction at every level.
SMALL_KERNEL_STEPS = 1 << 14
# On x86-64, a kernel whose lanes accumulate in vectors is also lowered with vectors of 8 float32 and built for AVX2
# beside the portable version; the kernel calls the one the CPU runs (see `render_c`).
WIDE_VECTOR = 8 if platform.machine().lower() in ("x86_64", "amd64") else None
UNIT_MIN_KERNELS = 2       # this many new kernels of one schedule build as shared translation units...
KERNELS_PER_UNIT = 8       # ...of at least this many kernels each (one unit per core at most)


@functools.cache
def compiler_identity() -> str:
  """Which C compiler builds the kernels, without running it: the resolved executable (e.g. .../gcc-12) and its
  size and modification time, so that an upgraded or different compiler is a different identity."""
  cc = find_c_compiler()
  if cc is None: return "none"
  path = shutil.which(cc) or cc
  try:
    real = os.path.realpath(path)
    info = os.stat(real)
    return f"{cc} -> {real} ({info.st_size} bytes, mtime {int(info.st_mtime)})"
  except OSError: return cc


def compile_options() -> dict:
  """Everything besides the source that determines the compiled kernel (capture point **kernel** records it)."""
  return {"cflags": list(CFLAGS), "compiler": compiler_identity()}


def open_device(name: str) -> "CPUDevice": return CPUDevice(name)


class CPUDevice(HostDevice):
  def __init__(self, name: str):
    super().__init__(name)
    self._libs: list[ctypes.CDLL] = []

  def render(self, ast: UOp) -> tuple[str, Program]:
    """The C source of an AST and the lowered program it renders."""
    options = compile_options()
    with hooks.capture_point("kernel", ast, self.name, options) as cap:
      prg = lower(ast)
      wide = lower(ast, WIDE_VECTOR) if WIDE_VECTOR and any(i.dtype.count > 1 for i in prg.instrs) else None
      src = render_c(prg, wide)
      cap.set_output((src, prg.name, options))
    return src, prg

  def compile_options(self) -> dict: return compile_options()

  def compile(self, ast: UOp, name: str) -> Callable:
    result = self.compile_many([ast])[0]
    if isinstance(result, Exception): raise result
    return result

  def compile_many(self, asts: list[UOp]) -> list[Callable | Exception]:
    """Kernels rendered here, in order, then built in parallel (one compiler process per core); a kernel that fails
    is its exception in the result, the others still build."""
    rendered: list[tuple[str, Program] | Exception] = []
    for ast in asts:
      try: rendered.append(self.render(ast))
      except Exception as e: rendered.append(e)
    keys = [None if isinstance(r, Exception) else _cache_key(r[0]) for r in rendered]
    unbuilt = [i for i, key in enumerate(keys) if key is not None and not cache_path("cpu", key).exists()]
    loaded: dict[int, Callable] = {}
    for i in unbuilt:   # kernels built earlier inside a translation unit of another schedule
      if (found := _unit_of(keys[i])) is not None:   # type: ignore[arg-type]
        loaded[i] = self._load(found[0], rendered[i][1], found[1])   # type: ignore[index]
        BUILDS.record(built=False)
    missing = [i for i in unbuilt if i not in loaded]
    if len(missing) >= UNIT_MIN_KERNELS:
      loaded.update(self._build_units([(i, rendered[i], keys[i]) for i in missing]))   # type: ignore[misc]
    paths = build_all("cpu", [None if i in loaded else key for i, key in enumerate(keys)], _compile_c)
    out: list[Callable | Exception] = []
    for i, (r, path) in enumerate(zip(rendered, paths)):
      if i in loaded: out.append(loaded[i])
      elif isinstance(r, Exception): out.append(r)
      elif isinstance(path, Exception): out.append(path)
      else: out.append(self._load(path, r[1]))
    return out

  def _build_units(self, kernels: list[tuple[int, tuple[str, Program], str]]) -> dict[int, Callable]:
    """New kernels of one schedule build as translation units (one, or one per core when there are many) instead of
    one compiler process each: the per-process cost (start, link) is most of a small kernel's build. Each
    function gets a unique name in its unit; a unit is cached by its whole source, so the same schedule built again
    (another run, a replay) finds it. Kernels whose source does not have the usual shape build alone."""
    fits = [(i, src, prg, key) for i, (src, prg), key in kernels if src.startswith(_PRELUDE)
            and src.count(f"void {prg.name}(") == 1]
    # the compiler's start and the link cost ~35 ms a process, a small kernel's own code ~5 ms: a few kernels build as
    # one unit (less machine time, and a capture often builds on every core at once), many as one unit per core
    count = max(1, min(os.cpu_count() or 1, len(fits) // KERNELS_PER_UNIT))
    per_unit = -(-len(fits) // count)
    units = [fits[k:k + per_unit] for k in range(0, len(fits), per_unit)] if fits else []
    sources, symbols = [], []
    for unit in units:
      parts, names = [_PRELUDE], []
      for i, src, prg, key in unit:
        symbol = f"{prg.name}__k{i}"   # kernel names never hold "__": no clash with another kernel's name
        # a kernel built for two instruction sets has helpers named `<kernel>__<set>`: they take the symbol too
        own = src[len(_PRELUDE):].replace(f" {prg.name}__", f" {symbol}__")
        parts.append(own.replace(f"void {prg.name}(", f"void {symbol}(", 1))
        names.append((i, prg, symbol, key))
      sources.append(_cache_key("\n".join(parts)))
      symbols.append(names)
    loaded: dict[int, Callable] = {}
    for path, names in zip(build_all("cpu-units", sources, _compile_c, kernels=[len(u) for u in units]), symbols):
      if isinstance(path, Exception) or path is None:
        continue   # those kernels build alone next, and fail alone if they must
      for i, prg, symbol, key in names:
        loaded[i] = self._load(path, prg, symbol)
        _remember_unit(key, path, symbol)
    return loaded

  def _load(self, lib_path, prg: Program, symbol: Optional[str] = None) -> Callable:
    name = prg.name
    lib = ctypes.CDLL(str(lib_path))
    self._libs.append(lib)
    fxn = getattr(lib, symbol or name)
    fxn.restype = None
    var_names = [v[0] for v in prg.variables]

    def run(bufs: list[Buffer], var_vals: dict[UOp, int]) -> None:
      by_name = {k.arg[0]: v for k, v in var_vals.items()}
      missing = [n for n in var_names if n not in by_name]
      if missing: raise DeviceError(f"kernel {name} needs values for variables {missing}")
      args = [ctypes.c_void_p(b.mem.ctypes.data) for b in bufs] + [ctypes.c_int(by_name[n]) for n in var_names]
      fxn(*args)
    return run


def _cache_key(src: str) -> str:
  """The source with the flags and the compiler appended: a kernel built by another compiler or flags is not reused."""
  return src + "\n// " + " ".join(CFLAGS + LIBS) + "\n// " + compiler_identity()


def _unit_index(key: str) -> pathlib.Path: return cache_path("cpu-index", key).with_suffix(".txt")


def _remember_unit(key: str, unit: pathlib.Path, symbol: str) -> None:
  """Note that the kernel of `key` is `symbol` in the translation unit `unit`, for processes that need it alone (a
  replay worker runs one capture's schedule at a time)."""
  index = _unit_index(key)
  index.parent.mkdir(parents=True, exist_ok=True)
  tmp = index.with_suffix(f".{os.getpid()}.tmp")
  tmp.write_text(f"{unit}\n{symbol}\n")
  os.replace(tmp, index)


def _unit_of(key: str) -> Optional[tuple[pathlib.Path, str]]:
  """(unit, symbol) of a kernel built inside a translation unit, if its unit is still in the cache."""
  try: unit, symbol = _unit_index(key).read_text().split("\n")[:2]
  except (OSError, ValueError): return None
  path = pathlib.Path(unit)
  return (path, symbol) if path.exists() and path.parent.parent == cache_dir() and symbol.isidentifier() else None


def _compile_c(src: str, out_path: str) -> None:
  cc = find_c_compiler()
  if cc is None: raise DeviceError("no C compiler found; set CC or use DEVICE=PYTHON")
  proc = subprocess.run([cc, *CFLAGS, "-x", "c", "-", "-o", out_path, *LIBS], input=src.encode(), capture_output=True)
  if proc.returncode != 0:
    raise DeviceError(f"C compiler failed ({cc}):\n{proc.stderr.decode(errors='replace')[-2000:]}")


# ***** rendering C *****

_ctype = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
          dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
          dtypes.int64: "long long",
          dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.float32: "float",
          dtypes.float64: "double", dtypes.bfloat16: "float"}
# bfloat16 is stored as its 16 bits and computed in float, each result rounded back to bfloat16
BF16 = dtypes.bfloat16


def _storage_ctype(dtype: DType) -> str: return "unsigned short" if dtype == BF16 else _ctype[dtype]

# No #include: parsing <math.h> and <string.h> was half of a small kernel's build (about 20 of 40 ms). The kernels
# need only these names; the math functions are libm's, declared as the C standard declares them.
_PRELUDE = """#define bool _Bool
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()
#define memcpy __builtin_memcpy
float exp2f(float); float log2f(float); float sinf(float); float sqrtf(float);
double exp2(double); double log2(double); double sin(double); double sqrt(double);
static inline float bf16_load(unsigned short b) {
  unsigned int u = (unsigned int)b << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline unsigned short bf16_bits(float f) {
  unsigned int u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float bf16_round(float f) { return bf16_load(bf16_bits(f)); }
static inline unsigned long long threefry2x32(unsigned long long x, unsigned long long key) {
  unsigned int x0 = (unsigned int)(x & 0xffffffffu), x1 = (unsigned int)(x >> 32);
  unsigned int k0 = (unsigned int)(key & 0xffffffffu), k1 = (unsigned int)(key >> 32);
  unsigned int ks[3] = {k1, k0 ^ k1 ^ 0x1BD11BDAu, k0};
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  unsigned int a = x0 + ks[2], b = x1 + ks[0];
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 4; j++) { int r = rot[i % 2][j]; a = a + b; b = a ^ ((b << r) | (b >> (32 - r))); }
    a = a + ks[i % 3]; b = b + ks[(i + 1) % 3] + (unsigned int)(i + 1);
  }
  return ((unsigned long long)b << 32) | (unsigned long long)a;
}
"""


class UnsafeSourceError(DeviceError):
  """An AST carries a name or value that would not be plain C (a crafted capture, or a bug upstream)."""


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


def c_identifier(name, what: str) -> str:
  """`name` if it is a plain C identifier; anything else could inject code into the source, so it is refused."""
  if not isinstance(name, str) or not _C_IDENTIFIER.match(name):
    raise UnsafeSourceError(f"{what} {name!r} is not a C identifier; refusing to render it")
  return name


def _c_index(value, what: str) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise UnsafeSourceError(f"{what} {value!r} is not an index")
  return value


def render_const(val, dtype: DType) -> str:
  if not isinstance(val, (bool, int, float)): raise UnsafeSourceError(f"constant {val!r} of {dtype} is not a number")
  if dtypes.is_float(dtype):
    if dtype == BF16: val = truncate_const(val, BF16)   # a constant is a bfloat16 value too
    if math.isnan(val): lit = "NAN"
    elif math.isinf(val): lit = "INFINITY" if val > 0 else "(-INFINITY)"
    else: lit = repr(float(val))
    if dtype == dtypes.float64: return lit
    if dtype in (dtypes.float32, BF16):
      return f"{lit}f" if lit not in ("NAN", "INFINITY", "(-INFINITY)") else f"((float){lit})"
    return f"((_Float16){lit})"
  if dtype == dtypes.bool: return "1" if val else "0"
  if dtypes.is_unsigned(dtype): return f"(({_ctype[dtype]}){int(val)}ull)"
  if dtype == dtypes.int64:
    return f"((long long){int(val)}ll)" if val != dtypes.min(dtype) else "(-9223372036854775807ll-1)"
  return f"(({_ctype[dtype]}){int(val)})" if val != -2**31 else "((int)(-2147483647-1))"


_math = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt"}


def render_c(prg: Program, wide: Optional[Program] = None) -> str:
  """The C source of a program: one function named after the kernel. With `wide` (the same kernel lowered with
  vectors of 8 float32), that function calls the wide version, built for AVX2, where the CPU has AVX2, and `prg`
  elsewhere: every lane does the same IEEE operations in the same order in both (no contraction), so the results are
  the same bits on every host; only the speed differs."""
  c_identifier(prg.name, "kernel name")
  params = [f"{_storage_ctype(dt)}* restrict data{_c_index(idx, 'buffer index')}"
            for idx, dt, _ in prg.globals] + \
           [f"int {c_identifier(v[0], 'variable name')}" for v in prg.variables]
  unoptimized = '__attribute__((optimize("O0"))) ' if prg.steps < SMALL_KERNEL_STEPS else ""
  vectors: dict[DType, str] = {}
  body = _render_body(prg, vectors)
  if wide is None:
    return f"{_PRELUDE}{_typedefs(vectors)}\n{unoptimized}void {prg.name}({', '.join(params)}) {{\n{body}\n}}\n"
  wide_body = _render_body(wide, vectors)
  declared, args = ", ".join(params), ", ".join(p.rsplit(" ", 1)[1] for p in params)
  return (f"{_PRELUDE}{_typedefs(vectors)}\n"
          f"{unoptimized}__attribute__((target(\"avx2\"))) static void {prg.name}__avx2({declared}) {{\n"
          f"{wide_body}\n}}\n"
          f"{unoptimized}static void {prg.name}__base({declared}) {{\n{body}\n}}\n"
          f"void {prg.name}({declared}) {{\n  __builtin_cpu_init();\n"
          f"  if (__builtin_cpu_supports(\"avx2\")) {prg.name}__avx2({args});\n  else {prg.name}__base({args});\n}}\n")


def _typedefs(vectors: dict[DType, str]) -> str:
  return "".join(f"typedef int {name} __attribute__((vector_size({4 * dt.count})));\n" if _is_mask(dt) else
                 f"typedef {_ctype[_scalar_of(dt)]} {name} __attribute__((vector_size({dt.itemsize})));\n"
                 for dt, name in vectors.items())


def _is_mask(dtype: DType) -> bool: return dtype.count > 1 and dtype.priority == dtypes.bool.priority


def _render_body(prg: Program, vectors: dict[DType, str]) -> str:
  """The statements of a program's function; the vector types it uses are added to `vectors`."""
  names: dict[int, str] = {}
  lines: list[str] = []
  indent = 1

  def line(s: str): lines.append("  " * indent + s)
  for i, x in enumerate(prg.instrs):
    op, ctype = x.op, _ctype.get(x.dtype, "void")
    if x.dtype.count > 1: ctype = vectors.setdefault(x.dtype, _vector_typedef(x.dtype))
    s = [names[j] for j in x.src]
    if op is Ops.CONST: names[i] = render_const(x.arg, x.dtype)
    elif op is Ops.DEFINE_GLOBAL: names[i] = f"data{_c_index(x.arg, 'buffer index')}"
    elif op is Ops.DEFINE_VAR: names[i] = c_identifier(x.arg[0], "variable name")
    elif op is Ops.RANGE:
      names[i] = f"ridx{i}"
      line(f"for (int ridx{i} = {s[0]}; ridx{i} < {s[1]}; ridx{i}++) {{")
      indent += 1
    elif op is Ops.ENDRANGE:
      indent -= 1
      line("}")
    elif op is Ops.DEFINE_ACC:
      names[i] = f"acc{i}"
      line(f"{ctype} acc{i} = {s[0]};")
    elif op is Ops.ASSIGN: line(f"{s[0]} = {s[1]};")
    elif op is Ops.LOAD and x.dtype.count > 1:
      names[i] = f"val{i}"
      read = f"memcpy(&val{i}, {s[0]} + {s[1]}, sizeof(val{i}));"
      line(f"{ctype} val{i}; {read}" if s[2] == "1" else f"{ctype} val{i} = {{0}}; if ({s[2]}) {read}")
    elif op is Ops.VECTORIZE:
      names[i] = f"alu{i}"
      line(f"{ctype} alu{i} = {{{', '.join(s)}}};")
    elif op is Ops.GEP:
      names[i] = f"alu{i}"
      line(f"{ctype} alu{i} = {s[0]}[{_c_index(x.arg, 'vector lane')}];")
    elif op is Ops.LOAD:
      names[i] = f"val{i}"
      read = f"bf16_load({s[0]}[{s[1]}])" if x.dtype == BF16 else f"{s[0]}[{s[1]}]"
      line(f"{ctype} val{i} = {read};" if s[2] == "1" else f"{ctype} val{i} = ({s[2]}) ? {read} : ({ctype})0;")
    elif op is Ops.STORE:
      vector = prg.instrs[x.src[3]].dtype.count > 1
      stored = f"bf16_bits({s[3]})" if prg.instrs[x.src[3]].dtype == BF16 else s[3]
      write = f"memcpy({s[0]} + {s[1]}, &{s[3]}, sizeof({s[3]}));" if vector else f"{s[0]}[{s[1]}] = {stored};"
      line(write if s[2] == "1" else f"if ({s[2]}) {write}")
    elif op is Ops.BITCAST:
      names[i] = f"val{i}"
      src_dtype = prg.instrs[x.src[0]].dtype
      value = f"bf16_bits({s[0]})" if src_dtype == BF16 else s[0]   # a bfloat16 value's bits are its stored form
      line(f"{_storage_ctype(src_dtype)} cast_src{i} = {value}; {_storage_ctype(x.dtype)} bits{i}; "
           f"memcpy(&bits{i}, &cast_src{i}, sizeof(bits{i})); {ctype} val{i} = "
           + (f"bf16_load(bits{i});" if x.dtype == BF16 else f"bits{i};"))
    else:
      names[i] = f"alu{i}"
      value = _render_alu(op, x.dtype, s)
      line(f"{ctype} alu{i} = {f'bf16_round({value})' if x.dtype == BF16 else value};")
  return "\n".join(lines)


@functools.cache
def _scalar_of(vector: DType) -> DType:
  return next(dt for dt in _ctype if dt.priority == vector.priority and dt.itemsize * vector.count == vector.itemsize)


def _vector_typedef(dtype: DType) -> str:
  """The name of the C vector type (gcc's and clang's vector extension) of a vector dtype. A vector of bools is one of
  ints, as a comparison of float vectors gives (-1 where true, 0 where false)."""
  return f"mask{dtype.count}" if _is_mask(dtype) else c_identifier(dtype.name, "vector type")


_TRAPPING_DIVISION = (dtypes.int32, dtypes.int64)   # C does narrower signed types in int: their lowest value / -1 fits


def _render_alu(op: Ops, dtype: DType, s: list[str]) -> str:
  ct = _ctype[dtype] if dtype.count == 1 else _vector_typedef(dtype)
  if op is Ops.CAST: return f"({ct})({s[0]})"
  if op in _math:
    fn = _math[op] + ("" if dtype == dtypes.float64 else "f")
    return f"({ct}){fn}((float)({s[0]}))" if dtype == dtypes.float16 else f"{fn}({s[0]})"
  if op is Ops.RECIP: return f"(({ct})1/({s[0]}))"
  if op is Ops.NEG: return f"(-{s[0]})"
  if op in (Ops.MAX, Ops.WHERE) and dtype.count > 1:   # choices lane by lane, by the scalar rule (the same bits)
    lanes = (_render_alu(op, _scalar_of(dtype), [f"{x}[{k}]" for x in s]) for k in range(dtype.count))
    return f"({ct}){{{', '.join(lanes)}}}"
  if op is Ops.MAX: return f"(({s[0]}>{s[1]})?{s[0]}:{s[1]})"
  if op is Ops.WHERE: return f"(({s[0]})?{s[1]}:{s[2]})"
  if op is Ops.THREEFRY: return f"threefry2x32({s[0]}, {s[1]})"
  if op in (Ops.IDIV, Ops.MOD) and dtype in _TRAPPING_DIVISION:
    # the lowest value over -1 overflows, and the processor traps (the process dies of SIGFPE): the quotient wraps
    # to the dividend negated with unsigned arithmetic, the remainder is 0, as on the other devices
    negated = f"({ct})(0ull-(unsigned long long)({s[0]}))" if op is Ops.IDIV else f"({ct})0"
    return f"(({s[1]})==0?({ct})0:({s[1]})==-1?{negated}:({s[0]}{'/' if op is Ops.IDIV else '%'}{s[1]}))"
  if op is Ops.IDIV: return f"(({s[1]})==0?({ct})0:({s[0]}/{s[1]}))"
  if op is Ops.MOD: return f"(({s[1]})==0?({ct})0:({s[0]}%{s[1]}))"
  infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.XOR: "^", Ops.OR: "|",
           Ops.AND: "&",
           Ops.SHL: "<<", Ops.SHR: ">>", Ops.FDIV: "/"}
  if op in infix:
    expr = f"({s[0]}{infix[op]}{s[1]})"
    # arithmetic on narrow types happens in int in C: bring the result back to the op's type
    return f"({ct}){expr}" if op not in (Ops.CMPLT, Ops.CMPNE) else expr
  raise NotImplementedError(f"C renderer has no rule for {op}")
