"""The einops-style formulas of `Tensor.rearrange` ("b c (h w) -> b (h w c)"), read into movement ops.

A formula names the input's axes on the left of `->` and the output's on the right. A parenthesised group on the
left splits one axis into several (their sizes come from the keyword arguments, one of them may be left to be
inferred); on the right it joins axes into one. `...` stands for the axes nobody names (`(...)` on the right joins
them), and `1` for an axis of extent 1. `plan` turns a formula into the three steps `Tensor.rearrange` applies:
reshape to the named axes one by one, permute them into the output's order, reshape to the output's groups.
"""
from __future__ import annotations
import re
from scheduler.helpers import prod

_TOKEN = re.compile(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\d+|\S")
_ELLIPSIS = "..."
_JOINED = "(...)"   # `...` inside parentheses: the axes it stands for joined into one


def _groups(side: str, formula: str, left: bool) -> list[list[str]]:
  """The side's axes, each a list of names ("1" for a unit axis; an ungrouped name is a group of one)."""
  groups: list[list[str]] = []
  current = None
  for token in _TOKEN.findall(side):
    if token == "(":
      if current is not None: raise ValueError(f"rearrange {formula!r}: parentheses cannot nest")
      current = []
    elif token == ")":
      if current is None: raise ValueError(f"rearrange {formula!r}: ')' without '('")
      groups.append(current)
      current = None
    elif token == _ELLIPSIS or token.isidentifier() or token.isdigit():
      if token.isdigit() and token != "1": raise ValueError(f"rearrange {formula!r}: only 1 may be an axis size")
      if token == _ELLIPSIS and current is not None and left:
        raise ValueError(f"rearrange {formula!r}: '...' cannot be inside parentheses on the left")
      if current is None: groups.append([token])
      else: current.append(_JOINED if token == _ELLIPSIS else token)
    else: raise ValueError(f"rearrange {formula!r}: unexpected {token!r}")
  if current is not None: raise ValueError(f"rearrange {formula!r}: '(' without ')'")
  names = [name for group in groups for name in group if name != "1"]   # "..." at most once: checked by plan
  if len(set(names)) != len(names): raise ValueError(f"rearrange {formula!r}: an axis is named twice on one side")
  return groups


def plan(formula: str, shape: tuple, sizes: dict[str, int]) -> tuple[tuple, tuple, tuple]:
  """(shape of every named axis, the order of those axes in the output, the output's shape)."""
  if formula.count("->") != 1: raise ValueError(f"rearrange {formula!r}: the formula needs one '->'")
  left_side, right_side = formula.split("->")
  left, right = _groups(left_side, formula, left=True), _groups(right_side, formula, left=False)
  ellipses = [sum(group.count(_ELLIPSIS) + group.count(_JOINED) for group in side) for side in (left, right)]
  if max(ellipses) > 1: raise ValueError(f"rearrange {formula!r}: more than one '...' on a side")
  has_ellipsis = ellipses[0] == 1
  if ellipses[0] != ellipses[1]:
    raise ValueError(f"rearrange {formula!r}: '...' must be on both sides or on neither")
  named_axes = len(left) - has_ellipsis
  if len(shape) < named_axes or (not has_ellipsis and len(shape) != named_axes):
    raise ValueError(f"rearrange {formula!r}: the left side names {len(left)} axes, the tensor has {len(shape)}")
  rest = len(shape) - named_axes
  hidden = [f"...{k}" for k in range(rest)]   # the axes `...` stands for, in order

  def expanded(side: list[list[str]]) -> list[list[str]]:   # `...` as the axes it stands for, `(...)` joined
    def parts(group: list[str]) -> list[list[str]]:
      if group == [_ELLIPSIS]: return [[name] for name in hidden]
      return [[n for name in group for n in (hidden if name == _JOINED else [name])]]
    return [part for group in side for part in parts(group)]
  left, right = expanded(left), expanded(right)
  extents: dict[str, int] = {}
  for group, extent in zip(left, shape):
    unknown = [name for name in group if name != "1" and name not in sizes]
    if len(unknown) > 1: raise ValueError(f"rearrange {formula!r}: give the sizes of all but one of {group}")
    known = prod(1 if name == "1" else sizes[name] for name in group if name not in unknown)
    if unknown:
      if known == 0 or extent % known: raise ValueError(f"rearrange {formula!r}: {group} cannot split {extent}")
      extents[unknown[0]] = extent // known
    elif known != extent: raise ValueError(f"rearrange {formula!r}: {group} is {known}, the axis is {extent}")
    extents.update({name: sizes[name] for name in group if name in sizes})
  left_names = [name for group in left for name in group if name != "1"]
  right_names = [name for group in right for name in group if name != "1"]
  if sorted(left_names) != sorted(right_names):
    raise ValueError(f"rearrange {formula!r}: both sides must name the same axes "
                     f"(left only: {sorted(set(left_names) - set(right_names))}, "
                     f"right only: {sorted(set(right_names) - set(left_names))})")
  split = tuple(extents[name] for name in left_names)
  order = tuple(left_names.index(name) for name in right_names)
  joined = tuple(prod(1 if name == "1" else extents[name] for name in group) for group in right)
  return split, order, joined
