"""The bundled workload corpus: small deterministic programs that exercise the compiler the way its users do
(training loops, bfloat16 mixed precision, a recurrent model, image registration by bilinear warps, attention,
symbolic shapes, DISK, integer and view edge cases, layers at real sizes, mixed dtypes, deep residual and transformer
stacks, the reference rows), each also on the PYTHON runtime and under the scheduler flags that select other rules.

Each workload is a function returning {"outputs": [np.ndarray...], "losses": [float...]} (losses only
for training workloads); `python -m scripts.workloads` runs them.
"""
from __future__ import annotations
import csv, pathlib
from typing import Callable
from scripts.workloads import deep, edge_cases, models, new_ops, sizes

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
  "bf16_lars": models.bf16_lars, "lstm_bptt": models.lstm_bptt, "warp_registration": models.warp_registration,
  "symbolic_seq": models.symbolic_seq, "disk_state_dict": models.disk_state_dict, "llama_decode": models.llama_decode,
  "ddpm_step": models.ddpm_step, "gan_step": models.gan_step, "text_classifier": models.text_classifier,
  "gcn_node_classifier": models.gcn_node_classifier, "wavenet_step": models.wavenet_step,
  "int_arith_negative": edge_cases.int_arith_negative, "float_floor_division": edge_cases.float_floor_division,
  "nested_views": edge_cases.nested_views,
  "assign_orderings": edge_cases.assign_orderings, "big_reductions": edge_cases.big_reductions,
  "constant_reductions": edge_cases.constant_reductions, "disk_views": edge_cases.disk_views,
  "special_values": edge_cases.special_values,
  "upsampling_decoder": new_ops.upsampling_decoder, "einsum_attention": new_ops.einsum_attention,
  "nll_classifier": new_ops.nll_classifier, "ranking_eval": new_ops.ranking_eval,
  "multilabel_tagger": new_ops.multilabel_tagger, "segmentation_sgd": new_ops.segmentation_sgd,
  "large_layers": sizes.large_layers, "mixed_dtypes": sizes.mixed_dtypes,
  "contrastive_loss": sizes.contrastive_loss, "mobile_block": sizes.mobile_block,
  "residual_mlp_step": deep.residual_mlp_step, "transformer_encoder": deep.transformer_encoder,
  **{f"ref_{r['name']}": _reference_workload(r) for r in reference_rows()},
}

# Every workload also runs on the PYTHON runtime and under each scheduler flag that selects other rules, so that
# captures reach the code those settings run (a variant's name is `workload[variant]`).
VARIANTS: dict[str, dict] = {
  "PYTHON": {"device": "PYTHON"},
  **{f"{flag}={value}": {"flags": {flag: value}} for flag, value in
     (("FUSE_ARANGE", 1), ("FUSE_CONV_BW", 1), ("SPLIT_REDUCEOP", 0), ("DONT_REALIZE_EXPAND", 1))},
}


def run_variant(fn: Callable[[], dict], variant: str) -> dict:
  """`fn` on the variant's device and with its flags; both are restored afterwards."""
  from scheduler import Device
  from scheduler.helpers import Context
  setting = VARIANTS[variant]
  saved = Device.DEFAULT
  try:
    if "device" in setting: Device.DEFAULT = setting["device"]
    with Context(**setting.get("flags", {})): return fn()
  finally: Device.DEFAULT = saved


def all_runs(variants: bool = True) -> dict[str, Callable[[], dict]]:
  """Every workload by name, then (with `variants`) every workload under every variant."""
  runs = dict(WORKLOADS)
  if variants:
    for variant in VARIANTS:
      runs.update({f"{name}[{variant}]": (lambda fn=fn,
                                          v=variant: run_variant(fn, v)) for name, fn in WORKLOADS.items()})
  return runs
