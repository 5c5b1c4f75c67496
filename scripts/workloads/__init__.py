"""The bundled workload corpus: small deterministic programs that exercise the compiler the way its
users do (training loops, attention, symbolic shapes, DISK, and the reference rows).

Each workload is a function returning {"outputs": [np.ndarray...], "losses": [float...]} (losses only
for training workloads); `python -m scripts.workloads` runs them.
"""
from __future__ import annotations
import csv, pathlib
from typing import Callable
from scripts.workloads import models

REFERENCE_TSV = pathlib.Path(__file__).with_name("reference_workloads.tsv")


def _reference_workload(row: dict) -> Callable[[], dict]:
  def run() -> dict:
    import numpy as np
    from scheduler import Tensor, dtypes, Variable, nn
    env = {"Tensor": Tensor, "dtypes": dtypes, "np": np, "nn": nn, "Variable": Variable, "pathlib": pathlib}
    exec(row["tensor_code"], env)
    out = env["out"] if isinstance(env["out"], tuple) else (env["out"],)
    Tensor.realize(*out)
    return {"outputs": [o.numpy() for o in out]}
  run.__doc__ = f"reference row {row['name']}: {row['tensor_code']}"
  return run


def reference_rows() -> list[dict]:
  with open(REFERENCE_TSV) as f: return [r for r in csv.DictReader(f, delimiter="\t") if r["n_kernels"] != "ERR"]


WORKLOADS: dict[str, Callable[[], dict]] = {
  "mlp_sgd": models.mlp_sgd, "cnn_adam": models.cnn_adam, "transformer_adamw": models.transformer_adamw,
  "symbolic_seq": models.symbolic_seq, "disk_state_dict": models.disk_state_dict,
  **{f"ref_{r['name']}": _reference_workload(r) for r in reference_rows()},
}
