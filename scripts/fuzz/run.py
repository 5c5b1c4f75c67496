"""Running a generated program on the compiler's devices and judging it against its numpy oracle.

Sits between `scripts/fuzz/generate.py` (programs) and its users: the default-suite test
(`tests/scripts/test_fuzz.py`), the long mode (`python -m scripts.fuzz`) and `replay fuzz` (which captures
`python -m scripts.fuzz --capture`). A failure is one line: which device, which check, what differed.
"""
from __future__ import annotations
import contextlib, re, signal, threading, traceback
from dataclasses import dataclass
import numpy as np
from scripts.fuzz import reference as ref
from scripts.fuzz.program import Program

DEVICES = ("CPU", "PYTHON")


@dataclass
class Failure:
  device: str
  # "raised" (the compiler raised), "mismatch", "devices" (CPU and PYTHON differ), "slow", "oracle" (a generator bug)
  kind: str
  message: str

  def signature(self) -> str:
    """What makes two failures the same bug for counting: kind and the message without its numbers."""
    return f"{self.kind}: " + re.sub(r"[-+]?\d[\d.e+-]*", "N", self.message.split(";")[0])[:120]

  def __str__(self) -> str: return f"[{self.device}] {self.kind}: {self.message}"


def _namespace(device: str) -> dict:
  from scheduler import Tensor, dtypes, Variable, nn
  return {"Tensor": Tensor, "dtypes": dtypes, "Variable": Variable, "nn": nn, "np": np, "ref": ref, "DEV": device}


class ProgramTimeout(BaseException):
  """Raised into a program that runs too long (a BaseException: the compiler's own `except Exception` must not eat
  it)."""


@contextlib.contextmanager
def _time_limit(seconds: float):
  if not seconds or threading.current_thread() is not threading.main_thread(): yield; return
  def expire(*_): raise ProgramTimeout()
  previous = signal.signal(signal.SIGALRM, expire)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try: yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def execute(program: Program, device: str, timeout: float = 0) -> tuple[dict, list[Failure]]:
  """Run the program's Tensor code on `device`, then its numpy code; return the namespace and the failures. A
  program still running after `timeout` seconds (0: no limit) is a "slow" failure."""
  env = _namespace(device)
  try:
    with _time_limit(timeout):
      exec(program.tensor_source(), env)
      values = {c.tensor: np.asarray(eval(c.tensor, env).numpy()) for c in program.checks}
  except ProgramTimeout:
    return env, [Failure(device, "slow", f"the program ran longer than {timeout:g} s")]
  except Exception as e:
    return env, [Failure(device, "raised", _one_line(e))]
  env["_values"] = values
  try:
    exec(program.numpy_source(), env)
  except AssertionError as e:
    return env, [Failure(device, "mismatch", str(e))]
  except Exception as e:
    return env, [Failure(device, "oracle", _one_line(e))]
  failures = []
  for check in program.checks:
    if check.across_devices: continue
    try: expected = eval(check.expected, env)
    except Exception as e:
      failures.append(Failure(device, "oracle", _one_line(e))); continue
    problem = ref.mismatch(values[check.tensor], np.asarray(expected), check.dtype, rtol=check.rtol, atol=check.atol
                           or None, scaled=check.scaled, overflow=check.overflow)
    if problem: failures.append(Failure(device, "mismatch", f"{check.tensor}: {problem}"))
  return env, failures


def _one_line(e: BaseException) -> str:
  frames = traceback.extract_tb(e.__traceback__)
  where = next((f"{f.filename.split('/')[-2]}/{f.filename.split('/')[-1]}:{f.lineno}" for f in reversed(frames)
                if "/scheduler/" in f.filename or "/runtimes/" in f.filename), "")
  text = str(e).split("\n")[0][:200]
  return f"{type(e).__name__}: {text}" + (f" ({where})" if where else "")


PROGRAM_TIMEOUT = 60.0   # seconds per program and device: a generated program takes well under one


def judge(program: Program, devices=DEVICES, timeout: float = PROGRAM_TIMEOUT) -> list[Failure]:
  """Every failure of the program on each device, plus differences between the devices where numpy has no
  answer (random numbers)."""
  failures, results = [], {}
  for device in devices:
    env, found = execute(program, device, timeout)
    failures.extend(found)
    if not found: results[device] = env["_values"]
  if len(results) == 2:
    first, second = (results[d] for d in devices)
    for check in program.checks:
      if not check.across_devices: continue
      problem = ref.mismatch(first[check.tensor], second[check.tensor], check.dtype)
      if problem: failures.append(Failure("+".join(devices), "devices", f"{check.tensor}: {problem}"))
  return failures
