"""A toy array compiler that exists to prove the harness's seam: it implements the replay contract (toyc/contract.py)
and nothing of `scheduler/`. Programs build expressions of inputs, constants, + and * and sums; realizing one
schedules it into kernels (one per output), renders each kernel as C-like text and evaluates it with numpy."""
from toyc.ir import Array, FLAGS

__all__ = ["Array", "FLAGS"]
