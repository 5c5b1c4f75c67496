"""The corpus: every workload runs on CPU and PYTHON with equal results, training losses decrease,
and the command line lists, filters and reports failures."""
import subprocess, sys
import numpy as np
import pytest
from scheduler import Device
from scheduler.device import find_c_compiler
from scripts.workloads import WORKLOADS
from tests.conftest import REPO, DEVICES

MODEL_WORKLOADS = [n for n in WORKLOADS if not n.startswith("ref_")]


def run_on(device: str, name: str) -> dict:
  old = Device.DEFAULT
  Device.DEFAULT = device
  try: return WORKLOADS[name]()
  finally: Device.DEFAULT = old


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_equal_on_cpu_and_python(name):
  cpu, py = run_on("CPU", name), run_on("PYTHON", name)
  assert len(cpu["outputs"]) == len(py["outputs"])
  for a, b in zip(cpu["outputs"], py["outputs"]):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(cpu.get("losses", []), py.get("losses", []), rtol=1e-4)
  if name in TRAINING:   # the training workloads train: their loss goes down
    losses = cpu["losses"]
    assert losses[-1] < losses[0] and all(np.isfinite(losses))


TRAINING = ["mlp_sgd", "bf16_lars", "lstm_bptt", "warp_registration", "cnn_adam", "transformer_adamw",
            "upsampling_decoder", "nll_classifier", "multilabel_tagger", "segmentation_sgd", "ddpm_step",
            "gan_step", "text_classifier", "gcn_node_classifier", "wavenet_step"]


def test_training_workloads_report_losses():
  assert all(name in WORKLOADS for name in TRAINING)


def test_symbolic_workload_matches_numpy():
  out = WORKLOADS["symbolic_seq"]()["outputs"]
  rng = np.random.default_rng(6)
  x, w = rng.standard_normal((12, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
  for n, got in zip((3, 7, 12), out):
    np.testing.assert_allclose(got, np.maximum(x[:n] @ w, 0).sum(0), rtol=1e-4, atol=1e-5)


def _llama_reference(prompt: list[int], tokens: list[int], vocab=32, dim=16, heads=4, kv_heads=2, hidden=32,
                     max_seq=8, seed=21) -> list[np.ndarray]:
  """The logits of each step of `llama_decode`, by numpy in float64 from the same weights."""
  rng = np.random.default_rng(seed)
  def weight(*shape): return (rng.standard_normal(shape) * 0.3).astype(np.float32).astype(np.float64)
  head_dim = dim // heads
  embed, wq, wk, wv, wo = weight(vocab, dim), weight(dim, dim), weight(dim, kv_heads * head_dim), \
    weight(dim, kv_heads * head_dim), weight(dim, dim)
  w_gate, w_up, w_down, mlp_norm = weight(dim, hidden), weight(dim, hidden), weight(hidden, dim), np.abs(weight(dim))
  angles = np.arange(max_seq)[:, None] * (1.0 / 10000.0 ** (np.arange(0, head_dim, 2) / head_dim))[None]
  cache_k, cache_v = np.zeros((max_seq, kv_heads, head_dim)), np.zeros((max_seq, kv_heads, head_dim))
  def norm(x, g): return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g
  def rotate(x, start):
    pairs, cos, sin = x.reshape(*x.shape[:2], -1, 2), np.cos(angles[start:start + len(x), None]), \
      np.sin(angles[start:start + len(x), None])
    return np.stack([pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 0] * sin + pairs[..., 1] * cos], -1) \
      .reshape(x.shape)
  out, start = [], 0
  for step in [prompt] + [[t] for t in tokens]:
    x = embed[step]
    h = norm(x, 1.0)
    q = rotate((h @ wq).reshape(len(step), heads, head_dim), start)
    cache_k[start:start + len(step)] = rotate((h @ wk).reshape(len(step), kv_heads, head_dim), start)
    cache_v[start:start + len(step)] = (h @ wv).reshape(len(step), kv_heads, head_dim)
    end = start + len(step)
    keys, values = (np.repeat(c[:end], heads // kv_heads, axis=1) for c in (cache_k, cache_v))
    scores = np.einsum("qhd,khd->hqk", q, keys) / np.sqrt(head_dim)
    scores = np.where(np.triu(np.ones((len(step), end), bool), k=start + 1), -np.inf, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    x = x + np.einsum("hqk,khd->qhd", probs / probs.sum(-1, keepdims=True), values).reshape(len(step), dim) @ wo
    h = norm(x, mlp_norm)
    gate = h @ w_gate
    x = x + (gate / (1 + np.exp(-gate)) * (h @ w_up)) @ w_down
    out.append(x @ embed.T)
    start = end
  return out


def test_llama_decode_matches_numpy():
  out = WORKLOADS["llama_decode"]()["outputs"]
  *logits, tokens, sampled = out
  expected = _llama_reference([3, 17, 5], [int(t) for t in tokens])
  assert len(logits) == len(expected) == 4
  for got, want in zip(logits, expected): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  # greedy decoding: each token is the argmax of the logits before it
  assert [int(t) for t in tokens] == [int(np.argmax(step[-1])) for step in expected[:-1]]
  assert 0 <= int(sampled[0]) < 32


def _conv2d(x, w, b, stride=1, padding=0, dilation=1):
  n, c, h, width = x.shape
  out, _, k, _ = w.shape
  x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  rows, cols = ((size + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for size in (h, width))
  y = np.zeros((n, out, rows, cols))
  for a in range(k):
    for e in range(k):
      top, left = a * dilation, e * dilation
      window = x[:, :, top:top + stride * rows:stride, left:left + stride * cols:stride]
      y += np.einsum("nchw,oc->nohw", window, w[:, :, a, e])
  return y + b.reshape(1, -1, 1, 1)


def _conv_transpose2d(x, w, b, stride, padding):
  n, c, h, width = x.shape
  k = w.shape[2]
  y = np.zeros((n, w.shape[1], (h - 1) * stride + k, (width - 1) * stride + k))
  for i in range(h):
    for j in range(width):
      y[:, :, i * stride:i * stride + k, j * stride:j * stride + k] += np.einsum("nc,cokl->nokl", x[:, :, i, j], w)
  return y[:, :, padding:-padding, padding:-padding] + b.reshape(1, -1, 1, 1)


def test_ddpm_step_first_loss_matches_numpy():
  """The first step's loss from numpy's forward pass of the same denoiser (its weights drawn as the workload draws
  them, its noise the workload's first randn)."""
  from scripts.workloads.models import Denoiser
  out = WORKLOADS["ddpm_step"]()
  noise = out["outputs"][0].astype(np.float64)
  rng = np.random.default_rng(31)
  images = rng.uniform(-1, 1, (4, 2, 8, 8)).astype(np.float32).astype(np.float64)
  alpha_bar = np.cumprod(1 - np.linspace(1e-4, 0.02, 50)).astype(np.float32).astype(np.float64)
  t = rng.integers(0, 50, 4)
  shapes = Denoiser(32)
  weights, draw = {}, np.random.default_rng(32)
  for name, scale in (("conv_in", 0.3), ("time", 0.3), ("down", 0.3), ("mid", 0.3), ("up", 0.3), ("conv_out", 0.1)):
    layer = getattr(shapes, name)
    weights[name] = ((draw.standard_normal(layer.weight.shape) * scale).astype(np.float32).astype(np.float64),
                     (draw.standard_normal(layer.bias.shape) * 0.1).astype(np.float32).astype(np.float64))
  silu = lambda v: v / (1 + np.exp(-v))
  x = np.sqrt(alpha_bar[t]).reshape(4, 1, 1, 1) * images + np.sqrt(1 - alpha_bar[t]).reshape(4, 1, 1, 1) * noise
  angles = t.reshape(-1, 1) * np.exp(np.arange(4) * (-np.log(10000.0) / 4)).reshape(1, 4)
  embedding = np.concatenate([np.sin(angles), np.cos(angles)], axis=1) @ weights["time"][0].T + weights["time"][1]
  h = silu(_conv2d(x, *weights["conv_in"], padding=1)) + silu(embedding).reshape(4, 8, 1, 1)
  down = _conv2d(h, *weights["down"], stride=2, padding=1).reshape(4, 2, -1)
  d = silu(((down - down.mean(-1, keepdims=True)) / np.sqrt(down.var(-1, keepdims=True) + 1e-5)).reshape(4, 8, 4, 4))
  d = d + silu(_conv2d(d, *weights["mid"], padding=2, dilation=2))
  up = silu(_conv_transpose2d(d, *weights["up"], stride=2, padding=1))
  prediction = _conv2d(np.concatenate([up, h], axis=1), *weights["conv_out"], padding=1)
  np.testing.assert_allclose(out["losses"][0], ((prediction - noise) ** 2).mean(), rtol=1e-4)
  assert out["losses"][-1] < out["losses"][0]


def test_gan_step_first_loss_matches_numpy():
  """The discriminator's first loss from numpy's forward passes of the same players (their weights drawn as the
  workload draws them, the noise the workload's first randn)."""
  out = WORKLOADS["gan_step"]()
  z = out["outputs"][0].astype(np.float64)
  rng = np.random.default_rng(41)
  real = np.concatenate([rng.normal(2.0, 0.5, (16, 4)), rng.normal(-2.0, 0.5, (16, 4))]).astype(np.float32)
  def linear(fan_in, fan_out):
    w = (rng.standard_normal((fan_out, fan_in)) * (1 / np.sqrt(fan_in))).astype(np.float32).astype(np.float64)
    b = (rng.standard_normal(fan_out) * 0.1).astype(np.float32).astype(np.float64)
    return lambda x: x @ w.T + b
  g1, g2, d1, d2 = linear(3, 16), linear(16, 4), linear(4, 16), linear(16, 1)
  def judge(x):
    h = d1(x)
    return d2(np.where(h > 0, h, 0.2 * h))
  def bce_logits(x, y): return (np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))).mean()
  fake = g2(np.maximum(g1(z), 0))
  d_loss = bce_logits(judge(real.astype(np.float64)), 1.0) + bce_logits(judge(fake), 0.0)
  np.testing.assert_allclose(out["losses"][0], d_loss, rtol=1e-5)
  assert out["losses"][-1] < out["losses"][0]


def test_text_classifier_first_loss_matches_numpy():
  """The first loss from numpy: each text's embeddings averaged over its real tokens, the linear head, cross-entropy
  against targets smoothed by 0.1 (spread evenly over the 3 classes)."""
  out = WORKLOADS["text_classifier"]()
  rng = np.random.default_rng(51)
  lengths = rng.integers(2, 9, 12)
  ids = np.zeros((12, 8), np.int64)
  for row, length in enumerate(lengths): ids[row, :length] = rng.integers(1, 20, length)
  table = (rng.standard_normal((20, 6)) * 0.5).astype(np.float32).astype(np.float64)
  w = (rng.standard_normal((3, 6)) * (1 / np.sqrt(6))).astype(np.float32).astype(np.float64)
  b = (rng.standard_normal(3) * 0.1).astype(np.float32).astype(np.float64)
  pooled = np.stack([table[row[:length]].mean(0) for row, length in zip(ids, lengths)])
  logits = pooled @ w.T + b
  log_probs = logits - logits.max(1, keepdims=True)
  log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
  targets = np.full((12, 3), 0.1 / 3) + 0.9 * np.eye(3)[ids[:, 0] % 3]
  np.testing.assert_allclose(out["losses"][0], -(targets * log_probs).sum(1).mean(), rtol=1e-5)


def test_gcn_node_classifier_first_loss_matches_numpy():
  """The first loss from numpy with the graph as a dense matrix: D^-1/2 (A + I) D^-1/2 applied twice around the
  layers, instead of messages gathered and scattered along the edge list."""
  out = WORKLOADS["gcn_node_classifier"]()
  rng = np.random.default_rng(61)
  pairs = {tuple(sorted(p)) for p in rng.integers(0, 12, (20, 2)) if p[0] != p[1]}
  adjacency = np.eye(12)
  for a, b in pairs: adjacency[a, b] = adjacency[b, a] = 1
  norm = adjacency / np.sqrt(np.outer(adjacency.sum(1), adjacency.sum(1)))
  x = rng.standard_normal((12, 5)).astype(np.float32).astype(np.float64)
  labels = rng.integers(0, 3, 12)
  w1 = (rng.standard_normal((5, 8)) / np.sqrt(5)).astype(np.float32).astype(np.float64)
  w2 = (rng.standard_normal((8, 3)) / np.sqrt(8)).astype(np.float32).astype(np.float64)
  logits = norm @ np.maximum(norm @ x @ w1, 0) @ w2
  log_probs = logits - logits.max(1, keepdims=True)
  log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
  np.testing.assert_allclose(out["losses"][0], -log_probs[np.arange(0, 12, 2), labels[::2]].mean(), rtol=1e-5)


def test_wavenet_step_first_loss_matches_numpy():
  """The first loss from numpy: each causal dilated convolution as its two taps, the sample d steps back (zero
  before the start) and the sample itself."""
  out = WORKLOADS["wavenet_step"]()
  rng = np.random.default_rng(71)
  wave = (np.sin(np.arange(33) * 0.4)[None] * rng.uniform(0.5, 1.0, (2, 1)) + rng.normal(0, 0.05, (2, 33)))
  wave = wave.astype(np.float32).astype(np.float64)
  def layer(fan_in, fan_out, kernel):
    w = (rng.standard_normal((fan_out, fan_in, kernel)) * (1 / np.sqrt(fan_in * kernel))).astype(np.float32)
    return w.astype(np.float64), (rng.standard_normal(fan_out) * 0.1).astype(np.float32).astype(np.float64)
  def pointwise(conv, x): return np.einsum("oc,nct->not", conv[0][:, :, 0], x) + conv[1][None, :, None]
  def causal(conv, x, d):
    back = np.pad(x, ((0, 0), (0, 0), (d, 0)))[:, :, :x.shape[2]]
    return np.einsum("oc,nct->not", conv[0][:, :, 0], back) + pointwise((conv[0][:, :, 1:], conv[1]), x)
  start = layer(1, 6, 1)
  blocks = [(layer(6, 6, 2), layer(6, 6, 2), layer(6, 6, 1) if d != 4 else None, layer(6, 6, 1), d) for d in (1, 2, 4)]
  head = layer(6, 1, 1)
  h, skips = pointwise(start, wave[:, None, :32]), []
  for filt, gate, residual, skip, d in blocks:
    z = np.tanh(causal(filt, h, d)) / (1 + np.exp(-causal(gate, h, d)))
    if residual is not None: h = h + pointwise(residual, z)
    skips.append(pointwise(skip, z))
  prediction = pointwise(head, np.maximum(sum(skips), 0))
  np.testing.assert_allclose(out["losses"][0], ((prediction - wave[:, None, 1:]) ** 2).mean(), rtol=1e-5)


def test_command_line_lists_and_rejects_unknown_names():
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--list"], cwd=REPO, capture_output=True, text=True)
  assert proc.returncode == 0 and "mlp_sgd" in proc.stdout and "ref_matmul" in proc.stdout
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--only", "nope"], cwd=REPO, capture_output=True,
                        text=True)
  assert proc.returncode == 2 and "unknown workload" in proc.stderr
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--only", "ref_add_const", "ref_sum_all",
                         "--no-variants"], cwd=REPO,
                        capture_output=True, text=True)
  assert proc.returncode == 0 and "2/2 workloads ok" in proc.stdout
  # with variants: each workload also on PYTHON and under four flags
  proc = subprocess.run([sys.executable, "-m", "scripts.workloads", "--only", "ref_add_const"], cwd=REPO,
                        capture_output=True, text=True)
  assert proc.returncode == 0 and "6/6 workloads ok" in proc.stdout and "ref_add_const[PYTHON]" in proc.stdout
  assert "ref_add_const[SPLIT_REDUCEOP=0]" in proc.stdout


def test_variants_run_on_their_device_with_their_flags_and_restore_both():
  from scheduler.helpers import ContextVar
  from scripts.workloads import run_variant
  seen = {}
  def probe():
    seen.update(device=Device.DEFAULT, split=ContextVar._cache["SPLIT_REDUCEOP"].value)
    return {"outputs": []}
  before = (Device.DEFAULT, ContextVar._cache["SPLIT_REDUCEOP"].value)
  run_variant(probe, "PYTHON")
  assert seen["device"] == "PYTHON"
  run_variant(probe, "SPLIT_REDUCEOP=0")
  assert seen == {"device": before[0], "split": 0}
  assert (Device.DEFAULT, ContextVar._cache["SPLIT_REDUCEOP"].value) == before


@pytest.mark.parametrize("device", DEVICES)
def test_integer_workload_matches_numpy(device):
  if device == "CPU" and find_c_compiler() is None: pytest.skip("no C compiler")
  a = np.array([-7, -6, -1, 0, 1, 5, 7, -128, 127, -2**20], dtype=np.int32)
  b = np.array([2, -4, 3, 5, -3, -5, 2, 7, -8, 3], dtype=np.int32)
  out = run_on(device, "int_arith_negative")["outputs"]
  # // truncates toward zero, as the reference's idiv
  trunc_div = lambda x, y: (np.abs(x) // np.abs(y)) * np.sign(x) * np.sign(y)
  wrapped = a.astype(np.uint32)
  expected = [trunc_div(a, b), np.mod(a, b), a * -3 + b, trunc_div(a, np.int32(-3)), np.mod(a, 7), wrapped << 3,
              wrapped >> 5,
              (-a).astype(np.uint32) >> 1, np.maximum(a, b) - np.minimum(a, b),
              np.trunc(a.astype(np.float32) / 3).astype(np.int32),
              a.astype(np.int8), a.astype(np.uint8), np.abs(trunc_div(a * 3, np.int32(-2))),
              np.sign(a) * (np.abs(a) % 4), np.where(a < b, a, -b)]
  promoted = [a.astype(np.float32) / b.astype(np.float32), np.exp2(np.mod(a, 5).astype(np.float32)),
              a.astype(np.float32) * 0.5]
  assert len(out) == len(expected) + len(promoted)
  for i, (got, want) in enumerate(zip(out, expected)): np.testing.assert_array_equal(got, want, err_msg=f"output {i}")
  for got, want in zip(out[len(expected):], promoted):
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_float_floor_division_workload_matches_numpy(device):
  if device == "CPU" and find_c_compiler() is None: pytest.skip("no C compiler")
  minutes = np.array([0, 59, 60, 61, 1439, 1440, 10079, 10080, 525600, -1, -60, -1441, -1785], dtype=np.float32)
  values = np.linspace(-3.5, 3.5, 29, dtype=np.float32)
  flat, seven = np.arange(-21, 36, dtype=np.float32), np.float32(7)
  angles = np.linspace(-20.0, 20.0, 17, dtype=np.float32)
  hour = np.mod(np.floor_divide(minutes, 60), 24)
  exact = [hour, np.mod(np.floor_divide(minutes, 1440), 7), np.mod(minutes, 60), hour * 60 + np.mod(minutes, 60),
           np.floor_divide(values, 0.25), np.mod(values, 0.5), np.clip(np.floor_divide(values, 0.5), -4, 3) + 4,
           np.floor_divide(flat, seven), np.mod(flat, seven), np.floor_divide(flat, -seven), np.mod(flat, -3),
           np.mod(flat.astype(np.float16), np.float16(7))]
  out = run_on(device, "float_floor_division")["outputs"]
  assert len(out) == len(exact) + 1
  for got, want in zip(out, exact):   # whole numbers and multiples of powers of two: exact
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
  np.testing.assert_allclose(out[-1], np.mod(angles.astype(np.float64), 2 * np.pi), atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_multilabel_tagger_workload_matches_numpy(device):
  """The trained model's per-tag losses against numpy's, from the weights it ends with: positives weighted by
  negatives / positives of their tag."""
  if device == "CPU" and find_c_compiler() is None: pytest.skip("no C compiler")
  w1, b1, w2, b2, per_tag, predicted, pos_weight = run_on(device, "multilabel_tagger")["outputs"]
  rng = np.random.default_rng(17)
  x = rng.standard_normal((24, 10)).astype(np.float32).astype(np.float64)
  y = (rng.random((24, 5)) < [0.5, 0.25, 0.15, 0.1, 0.3]).astype(np.float64)
  y[0] = 1.0
  np.testing.assert_allclose(pos_weight, (24 - y.sum(0)) / y.sum(0), rtol=1e-6)
  z = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
  # -(p y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))), with log sigmoid(z) = -log(1 + exp(-z))
  expected = pos_weight * y * np.logaddexp(0, -z) + (1 - y) * np.logaddexp(0, z)
  np.testing.assert_allclose(per_tag, expected, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(predicted, z > 0)


@pytest.mark.parametrize("device", DEVICES)
def test_view_and_assign_workloads_match_numpy(device):
  if device == "CPU" and find_c_compiler() is None: pytest.skip("no C compiler")
  base = np.arange(96, dtype=np.float32).reshape(8, 12)
  inner = base[1:7, 2:10][1:5, ::2]
  expected = [inner, np.pad(inner[:, ::-1], ((1, 0), (0, 2))).T, base[2:6], base[3:5, 4:8].reshape(8) * 2,
              base[:, 3:9].reshape(8, 2, 3).sum(2),
              base.reshape(4, 24)[1:3].reshape(2, 4, 6)[:, 1:3]]
  for got, want in zip(run_on(device, "nested_views")["outputs"], expected): np.testing.assert_array_equal(got, want)
  a = np.arange(8, dtype=np.float32)
  expected = [a + 1, -a, 2 * a, 6 * -a, np.full((4, 4), 2, np.float32)]
  for got, want in zip(run_on(device, "assign_orderings")["outputs"], expected):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_special_values_workload_matches_numpy(device):
  if device == "CPU" and find_c_compiler() is None: pytest.skip("no C compiler")
  from scripts.workloads.edge_cases import special_values_input
  x = special_values_input()
  finite = np.clip(np.where(x != x, 0, x), -3, 3)
  with np.errstate(all="ignore"):
    expected = [x != x, x - x, 1 / x, np.sqrt(x), x.sum(1), np.where(x != x, 0, x).sum(1), np.where(x > 0.5, x, 0.5),
                np.where(x != x, 0, x).max(1), -x,
                x < 1e30, finite.sum(1) * 1e-3, (finite * finite).sum(0)]
  out = run_on(device, "special_values")["outputs"]
  assert len(out) == len(expected)
  for i, (got, want) in enumerate(zip(out, expected)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"output {i}")


def test_big_reductions_match_numpy_and_split_by_default():
  from scheduler import Tensor
  from scheduler.helpers import Context
  x = np.random.default_rng(8).standard_normal(1 << 17).astype(np.float32)
  out = run_on("PYTHON", "big_reductions")["outputs"]
  expected = [x.sum(), x.max(), x.reshape(2, 1 << 16).sum(1), np.sqrt((x.astype(np.float64) ** 2).mean()),
              x.reshape(1 << 9, 1 << 8).sum(0)]
  for got, want in zip(out, expected): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
  t = Tensor(x).realize()
  assert len(t.sum().schedule()) == 2   # the corpus reaches the split rule...
  with Context(SPLIT_REDUCEOP=0): assert len(t.sum().schedule()) == 1   # ...and its flag


def test_einsum_attention_workload_matches_numpy():
  out, weights, trace = WORKLOADS["einsum_attention"]()["outputs"]
  rng = np.random.default_rng(13)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  wq, wk, wv = (rng.standard_normal((8, 2, 4)).astype(np.float32) * 0.3 for _ in range(3))
  wo = rng.standard_normal((2, 4, 8)).astype(np.float32) * 0.3
  q, k, v = (np.einsum("btd,dhe->bhte", x, w) for w in (wq, wk, wv))
  scores = np.where(np.tril(np.ones((5, 5))) > 0, np.einsum("bhqe,bhke->bhqk", q, k) / 2.0, -np.inf)
  expect_weights = np.exp(scores - scores.max(-1, keepdims=True))
  expect_weights /= expect_weights.sum(-1, keepdims=True)
  expect = np.einsum("bhqk,bhke,hed->bqd", expect_weights, v, wo)
  np.testing.assert_allclose(weights, expect_weights, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(trace, np.trace(np.einsum("bqd,bkd->qk", expect, expect)), rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_ranking_eval_workload_matches_numpy(device):
  accuracy, ranked, order, histogram, features = run_on(device, "ranking_eval")["outputs"]
  rng = np.random.default_rng(16)
  scores = rng.standard_normal((8, 12)).astype(np.float32)
  labels = rng.integers(0, 12, 8).astype(np.int32)
  signal = rng.standard_normal((8, 16)).astype(np.float32)
  expect_order = np.argsort(-scores, axis=1, kind="stable")
  assert accuracy == np.float32((expect_order[:, :5] == labels[:, None]).any(1).mean())
  np.testing.assert_array_equal(order, expect_order)
  np.testing.assert_array_equal(ranked, np.take_along_axis(scores, expect_order, 1))
  np.testing.assert_array_equal(histogram, np.bincount(expect_order[:, 0], minlength=12)[None].astype(np.float32))
  windows = np.lib.stride_tricks.sliding_window_view(signal, 4, axis=1)[:, ::2]
  np.testing.assert_allclose(features, windows @ np.array([0.25, 0.5, 0.25, -0.1], np.float32), rtol=1e-5, atol=1e-6)


def test_view_and_constant_edge_workloads_match_numpy():
  views = WORKLOADS["nested_views"]()["outputs"]
  base = np.arange(96, dtype=np.float32).reshape(8, 12)
  expect = [np.flip(np.pad(base[:5, :7], ((1, 3), (2, 0))), 0),
            np.flip(np.pad(base[2:, 1:], ((0, 2), (3, 1))), (0, 1)) + 1,
            np.flip(np.pad(base[1:4], ((2, 1), (1, 2))), 1).sum(0), base.reshape(96)[1:95].reshape(2, 47)[:, ::3],
            base.reshape(96)[5:].reshape(7, 13)[:, 1:].reshape(12, 7).sum(1), base[:4, :6].T.reshape(24)[:5],
            base[:2, :12].reshape(2, 3, 4).transpose(2, 0, 1).reshape(24)[:7] * 3]
  assert len(views) == 6 + len(expect)
  for got, want in zip(views[6:], expect): np.testing.assert_array_equal(got, want)
  constants = WORKLOADS["constant_reductions"]()["outputs"]
  expect = [np.full(4, 2.5), np.full(5, -1.5), 1.5 ** 6, np.array([1, 1, 1, 1, -3, -3.0]), np.ones(5), np.arange(5.0),
            8.0,
            np.full(6, 12), np.full(3, 2)]
  for got, want in zip(constants, expect): np.testing.assert_allclose(got, want, rtol=1e-6)


def test_jobs_run_workloads_in_processes_that_capture_into_one_run(tmp_path):
  from tests.replay.conftest import cli
  from db import Store
  db = tmp_path / "r.db"
  proc = cli("capture", "--", sys.executable, "-m", "scripts.workloads", "--only", "ref_add_const", "ref_sum_all",
             "ref_matmul", "--jobs", "2", db=db)
  # ref_matmul also matches ref_matmul_bias_relu
  assert proc.returncode == 0 and "24/24 workloads ok" in proc.stdout, proc.stdout + proc.stderr
  caps = Store(str(db)).captures()
  assert len({c["run_id"] for c in caps}) == 1
  assert {c["location"].split(" @ ")[0] for c in caps} >= {"workload:ref_add_const", "workload:ref_sum_all[PYTHON]",
                                                           "workload:ref_matmul[SPLIT_REDUCEOP=0]"}


def _conv2d_same(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
  padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))   # (n, cin, h, w, 3, 3)
  return np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64)) + b[None, :, None, None]


def test_large_layers_match_numpy():
  out = WORKLOADS["large_layers"]()["outputs"]
  rng = np.random.default_rng(21)
  def t(*shape): return rng.standard_normal(shape).astype(np.float32).astype(np.float64)
  want = [np.maximum(t(m, k) @ (t(k, n).astype(np.float32) * np.float32(k ** -0.5)) + t(n),
                     0) for m, k, n in ((128, 256, 96), (100, 300, 52), (37, 1000, 41))]
  x, w, b = t(2, 16, 34, 34), t(32, 16, 3, 3), t(32)
  want.append(_conv2d_same(x, w.astype(np.float32) * np.float32(0.1), b))
  logits = t(64, 2048)
  e = np.exp(logits - logits.max(axis=1, keepdims=True))
  want += [e / e.sum(axis=1, keepdims=True), t(1 << 17).mean()]
  assert len(out) == len(want)
  for got, expected in zip(out, want): np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_contrastive_loss_matches_numpy():
  (loss,) = WORKLOADS["contrastive_loss"]()["outputs"]
  rng = np.random.default_rng(23)
  def unit(*shape):
    v = rng.standard_normal(shape).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float64)
  logits = (unit(1024, 64) @ unit(1024, 64).T) * 14.3
  def cross_entropy(m):
    shifted = m - m.max(1, keepdims=True)
    return -np.diag(shifted - np.log(np.exp(shifted).sum(1, keepdims=True))).mean()
  np.testing.assert_allclose(loss, (cross_entropy(logits) + cross_entropy(logits.T)) / 2, rtol=1e-4)


def test_mobile_block_matches_numpy():
  (out,) = WORKLOADS["mobile_block"]()["outputs"]
  rng = np.random.default_rng(24)
  def t(*shape, scale=1.0): return (rng.standard_normal(shape) * scale).astype(np.float32).astype(np.float64)
  x = t(2, 16, 32, 32)
  w1, b1 = t(64, 16, 1, 1, scale=0.25), t(64, scale=0.1)
  wd, w2 = t(64, 1, 3, 3, scale=0.3), t(16, 64, 1, 1, scale=0.125)
  expanded = np.clip(np.einsum("nchw,oc->nohw", x, w1[:, :, 0, 0]) + b1[None, :, None, None], 0, 6)
  windows = np.lib.stride_tricks.sliding_window_view(np.pad(expanded, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                     axis=(2, 3))
  depthwise = np.clip(np.einsum("nchwij,cij->nchw", windows, wd[:, 0]), 0, 6)
  want = x + np.einsum("nchw,oc->nohw", depthwise, w2[:, :, 0, 0])
  np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_mixed_dtypes_follow_the_promotion_rules_and_match_numpy():
  out = WORKLOADS["mixed_dtypes"]()["outputs"]
  rng = np.random.default_rng(22)
  image = rng.integers(0, 256, (3, 32, 32), dtype=np.uint8)
  mean, std = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None], np.array([0.229, 0.224, 0.225],
                                                                                   np.float32)[:, None, None]
  weights, activations = rng.integers(-128, 128, (64, 48), dtype=np.int8), rng.integers(0, 256, (48, 16),
                                                                                        dtype=np.uint8)
  x = rng.standard_normal((32, 64)).astype(np.float16)
  w = rng.standard_normal((64, 24)).astype(np.float16) * np.float16(0.1)
  bias = rng.standard_normal(24).astype(np.float32)
  counts = rng.integers(-5, 5, (32, 24), dtype=np.int32)
  offsets = rng.integers(0, 4, 32, dtype=np.int64)
  half_layer = np.maximum(x.astype(np.float32) @ w.astype(np.float32) + bias, 0)
  want = [(image / np.float32(255) - mean) / std, weights.astype(np.int32) @ activations.astype(np.int32),
          (weights[:16, :16] * np.int8(3)).astype(np.int16) + activations[:16, :16],
          half_layer,   # int8 * 3 wraps in int8
          np.where(counts > 0, half_layer, 0) * counts + (counts < 0) * 0.5,
          (x.astype(np.float32) * 3).sum(axis=1) + offsets]
  assert [o.dtype for o in out] == [np.float32, np.int32, np.int16, np.float32, np.float32, np.float16]
  for got, expected in zip(out, want):
    tol = 2e-2 if got.dtype == np.float16 or got is out[3] or got is out[4] else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected, np.float64), rtol=tol, atol=tol)


def test_the_64_block_residual_mlp_step_matches_numpy_backpropagation():
  from scripts.workloads import deep
  got = WORKLOADS["residual_mlp_step"]()
  rng = np.random.default_rng(31)
  x = rng.standard_normal((deep.MLP_BATCH, deep.MLP_WIDTH)).astype(np.float32).astype(np.float64)
  blocks = [(a.astype(np.float64), b.astype(np.float64)) for a, b in deep.residual_mlp_weights(rng)]
  hs, zs, h = [], [], x
  for a, b in blocks:
    hs.append(h); zs.append(h @ a)
    h = h + np.maximum(zs[-1], 0) @ b
  loss = (h * h).mean()
  g, grads = 2 * h / h.size, []
  for (a, b), h_in, z in reversed(list(zip(blocks, hs, zs))):
    dz = (g @ b.T) * (z > 0)
    grads.append((h_in.T @ dz, np.maximum(z, 0).T @ g))
    g = g + dz @ a.T
  grads.reverse()
  lr = 0.05
  want = [blocks[0][0] - lr * grads[0][0], blocks[0][1] - lr * grads[0][1], blocks[-1][1] - lr * grads[-1][1]]
  np.testing.assert_allclose(got["losses"][0], loss, rtol=1e-4)
  for a, b in zip(got["outputs"], want): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_24_block_transformer_encoder_matches_numpy():
  from scripts.workloads import deep
  got = WORKLOADS["transformer_encoder"]()["outputs"][0]
  rng = np.random.default_rng(32)
  x = rng.standard_normal((2, deep.SEQUENCE, deep.MODEL_WIDTH)).astype(np.float32).astype(np.float64)
  def layernorm(t): return (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True) + 1e-5)
  def gelu(t): return 0.5 * t * (1 + np.tanh(np.sqrt(2 / np.pi) * (t + 0.044715 * t ** 3)))
  def softmax(t):
    e = np.exp(t - t.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  head = deep.MODEL_WIDTH // deep.HEADS
  for w in deep.encoder_weights(rng):
    def split(t): return t.reshape(2, deep.SEQUENCE, deep.HEADS, head).transpose(0, 2, 1, 3)
    q, k, v = split(x @ w["wq"]), split(x @ w["wk"]), split(x @ w["wv"])
    attention = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(head)) @ v
    x = layernorm(x + attention.transpose(0, 2, 1, 3).reshape(2, deep.SEQUENCE, deep.MODEL_WIDTH) @ w["wo"])
    x = layernorm(x + gelu(x @ w["w1"]) @ w["w2"])
  np.testing.assert_allclose(got, x, rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks")
def test_disk_workloads_wait_for_each_other_instead_of_truncating_a_mapped_file():
  from scripts.workloads.files import exclusive_folder
  with exclusive_folder("process-replay-disk-views"):
    other = subprocess.Popen([sys.executable, "-m", "scripts.workloads", "--only", "disk_views", "--no-variants"],
                             cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
      with pytest.raises(subprocess.TimeoutExpired): other.wait(timeout=3)   # blocked on the folder's lock
    except BaseException:
      other.kill()
      raise
  out, _ = other.communicate(timeout=120)
  assert other.returncode == 0 and "1/1 workloads ok" in out, out


def test_the_bfloat16_mlp_computes_its_first_loss_in_bfloat16():
  from scheduler import Tensor
  from scheduler.dtype import bf16_to_float32, float32_to_bf16
  from scripts.workloads import models
  got = WORKLOADS["bf16_lars"]()
  Tensor.manual_seed(5)
  model = models.AutocastMLP()
  def bf16(a): return bf16_to_float32(float32_to_bf16(np.asarray(a, np.float32))).astype(np.float64)
  x, y = (t.numpy() for t in models._data(6, (32, 16), 4))
  w1, b1, w2, b2 = (t.numpy() for t in (model.l1.weight, model.l1.bias, model.l2.weight, model.l2.bias))
  hidden = bf16(np.maximum(bf16(bf16(x) @ bf16(w1).T) + bf16(b1), 0))   # each op rounded to bfloat16
  logits = bf16(bf16(hidden @ bf16(w2).T) + bf16(b2))
  shifted = logits - logits.max(1, keepdims=True)
  loss = -(shifted[np.arange(32), y] - np.log(np.exp(shifted).sum(1))).mean()
  # the compiler rounds each product to bfloat16 before summing: within bfloat16's precision of the float64 sums
  np.testing.assert_allclose(got["losses"][0], loss, rtol=2e-2)
  assert got["losses"][-1] < got["losses"][0] - 0.1


def test_the_lstm_language_model_computes_its_first_loss_as_numpy():
  from scheduler import Tensor
  from scripts.workloads import models
  got = WORKLOADS["lstm_bptt"]()
  Tensor.manual_seed(7)
  model = models.CharLSTM()
  tokens = np.random.default_rng(8).integers(0, 12, (4, models.LSTM_SEQUENCE + 1))
  table = model.emb.weight.numpy().astype(np.float64)
  w_ih, w_hh = model.cell.weight_ih.numpy().astype(np.float64), model.cell.weight_hh.numpy().astype(np.float64)
  w_out, b_out = model.head.weight.numpy().astype(np.float64), model.head.bias.numpy().astype(np.float64)
  def sigmoid(v): return 1 / (1 + np.exp(-v))
  h, c, losses = np.zeros((4, 16)), np.zeros((4, 16)), []
  for step in range(models.LSTM_SEQUENCE):
    i, f, g, o = np.split(table[tokens[:, step]] @ w_ih.T + h @ w_hh.T, 4, axis=1)   # torch's gate order
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    logits = h @ w_out.T + b_out
    shifted = logits - logits.max(1, keepdims=True)
    losses.append(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(4), tokens[:, step + 1]])
  np.testing.assert_allclose(got["losses"][0], np.mean(losses), rtol=1e-5)
  assert got["losses"][-1] < got["losses"][0]


def warp_by_numpy(image: np.ndarray, theta: np.ndarray) -> np.ndarray:
  """The bilinear warp of scripts/workloads/models.py, in float64."""
  size = image.shape[0]
  centre = (size - 1) / 2
  ys, xs = np.meshgrid(np.arange(size) - centre, np.arange(size) - centre, indexing="ij")
  grid = np.stack([xs.ravel(), ys.ravel(), np.ones(size * size)])
  x, y = np.clip(theta @ grid + centre, 0, size - 1.001)
  x0, y0 = np.floor(x), np.floor(y)
  wx, wy, flat, corner = x - x0, y - y0, image.ravel(), (y0 * size + x0).astype(int)
  top = flat[corner] * (1 - wx) + flat[corner + 1] * wx
  bottom = flat[corner + size] * (1 - wx) + flat[corner + size + 1] * wx
  return (top * (1 - wy) + bottom * wy).reshape(size, size)


def test_the_warp_registration_gradient_reaches_the_transform():
  # the gradient flows through the sampling weights x - floor(x) (floor has derivative 0) and around the gathers
  from scheduler import Tensor
  from scripts.fuzz.reference import central_difference
  from scripts.workloads import models
  got = WORKLOADS["warp_registration"]()
  image = np.random.default_rng(10).standard_normal((8, 8)).astype(np.float32).astype(np.float64)
  target = warp_by_numpy(image, np.array([[0.95, 0.1, 0.4], [-0.1, 1.05, -0.3]]))
  def loss(theta): return ((warp_by_numpy(image, theta) - target) ** 2).mean()
  start = np.array(models.WARP_START)
  np.testing.assert_allclose(got["losses"][0], loss(start), rtol=1e-5)
  theta = Tensor(start.astype(np.float32), requires_grad=True)
  (models.bilinear_warp(Tensor(image.astype(np.float32)), theta) - Tensor(target.astype(np.float32))).square().mean() \
    .backward()
  np.testing.assert_allclose(theta.grad.numpy(), central_difference(loss, start, 1e-7), rtol=2e-3, atol=1e-5)
  assert got["losses"][-1] < got["losses"][0]
