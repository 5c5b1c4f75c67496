"""The compiler under test: a lazy Tensor, the UOp IR, the kernel scheduler, lowering and devices."""
from scheduler.dtype import dtypes, DType
from scheduler.helpers import Context, ContextVar, getenv
from scheduler.symbolic import Variable
# the IR's view chains: imported here so every entry point has them
from scheduler.shape import shapetracker as _shapetracker
from scheduler.device import Device
from scheduler.tensor import Tensor
from scheduler.ops import UOp, Ops
from scheduler import nn
from scheduler import contract as _contract   # registers what the compiler's values pickle as

__all__ = ["Tensor", "dtypes", "DType", "Variable", "Context", "ContextVar", "Device", "UOp", "Ops", "getenv", "nn"]
