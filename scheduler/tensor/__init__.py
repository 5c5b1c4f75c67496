"""The lazy Tensor frontend: tinygrad's API, each op building UOps; nothing runs until `realize()`.

`Tensor` is assembled here from one module per job:

- `base.py`: what a tensor holds, broadcasting, realize/schedule/assign/numpy, autograd entry points;
- `creation.py`: constants, ranges, eye, random numbers (the generator is documented there);
- `movement.py`: reshape/permute/expand/pad/shrink/flip, indexing, cat/stack/split/repeat/gather;
- `elementwise.py`: ALU ops and their compositions, operators, comparisons, where, casts;
- `reduce.py`: reductions, softmax, arg-max, cumulative ops, pooling, convolution, matmul;
- `functional.py`: normalization, dropout, one-hot, attention, triangular masks, losses.

Public methods record their name while they build ops; it rides on schedule items as metadata.
"""
from __future__ import annotations
import contextlib, functools, sys, threading
from typing import Callable
from scheduler.tensor.base import TensorBase, current_op, places_tensors
from scheduler.tensor.creation import Creation
from scheduler.tensor.movement import Movement
from scheduler.tensor.elementwise import Elementwise
from scheduler.tensor.reduce import Reduce
from scheduler.tensor.functional import Functional

__all__ = ["Tensor"]


class Tensor(Functional, Reduce, Elementwise, Movement, Creation, TensorBase):
  __slots__ = ()
  __hash__ = TensorBase.__hash__   # Elementwise defines __eq__ (elementwise), which would unset it

  @staticmethod
  @contextlib.contextmanager
  def train(mode: bool = True):
    """`with Tensor.train():` switches dropout and batchnorm to training for a block (and back on exit)."""
    previous, Tensor.training = Tensor.training, mode
    try: yield
    finally: Tensor.training = previous


# methods that only read or run tensors build no ops of their own to name
_NOT_NAMED = {"schedule", "schedule_with_vars", "realize", "numpy", "tolist", "item", "backward", "gradient", "assign",
              "to", "to_",
              "replace", "requires_grad_"}
_NAMED_OPERATORS = ("__add__", "__mul__", "__sub__", "__truediv__", "__matmul__", "__neg__", "__getitem__", "__pow__",
                    "__radd__", "__rmul__", "__rsub__")


def _named(name: str, method: Callable) -> Callable:
  """The method, recording `name` as the op being built unless an outer public method already is."""
  @functools.wraps(method)
  def recording(*args, **kwargs):
    if current_op[0] is not None: return method(*args, **kwargs)
    if current_op[2] is not None:   # inside an entry point that placed its tensors already (`places_tensors`)
      current_op[0] = name
      try: return method(*args, **kwargs)
      finally: current_op[0] = None
    current_op[0], current_op[1], current_op[2] = name, None, (threading.get_ident(), sys._getframe(1))
    try: return method(*args, **kwargs)
    finally: current_op[0] = current_op[1] = current_op[2] = None
  return recording


def _instance_methods() -> dict[str, Callable]:
  found: dict[str, Callable] = {}
  for cls in reversed(Tensor.__mro__):
    for name, value in vars(cls).items():
      if callable(value) and not isinstance(value, (staticmethod, classmethod, type)): found[name] = value
  return found


def _creation_methods() -> dict[str, staticmethod | classmethod]:
  """The public static and class methods that make tensors (named by the methods they call, not by their own name)."""
  found: dict[str, staticmethod | classmethod] = {}
  for cls in reversed(Tensor.__mro__):
    for name, value in vars(cls).items():
      if isinstance(value, (staticmethod, classmethod)) and not name.startswith("_") and name != "train":
        found[name] = value
  return found


# methods that take no name but make tensors: placed where the program called them
_PLACED = {"backward", "gradient"}
for _name, _method in _instance_methods().items():
  if (not _name.startswith("_") and _name not in _NOT_NAMED) or _name in _NAMED_OPERATORS:
    setattr(Tensor, _name, _named(_name, _method))
  elif _name in _PLACED: setattr(Tensor, _name, places_tensors(_method))
for _name, _entry in _creation_methods().items():
  setattr(Tensor, _name, type(_entry)(places_tensors(_entry.__func__)))
