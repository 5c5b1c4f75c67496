"""The kernel scheduler: turns the tensor graph of a `realize()` into an ordered list of kernels.

Pipeline (the reference design's): simplify the tensor graph, decide which UOps get their own buffer
(`group_realizes`), cut the graph into KERNEL ops, push views to the edges of each kernel
(`view_left`/`view_right`), add loads and stores (`fix_kernel_ast`), order assigns, toposort.
`create_schedule_with_vars` is capture point **schedule**.
"""
from __future__ import annotations
import sys
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any
from scheduler.helpers import all_int, all_same, prod, dedup, unwrap, flatten, pluralize, \
  FUSE_CONV_BW, FUSE_ARANGE, DEBUG, DONT_REALIZE_EXPAND, DONT_GROUP_REDUCES, SPLIT_REDUCEOP, REDUCEOP_SPLIT_THRESHOLD, \
  REDUCEOP_SPLIT_SIZE, CAST_AFTER_EXPAND
from scheduler.ops import UOp, Ops, GroupOp, UPat, PatternMatcher, graph_rewrite, graph_rewrite_map, track_rewrites, buffers, \
  can_pad, identity_element, resolve, view_left, merge_views, all_metadata
from scheduler.symbolic import symbolic_simple
from scheduler.shape.shapetracker import ShapeTracker
from scheduler.shape.view import View, strides_for_shape
from scheduler.spec import type_verify, kernel_spec, ast_spec
from scheduler import hooks
from scheduler.codegen.naming import kernel_kind

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))


class ScheduleError(RuntimeError):
  """The tensor graph cannot be scheduled (an unsupported assign, a cycle)."""


# ***** tensor graph simplifier *****

def simplify_stride0_reduce(reduce: UOp, x: UOp):
  """A reduce over axes the input only broadcasts along is a scale (ADD), a power (MUL) or nothing (MAX)."""
  if any(v.mask is not None for v in unwrap(x.st).views): return None
  if not all(unwrap(x.st).views[-1].strides[axis] == 0 for axis in reduce.arg[1]) or not all_int(x.shape): return None
  prshape = prod(x.shape[i] for i in reduce.arg[1])
  ret = x.shrink(tuple((0, s) if i not in reduce.arg[1] else (0, 1) for i, s in enumerate(x.shape)))
  if reduce.arg[0] is Ops.ADD: return ret * prshape
  if reduce.arg[0] is Ops.MUL: return _const_pow(ret, prshape)
  return ret


def _const_pow(x: UOp, n: int) -> UOp:
  out = x
  for _ in range(n - 1): out = out * x
  return out


def split_reduceop(reduce: UOp, x: UOp):
  """A big reduce into few outputs becomes two kernels: a partial reduce into a split axis, then the rest."""
  if not SPLIT_REDUCEOP or not all_int(x.shape) or (prod(x.shape) // prod(reduce.shape)) < REDUCEOP_SPLIT_THRESHOLD.value: return None
  real_strides = unwrap(x.st).real_strides(ignore_valid=True)
  candidates = [(i, d) for i in reduce.arg[1] for d in range(min(256, 2 ** REDUCEOP_SPLIT_SIZE.value // prod(reduce.shape)), 8 - 1, -1)
                if x.shape[i] % d == 0 and real_strides[i] != 0]
  if not candidates: return None
  dim_to_split, divisor = candidates[0]
  splitted_shape = x.shape[:dim_to_split] + (divisor,) + (x.shape[dim_to_split] // divisor,) + x.shape[dim_to_split + 1:]
  splitted = x.reshape(splitted_shape).permute(tuple([d for d in range(len(splitted_shape)) if d != dim_to_split] + [dim_to_split]))
  return splitted.r(*reduce.arg).r(reduce.arg[0], (len(reduce.shape),)).reshape(reduce.shape)


def _disk_buffer_view(x: UOp, t: UOp):
  if not x.device.startswith("DISK"): return None
  return UOp(Ops.BUFFER_VIEW, t.dtype, (x.base,), (t.size, x.st.views[0].offset)).reshape(t.shape)


sym = symbolic_simple + PatternMatcher([
  # a UOp with no elements is the constant zero
  (UPat(GroupOp.All - {Ops.SINK}, name="root"), lambda root: root.const_like(0) if root.base.st is not None and root.size == 0
   and not (root.base.op is Ops.CONST and root.base.arg == 0) else None),
  # DETACH and CONTIGUOUS_BACKWARD only matter to autograd
  (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="x"), lambda x: x.src[0]),
  # a reduce of nothing is the identity
  (UPat(Ops.REDUCE_AXIS, name="reduce", src=(UPat.var("x"),)),
   lambda reduce, x: reduce.const_like(identity_element(reduce.arg[0], reduce.dtype)) if x.size == 0 and reduce.size != 0 else None),
  (UPat(Ops.REDUCE_AXIS, name="reduce", src=(UPat.var("x"),)), simplify_stride0_reduce),
  (UPat(Ops.REDUCE_AXIS, name="reduce", src=(UPat.var("x"),)), split_reduceop),
  # copying a constant makes the constant on the other device
  (UPat(Ops.COPY, name="root", src=(UPat(), UPat.cvar("x"),)), lambda root, x: root.const_like(x.arg)),
  # a copy to the device it is on is nothing, unless it is a clone
  (UPat(Ops.COPY, src=(UPat(), UPat.var("copyin")), name="copy"),
   lambda copyin, copy: copyin if copyin.device == copy.device and copy.arg is not True else None),
  # contiguous of a contiguous view of a whole buffer is the view
  (UPat(Ops.CONTIGUOUS, name="root", src=(UPat(Ops.VIEW, name="view", src=(UPat(Ops.BUFFER, name="buf"),)),)),
   lambda root, view, buf: view if view.st.contiguous and view.size == buf.size else None),
  # contiguous of something already contiguous
  (UPat(Ops.CONTIGUOUS, name="root", src=(UPat((Ops.CONTIGUOUS, Ops.BUFFER, Ops.COPY)),)), lambda root: root.src[0]),
  # on DISK, bitcasts and contiguous are views of the file
  (UPat((Ops.BITCAST, Ops.CONTIGUOUS), src=(UPat.var("x"),), name="t"), _disk_buffer_view),
  # constants, binds and views do not need realizing
  (UPat(Ops.SINK, name="x"), lambda x: x.replace(src=new_src)
   if (new_src := tuple(dedup(s.base for s in x.src if s.op not in {Ops.CONST, Ops.BIND}))) != x.src else None),
])


def found_contiguous(ctx: dict[UOp, UOp], contig: UOp, src: UOp):
  if (sti := unwrap(src.st).invert(src.base.shape)) is not None: ctx[src.base] = contig.view(sti)


# where a permuted view of a UOp is made contiguous anyway, other users read that copy instead
replace_contiguous = PatternMatcher([
  (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.VIEW, name="src"),), name="contig"), found_contiguous),
  (UPat(GroupOp.ALU, name="alu"), lambda ctx, alu: alu.replace(src=new_src) if (new_src := tuple(ctx.get(s, s) for s in alu.src)) != alu.src else None),
])


def _cast_before_view(cast: UOp, vm: UOp):
  if (not CAST_AFTER_EXPAND or vm.base.op is not Ops.BUFFER) and cast.dtype.itemsize <= vm.dtype.itemsize \
     and resolve(prod(vm.shape) > vm.st.real_size()):
    return vm.base.cast(cast.dtype).view(vm.st)
  return None


reorder_view = PatternMatcher([
  # a narrowing cast goes before an expand
  (UPat(Ops.CAST, name="cast", src=(UPat(Ops.VIEW, name="vm"),)), _cast_before_view),
  # copy only what a shrink keeps; otherwise copy the base and view it after
  (UPat(Ops.COPY, src=(UPat(), UPat(Ops.VIEW, name="v")), name="copy"), lambda copy, v: v.contiguous().copy_to_device(copy.device)
   if prod(v.shape) < prod(v.base.shape) else v.base.copy_to_device(copy.device, clone=copy.arg).view(v.st)),
  # unary ops go before expands
  (UPat(GroupOp.Unary, src=(UPat(Ops.VIEW, src=(UPat.var("inp"),), name="v"),), name="alu"),
   lambda inp, v, alu: inp.alu(alu.op).view(v.st) if resolve(prod(alu.shape) > v.st.real_size()) else None),
  (UPat(Ops.VIEW, src=(UPat(Ops.CAST, src=(UPat.var("x"),)),), name="v"), lambda x, v: x.view(x.st + v.st).cast(v.dtype)
   if CAST_AFTER_EXPAND and x.base.op is Ops.BUFFER and resolve(prod(v.shape) > prod(x.shape)) else None),
])


# ***** which UOps get a buffer *****

DONT_PUSH_VIEWS = {Ops.BUFFER, Ops.CONST, Ops.BIND, Ops.DEVICE, Ops.ASSIGN, Ops.SINK, Ops.CONTIGUOUS, Ops.COPY}


@dataclass(frozen=True)
class GrouperContext:
  assigns: dict[UOp, UOp]
  realizes: dict[UOp, None]
  children: defaultdict[UOp, dict[UOp, None]]


def realize(ctx: GrouperContext, tr: UOp) -> None: ctx.realizes[tr] = None


def realize_before_view(ctx: GrouperContext, view: UOp, tr: UOp) -> None:
  st = unwrap(view.st)
  # a masked view of an op that does not map zero to zero needs the op's real values
  if any(v.mask is not None for v in st.views) and not can_pad(tr, ctx.realizes, cache=dict()): return realize(ctx, tr)
  # a simple pad that does not grow the op folds into the kernel
  if len(st.views) == 1 and (m := st.views[-1].mask) is not None and all_int(tr.shape) and resolve(prod(tr.shape) >= prod([y - x for x, y in m])): return
  # an expand would recompute the op for every copy
  if resolve(prod(tr.shape) < prod(st.shape)) and not DONT_REALIZE_EXPAND: return realize(ctx, tr)


do_realize = PatternMatcher([
  (UPat(Ops.SINK, name="s"), lambda ctx, s: ctx.realizes.update((x, None) for x in s.src if x.op not in DONT_PUSH_VIEWS)),
  (UPat({Ops.ASSIGN, Ops.CONTIGUOUS, *GroupOp.Meta}, name="tr"), realize),
  (UPat(Ops.VIEW, name="view", src=(UPat(GroupOp.All - DONT_PUSH_VIEWS, name="tr"),)), realize_before_view),
  (UPat(Ops.COPY, src=(UPat(), UPat(GroupOp.All - DONT_PUSH_VIEWS, name="tr"))), realize),
])


def append_uop(ctx: GrouperContext, u: UOp) -> None:
  if u.op is Ops.ASSIGN: ctx.assigns[u.buf_uop] = u
  for s in u.src: ctx.children[s.base][u] = None


create_ctx = PatternMatcher([(UPat(GroupOp.All - {Ops.SINK, Ops.VIEW}, name="u"), append_uop)])


def recursive_group(tr: UOp, st: ShapeTracker, r: UOp, children, realizes, reduce_for_op, group, cache) -> None:
  """Walk down from a reduce through its users; collect the realized users it can fuse with, or mark the reduce itself."""
  if (tr, st) in cache: return
  cache.setdefault((tr, st))
  rsize = unwrap(r.st).size
  if tr in realizes and tr is not r:
    # fuse only through contiguous views of the same size, and one reduce per kernel
    if not st.contiguous or st.size != rsize or tr in reduce_for_op: group.setdefault(r)
    return group.setdefault(tr)
  for tr_next in children[tr]:
    if tr_next.op is Ops.REDUCE_AXIS: return group.setdefault(r)
    if len(st_childs := dedup(unwrap(x.st) for x in tr_next.src if x.base == tr)) > 1: return group.setdefault(r)
    recursive_group(tr_next, st + st_childs[0], r, children, realizes, reduce_for_op, group, cache)


def group_realizes(sink: UOp) -> dict[UOp, None]:
  sink = graph_rewrite(sink, find_realizes, ctx := GrouperContext({}, {}, defaultdict(dict)))
  if DONT_GROUP_REDUCES: return ctx.realizes
  reduce_for_op: dict[UOp, UOp] = {}
  double_reduces: list[UOp] = []
  for r in sink.toposort:
    if r.op is not Ops.REDUCE_AXIS: continue
    if FUSE_CONV_BW and r.src[0].base.op is Ops.REDUCE_AXIS and r.src[0] is not r.src[0].base: double_reduces.append(r)
    if r in ctx.realizes: continue
    group: dict[UOp, None] = {}
    recursive_group(r, unwrap(r.st), r, ctx.children, ctx.realizes, reduce_for_op, group, cache={})
    can_chase = all(tr not in reduce_for_op for tr in group)
    forced_realize = r in group
    # a kernel has one output
    if not forced_realize and len(group) > 1: forced_realize = True
    # an assign fuses only if no other assigned buffer is read in the kernel
    if not forced_realize and any(x.op is Ops.ASSIGN for x in group):
      parents = deque((r, *group))
      while parents and not forced_realize:
        p = parents.pop().base
        if (assign := ctx.assigns.get(p)) is not None and assign not in group: forced_realize, can_chase = True, False
        if p in ctx.realizes: continue
        parents.extend(p.src)
    if forced_realize or not group:
      tr = r
      if can_chase:
        # follow a chain of single contiguous users down to where the value is stored
        st = unwrap(tr.st)
        while len(ctx.children[tr]) == 1:
          tr_next = next(iter(ctx.children[tr]))
          st_childs = dedup(unwrap(s.st) for s in tr_next.src if s.base is tr)
          if len(st_childs) > 1: break
          if st.size != st_childs[0].size: break
          st = st + st_childs[0]
          if not st.contiguous or tr_next.op is Ops.REDUCE_AXIS: break
          tr = tr_next
        # store before a widening cast
        if tr.op is Ops.CAST and tr.dtype.itemsize > tr.src[0].dtype.itemsize: tr = tr.src[0].base
      group = {tr: None}
      ctx.realizes[tr] = None
    reduce_for_op.update((tr, r) for tr in group)
    if FUSE_ARANGE and r.arg[0] is Ops.ADD and r.src[0].base.op is Ops.CONST:
      if len(flatten(ctx.children[tr] for tr in group)) != 0:
        for tr in group: del ctx.realizes[tr]
  for reduceop in double_reduces:
    top_reduce = reduceop.src[0].base
    if len(ctx.children[top_reduce]) == 1: del ctx.realizes[top_reduce]
  return ctx.realizes


# ***** kernels *****

@dataclass(frozen=True)
class Kernel:
  ast: UOp
  metadata: tuple = ()
  def __repr__(self): return f"<Kernel {len(self.ast.toposort)} {[s.op for s in self.ast.src] if self.ast.op is Ops.SINK else self.ast.op}>"
  def stable_repr(self) -> str: return f"Kernel({self.ast.key.hex()})"


@dataclass(frozen=True)
class KernelContext:
  realizes: dict[UOp, None]
  ops_metadata: dict[UOp, Any]


def create_kernel(ctx: KernelContext, x: UOp, b: UOp):
  kernel = UOp(Ops.KERNEL, src=(b,) + x.src, arg=Kernel(x.sink(), (m,) if (m := ctx.ops_metadata.get(x)) else ()))
  buffer = b.base if b.size == b.base.size else UOp(Ops.BUFFER_VIEW, b.dtype, (b.base,), (b.size, b.arg.views[0].offset))
  return UOp(Ops.ASSIGN, x.dtype, (buffer, kernel)).reshape(x.shape)


DONT_PLACE_IN_KERNEL = {Ops.KERNEL, Ops.ASSIGN, Ops.BUFFER}


def append_to_kernel(ctx: KernelContext, x: UOp):
  new_srcs: list[UOp] = []
  metadata = dict.fromkeys(x.arg.metadata)
  for s in x.src:
    if s.op in DONT_PLACE_IN_KERNEL or s in ctx.realizes: new_srcs.append(s)
    else:
      new_srcs.extend(s.src)
      if (m := ctx.ops_metadata.get(s)) is not None: metadata[m] = None
  if (new_src := tuple(dedup(new_srcs))) != x.src: return x.replace(src=new_src, arg=Kernel(x.arg.ast, tuple(metadata)))
  return None


def _new_buffer(device: str, x: UOp) -> UOp:
  """A buffer for x; a symbolic size allocates for the largest value the variables allow."""
  size = x.size if isinstance(x.size, int) else int(x.size.vmax)
  return UOp.new_buffer(device, size, x.dtype)


create_kernels = PatternMatcher([
  (UPat.assign(UPat.var("b"), UPat(GroupOp.All - {Ops.KERNEL}), name="x"), create_kernel),
  (UPat(Ops.CONTIGUOUS, name="x"), lambda ctx, x: create_kernel(ctx, x, _new_buffer(x.device, x))),
  (UPat(Ops.COPY, src=(UPat(Ops.DEVICE, name="d"), UPat()), name="x"), lambda ctx, d, x: create_kernel(ctx, x, _new_buffer(d.arg, x))),
  (UPat(GroupOp.All - DONT_PLACE_IN_KERNEL, name="x"),
   lambda ctx, x: create_kernel(ctx, x, _new_buffer(x.device, x)) if x in ctx.realizes else None),
  (UPat(Ops.KERNEL, name="x"), append_to_kernel),
  (UPat(Ops.SINK, name="x"), lambda x: x.replace(src=tuple(s.base for s in x.src)) if any(s.op is Ops.VIEW for s in x.src) else None),
])


# ***** the swizzler: views move to the loads and stores of each kernel *****

def apply_swizzle(u: UOp) -> UOp: return graph_rewrite(u, view_left)


def swizzle_reduceop(r: UOp, src: UOp, view: UOp):
  if (st := unwrap(view.st)).contiguous: return None
  input_st = ShapeTracker.from_shape(src.shape)
  tmp = input_st.permute(tuple(i for i in range(len(input_st.shape)) if i not in r.axis_arg) + r.axis_arg)
  prshape = prod(rshape := tmp.shape[-len(r.axis_arg):])
  strides = strides_for_shape(rshape)
  nv = [View.create(v.shape + rshape, tuple(x * prshape for x in v.strides) + strides,
                    v.offset * prshape, v.mask + tuple((0, s) for s in rshape) if v.mask is not None else None) for v in st.views]
  new_input_st = tmp + ShapeTracker(tuple(nv))
  new_axis = tuple(range(len(st.shape), len(st.shape) + len(r.axis_arg)))
  return UOp(Ops.REDUCE_AXIS, r.dtype, (apply_swizzle(src.view(src.arg + new_input_st if src.op is Ops.VIEW else new_input_st)),),
             (r.arg[0], new_axis)).view(ShapeTracker.from_shape(st.shape))


def reduceop_view_right(src: UOp, v: UOp, r: UOp):
  if not (unwrap(v.st).contiguous and v.size == src.size): raise ScheduleError(f"can't compute new axis for {src.shape} -> {r.shape}")
  return src.r(r.arg[0], tuple(i for i, (s, u) in enumerate(zip(src.shape, r.shape)) if s != u)).view(ShapeTracker.from_shape(r.shape))


def elementwise_view_right(root: UOp):
  if not (swizzles := [x for x in root.src if x.op is Ops.VIEW and x.base.op not in DONT_PUSH_VIEWS]): return None
  if not all_same([x.base.size for x in swizzles]): raise ScheduleError(f"swizzle inputs must have the same size {[x.shape for x in swizzles]}")
  new_st = ShapeTracker.from_shape(swizzles[0].base.shape)
  new_src = [x.base if x.base.shape == new_st.shape else apply_swizzle(x.view(x.arg + new_st) if x.op is Ops.VIEW else x.view(new_st))
             for x in root.src]
  return root.replace(src=tuple(new_src)).reshape(root.shape)


view_right = merge_views + PatternMatcher([
  (UPat(Ops.VIEW, src=(UPat(Ops.REDUCE_AXIS, src=(UPat.var("src"),), name="r"),), name="view"), swizzle_reduceop),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.VIEW, src=(UPat(GroupOp.All - DONT_PUSH_VIEWS, name="src"),), name="v"),), name="r"), reduceop_view_right),
  (UPat(GroupOp.All - DONT_PUSH_VIEWS, name="root"), elementwise_view_right),
  # two reduces of the same op in a row are one (the inverse of split_reduceop)
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="r1"),), name="r2"),
   lambda r1, r2: r1.replace(arg=(r1.arg[0], r2.arg[1] + r1.arg[1])) if r1.arg[0] == r2.arg[0] else None),
])


# ***** variables *****

def unbind_shapetracker(ctx: tuple, x: UOp):
  st = unwrap(x.st).simplify()
  if any(v.op is Ops.BIND for v in st.vars()):
    st, var_vals = st.unbind()
    ctx[0].update(var_vals)
  return x.replace(arg=st) if st != x.st else None


def unbind_variable(ctx: tuple, var: UOp, val: UOp):
  ctx[0][var.replace(src=())] = val.arg
  return var.replace(src=())


# ***** loads and stores *****

add_buffer_ops = PatternMatcher([
  (UPat(Ops.BUFFER, name="x"), lambda ctx, x: UOp.load(UOp(Ops.DEFINE_GLOBAL, x.dtype.ptr(x.size), (), ctx[1].index(x)), x.st.to_uop(), dtype=x.dtype)),
  (UPat(Ops.SINK, src=(UPat(GroupOp.Meta, name="x"),)), lambda x: x),
  # an assign may store through a non-contiguous view
  (UPat(Ops.SINK, src=(UPat(Ops.ASSIGN, name="x"),)),
   lambda x: UOp.store(UOp(Ops.DEFINE_GLOBAL, x.dtype.ptr(x.src[0].base.size), (), 0), x.src[0].st.to_uop(), x.src[1]).sink()),
  (UPat(Ops.SINK, src=(UPat(GroupOp.All - {Ops.STORE}, name="x"),)),
   lambda x: UOp.store(UOp(Ops.DEFINE_GLOBAL, x.dtype.ptr(x.size), (), 0), ShapeTracker.from_shape(x.shape).to_uop(), x).sink()),
  (UPat(Ops.VIEW, src=(UPat((Ops.CONST, Ops.DEFINE_VAR), name="x"),), name="view"), lambda x, view: x.valid(view.arg)),
  # the last view before a store merges into the store's view
  (UPat(Ops.STORE, src=(UPat.var("b"), UPat.var("st"), UPat(Ops.VIEW, src=(UPat(GroupOp.All - DONT_PUSH_VIEWS, name="x"),)))),
   lambda x, b, st: UOp.store(b, (st.arg + x.st).to_uop(), x)),
])


def check_load_st(glbl: UOp, view: UOp):
  if glbl.arg != 0 or (st := unwrap(view.st)).contiguous: return None
  if len(st.views) == 1 and st.shrink(tuple((0, 1) if stv == 0 else (0, s) for s, stv in zip(st.shape, st.views[0].strides))).contiguous: return None
  if len(st.views) == 1 and (mask := st.views[0].mask) is not None and ShapeTracker.from_shape(st.shape).shrink(mask) == st.shrink(mask): return None
  raise ScheduleError("self operand of augmented assign must be contiguous.\nhelp: consider using .contiguous():\n"
                      "   - a += a.T\n   + a += a.T.contiguous()")


fix_kernel_ops = PatternMatcher([
  (UPat(Ops.CONTIGUOUS, src=(UPat.var("x"),)), lambda x: x),
  (UPat(Ops.VIEW, src=(UPat(Ops.DEVICE),), name="view"), lambda view: view.replace(src=())),
  (UPat(Ops.VIEW, name="x"), unbind_shapetracker),
  (UPat(Ops.BIND, src=(UPat.var("var"), UPat.cvar("val"))), unbind_variable),
  (UPat(Ops.LOAD, src=(UPat.var("glbl"), UPat.var("view"))), check_load_st),
])


def fix_kernel_ast(k: UOp, var_vals: dict[UOp, int]) -> UOp:
  if k.op is not Ops.KERNEL: raise ScheduleError(f"kernel isn't kernel, it's {k.op}")
  parents_rep: dict[UOp, UOp] = {}
  for s in k.src:
    if s.op is Ops.ASSIGN:
      for out in s.src[1].arg.ast.src: parents_rep[out] = s.buf_uop.view(unwrap(out.st))
  ast = k.arg.ast.substitute(parents_rep)
  ast = graph_rewrite(graph_rewrite(ast, view_left), view_right)
  ast = graph_rewrite(ast, finish_kernel_ast, ctx=(var_vals, bufs := tuple(s.buf_uop for s in k.src)), bottom_up=True)
  if ast.op is Ops.SINK and not all_same(dev := [x.device for x in bufs]): raise ScheduleError(f"all buffers must be on the same device: {dev}")
  if ast.op is Ops.BUFFER_VIEW: buffers[bufs[0]] = (base := bufs[1].buffer).view(ast.size, ast.dtype, ast.arg[1] * base.dtype.itemsize)
  return k.replace(arg=Kernel(ast, k.arg.metadata))


# the combined matchers of each pass
simplify_tensor_graph = merge_views + sym + reorder_view + replace_contiguous
find_realizes = do_realize + create_ctx
merge_and_create_kernels = merge_views + create_kernels
finish_kernel_ast = merge_views + add_buffer_ops + fix_kernel_ops


# ***** schedule *****

@dataclass(frozen=True)
class ScheduleItem:
  ast: UOp
  bufs: tuple
  metadata: tuple = ()

  @property
  def kind(self) -> str: return kernel_kind(self.ast)


@track_rewrites(name_fxn=lambda r: f"Schedule {pluralize('Kernel', len(r[0]))}")
def create_schedule_with_vars(big_sink: UOp) -> tuple[list[ScheduleItem], dict[UOp, int], dict[UOp, UOp]]:
  with hooks.capture_point("schedule", big_sink) as cap:
    result = _create_schedule_with_vars(big_sink)
    cap.set_output(([si.ast for si in result[0]], result[1]))
  return result


def _create_schedule_with_vars(big_sink: UOp) -> tuple[list[ScheduleItem], dict[UOp, int], dict[UOp, UOp]]:
  tensor_map = graph_rewrite_map(big_sink, simplify_tensor_graph, ctx={})
  sink = tensor_map[big_sink]
  realize_map = group_realizes(sink)
  ops_metadata = {v: m for k, v in tensor_map.items() if k.base.op not in {Ops.CONST, Ops.DEVICE} and (m := all_metadata.get(k)) is not None}
  kernel_map = graph_rewrite_map(sink, merge_and_create_kernels, ctx=KernelContext(realize_map, ops_metadata), bottom_up=True)
  sched_sink = kernel_map[sink]
  type_verify(list(sched_sink.toposort), kernel_spec)

  # what each tensor becomes: its buffer (through a view), or a constant
  becomes_map: dict[UOp, UOp] = {}
  for k, v in tensor_map.items():
    if v.op is Ops.ASSIGN: becomes_map[k] = v.src[0]
    elif (a := kernel_map.get(v.base)) is not None and (a := a.base).op is Ops.ASSIGN:
      becomes_map[k] = a.src[0] if a.src[0].st == v.st else a.src[0].view(unwrap(v.st))
    else:
      if k is v: continue
      if v.base.op is Ops.BUFFER: becomes_map[k] = v
      if v.base.op is Ops.CONST and all_int(v.shape): becomes_map[k] = v

  # a kernel that reads a buffer (its old value) runs before the kernel that assigns to it. All assigns are
  # collected first: the reference only saw assigns earlier in the toposort and missed readers that come first.
  kernel_assign: dict[UOp, UOp] = {u.buf_uop: u for u in sched_sink.toposort if u.op is Ops.ASSIGN}
  readers: dict[UOp, list[UOp]] = {}
  for u in sched_sink.toposort:
    if u.op is not Ops.ASSIGN: continue
    for s in u.src[1].src:
      if s.op is not Ops.BUFFER or s is u.buf_uop or (a := kernel_assign.get(s)) is None: continue
      if any(x.op is Ops.ASSIGN and x.buf_uop is s for x in u.toposort):
        raise ScheduleError(f"cycle detected in graph, kernel for {u.buf_uop.arg} must either depend on ASSIGN or BUFFER")
      readers.setdefault(a, []).append(u)
  assign_rep = {a: a.replace(src=a.src + tuple(dedup(us))) for a, us in readers.items()}
  if assign_rep:
    sched_sink = sched_sink.substitute(assign_rep)
    type_verify(list(sched_sink.toposort), kernel_spec)

  # breadth-first toposort of the kernels
  children: dict[UOp, list[UOp]] = {}
  in_degree: dict[UOp, int] = {}
  for u in sched_sink.toposort:
    if u.op is not Ops.ASSIGN: continue
    in_degree[u] = 0
    # a kernel waits for the assigns it reads (kernel sources) and for the kernels that must read before it writes (extra ASSIGN sources)
    for s in u.src[1].src + u.src[2:]:
      if s.op is not Ops.ASSIGN: continue
      children.setdefault(s, []).append(u)
      in_degree[u] += 1
  queue = deque(k for k, v in in_degree.items() if v == 0)
  schedule: list[ScheduleItem] = []
  var_vals: dict[UOp, int] = {}
  while queue:
    u = queue.popleft()
    k = fix_kernel_ast(u.src[1], var_vals)
    if k.arg.ast.op is Ops.SINK: type_verify(list(k.arg.ast.toposort), ast_spec)
    schedule.append(ScheduleItem(k.arg.ast, tuple(s.buf_uop.buffer for s in k.src), k.arg.metadata))
    for x in children.get(u, []):
      in_degree[x] -= 1
      if in_degree[x] == 0: queue.append(x)
  if len(schedule) != (kc := len(in_degree)): raise ScheduleError(f"cycle detected in graph, created {kc} kernels but only scheduled {len(schedule)}")
  if DEBUG >= 1 and len(schedule) >= 10: print(f"scheduled {len(schedule)} kernels")
  return schedule, var_vals, becomes_map
