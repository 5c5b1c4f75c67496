"""Gradients from the UOp rules against central finite differences (float64)."""
import numpy as np
import pytest
from scheduler import Tensor, dtypes, Device
from scripts.fuzz.reference import central_difference

rng = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def python_device():
  old = Device.DEFAULT
  Device.DEFAULT = "PYTHON"
  yield
  Device.DEFAULT = old


FUNCS = [
  ("sum_mul", lambda t: (t * t).sum()), ("exp_log", lambda t: (t.exp() + 1).log().sum()),
  ("relu", lambda t: (t.relu() * 3).sum()),
  ("sigmoid", lambda t: t.sigmoid().sum()), ("tanh", lambda t: t.tanh().mean()),
  ("sqrt", lambda t: (t * t + 1).sqrt().sum()),
  ("div", lambda t: (1 / (t * t + 1)).sum()), ("max", lambda t: t.max(1).sum()),
  ("softmax", lambda t: (t.softmax(1) * t).sum()),
  ("log_softmax", lambda t: t.log_softmax(1)[:, 1].sum()), ("matmul", lambda t: (t @ t.T).sum()),
  ("layernorm", lambda t: (t.layernorm() * t).sum()),
  ("pad_shrink_flip", lambda t: (t.pad(((1, 0), (0, 2))).flip(1)[1:, :3] * 2).sum()),
  ("permute_reshape", lambda t: (t.T.reshape(-1) * t.reshape(-1)).sum()),
  ("expand",
   lambda t: (t.reshape(3, 1, 4).expand(3, 2, 4) * t.reshape(1, 3, 4).expand(2, 3, 4).permute(1, 0, 2)).sum()),
  ("prod", lambda t: t.prod(0).sum()), ("sin", lambda t: t.sin().sum()),
  ("where", lambda t: (t > 0).where(t * 2, t * t).sum()),
  ("maximum", lambda t: t.maximum(t.flip(0)).sum()), ("cumsum", lambda t: t.cumsum(1).sum(0).max()),
  # the rest of the differentiable Tensor methods (issue 12.3)
  ("elu", lambda t: t.elu(0.5).sum()), ("mish", lambda t: t.mish().sum()), ("gelu", lambda t: t.gelu().sum()),
  ("quick_gelu", lambda t: t.quick_gelu().sum()), ("softplus", lambda t: t.softplus(2).sum()),
  ("swish", lambda t: t.swish().sum()),
  ("hardsigmoid", lambda t: (t * 2).hardsigmoid().sum()), ("relu6", lambda t: (t * 4).relu6().sum()),
  ("leakyrelu", lambda t: t.leakyrelu(0.2).sum()), ("abs", lambda t: (t.abs() * t).sum()),
  ("log2_exp2", lambda t: (t.exp2() + 1).log2().sum()),
  ("cos_tan", lambda t: (t.cos() + (t * 0.3).tan()).sum()), ("reciprocal", lambda t: (t * t + 1).reciprocal().sum()),
  ("pow_tensor", lambda t: ((t * t + 1) ** t).sum()), ("pow_const", lambda t: (t ** 3).sum()),
  ("rsqrt", lambda t: (t * t + 1).rsqrt().sum()),
  ("mean_var_std", lambda t: t.mean(1).sum() + t.var(0).sum() + t.std(1).sum()),
  ("logsumexp", lambda t: t.logsumexp(1).sum()),
  ("minimum_clip", lambda t: t.minimum(t.flip(1)).sum() + t.clip(-0.5, 0.5).sum()),
  ("cummax", lambda t: t.cummax(1).sum()),
  ("triu_tril", lambda t: (t.triu(1) * 2 + t.tril()).sum()), ("masked_fill", lambda t: t.masked_fill(t > 0, 0.0).sum()),
  ("cat_stack_repeat", lambda t: (t.cat(t * 2, dim=1).sum() + t.stack(t).sum(0).max() + t.repeat(2, 1).mean())),
  ("gather", lambda t: t.gather(1, Tensor([[0, 3], [1, 1], [2, 0]])).sum()),
  ("avg_max_pool",
   lambda t: t.reshape(1, 1, 3, 4).avg_pool2d(2, stride=1).sum() + t.reshape(1, 1, 3, 4).max_pool2d(2, stride=1).sum()),
  ("conv2d", lambda t: t.reshape(1, 1, 3, 4).conv2d(t[:2, :2].reshape(1, 1, 2, 2), padding=1).sum()),
  ("crossentropy",
   lambda t: t.sparse_categorical_crossentropy(Tensor([1, 0, 3])) + t.sigmoid().binary_crossentropy((t > 0).float())),
  ("attention",
   lambda t: t.reshape(1, 3, 4).scaled_dot_product_attention(t.reshape(1, 3, 4), t.reshape(1, 3, 4),
                                                             is_causal=True).sum()),
  ("getitem_tensor", lambda t: t[Tensor([2, 0])].sum() + t[:, Tensor([1, 3])].sum()),
  ("batchnorm", lambda t: t.reshape(1, 3, 4).batchnorm(t[:, 0], t[:, 1], t[:, 2], t[:, 3].abs() + 1).sum()),
  ("bce_logits_linear", lambda t: t.linear(t.T, t[0, :3]).binary_crossentropy_logits(Tensor.ones(3, 3) * 0.3)),
  ("bce_logits_pos_weight", lambda t: (t * 3).binary_crossentropy_logits(Tensor.ones(3, 4) * 0.7,
                                                                          pos_weight=Tensor([2.0, 0.5, 1.0, 3.0]))),
  # issue 17's operations
  ("asin_acos_atan", lambda t: ((t * 0.3).asin() * 2 + (t * 0.3).acos() + (t * 3).atan()).sum()),
  ("sinh_cosh", lambda t: (t.sinh() * 2 + t.cosh()).sum()),
  ("asinh_acosh_atanh", lambda t: ((t * 4).asinh() + (t * t + 1.5).acosh() + (t * 0.3).atanh()).sum()),
  ("nll_loss",
   lambda t: t.log_softmax(1).nll_loss(Tensor([1, 0, 3]), weight=Tensor([1.0, 2.0, 0.5, 1.0], dtype=dtypes.float64),
                                       ignore_index=0)),
  ("cross_entropy",
   lambda t: t.cross_entropy(Tensor([2, 0, 3]), label_smoothing=0.2)
             + t.cross_entropy(Tensor([[0.1, 0.2, 0.3, 0.4]] * 3, dtype=dtypes.float64), reduction="sum")),
  ("einsum", lambda t: Tensor.einsum("ij,kj->ik", t, t * 2).sum() + Tensor.einsum("ii->i", t[:, :3]).sum()),
  ("interpolate",
   lambda t: (t.reshape(1, 1, 3, 4).interpolate((5, 7), align_corners=True)
              * Tensor.arange(35, dtype=dtypes.float64).reshape(5, 7)).sum()),
  ("conv_transpose2d",
   lambda t: (t.reshape(1, 1, 3, 4).conv_transpose2d(t[:2, :3].reshape(1, 1, 2, 3), stride=2, padding=1) ** 2).sum()),
  # rounding is piecewise constant (derivative 0, as finite differences see it); a comparison cast to float carries none
  ("rounding", lambda t: ((t * 3).round() * t + (t * 3).floor() * (t * 3).ceil() + (t * 3).trunc() * t).sum()),
  ("comparison_cast", lambda t: ((t > 0).float() * t * t + (t < 0.5).cast(dtypes.float64).sum() * t).sum()),
  # the orderings, scans and scatters of tinygrad's API
  ("sort_topk", lambda t: (t.sort(1)[0] * Tensor.arange(4, dtype=dtypes.float64)).sum() + t.topk(2, 0)[0].sum() * 3),
  ("cumprod_logcumsumexp", lambda t: (t.cumprod(1) * 2 + t.logcumsumexp(0)).sum()),
  ("scatter_reduce",
   lambda t: Tensor.ones(3, 4, dtype=dtypes.float64).scatter_reduce(1, Tensor([[0, 3], [1, 2], [2, 0]]), t[:, :2] * 2,
                                                                    "prod").sum()
             + t.scatter_reduce(1, Tensor([[0, 3], [1, 1], [2, 0]]), t[:, 2:] ** 2, "mean").sum()
             + t.scatter_reduce(1, Tensor([[0, 3], [1, 2], [2, 0]]), t[:, 1:3] * 2, "amax").sum()),
  ("roll_pad_modes", lambda t: (t.roll(2, 1) * t + t.pad((1, 2, 1, 1), mode="reflect").sum()
                                + t.pad((2, 1, 0, 1), mode="replicate").square().sum()
                                + t.pad((1, 1, 1, 0), mode="circular")[0].sum()).sum()),
  ("unfold_repeat_interleave", lambda t: (t.unfold(1, 2, 1) ** 2).sum() + t.repeat_interleave(2, 0)[1:].sum() * 2),
  ("max_unpool_masked_select",
   lambda t: (Tensor.max_unpool2d(*t.reshape(1, 1, 3, 4).max_pool2d(2, return_indices=True), 2) * 3).sum()
             + t.masked_select(Tensor(np.arange(12).reshape(3, 4) % 3 == 0)).square().sum()),
]


@pytest.mark.parametrize("name,f", FUNCS, ids=[f[0] for f in FUNCS])
def test_gradient_matches_finite_differences(name, f):
  x = rng.standard_normal((3, 4))
  t = Tensor(x, dtype=dtypes.float64, requires_grad=True)
  f(t).backward()
  expected = central_difference(lambda v: f(Tensor(v, dtype=dtypes.float64)).numpy().item(), x)
  np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_gradient_of_two_targets_and_accumulation():
  x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
  tx, tw = Tensor(x, dtype=dtypes.float64, requires_grad=True), Tensor(w, dtype=dtypes.float64, requires_grad=True)
  gx, gw = ((tx @ tw) ** 2).sum().gradient(tx, tw)
  np.testing.assert_allclose(gw.numpy(), central_difference(lambda v: (((x @ v) ** 2).sum()), w), rtol=1e-5)
  np.testing.assert_allclose(gx.numpy(), central_difference(lambda v: (((v @ w) ** 2).sum()), x), rtol=1e-5)
  (tx.sum() * 2).backward(); (tx.sum() * 3).backward()
  np.testing.assert_allclose(tx.grad.numpy(), np.full((2, 3), 5.0))


def test_backward_needs_a_scalar_and_a_grad_target():
  t = Tensor(rng.standard_normal((2, 2)), requires_grad=True)
  with pytest.raises(RuntimeError, match="scalar"): (t * 2).backward()
  with pytest.raises(RuntimeError, match="no tensor with requires_grad"): Tensor([1.0, 2.0]).sum().backward()


@pytest.mark.parametrize("name,f", FUNCS, ids=[f[0] for f in FUNCS])
def test_gradient_through_a_realized_result(name, f):
  # the reference's own op tests realize the result, then take the gradient of (ret + 1)^2 through it
  x = rng.standard_normal((3, 4))
  t = Tensor(x, dtype=dtypes.float64, requires_grad=True)
  ret = f(t).realize()
  ((ret + 1) ** 2).sum().backward()
  expected = central_difference(lambda v: ((f(Tensor(v, dtype=dtypes.float64)).numpy().item() + 1) ** 2), x)
  np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_gradient_through_chains_of_realizes_and_reads():
  w = Tensor([1.0, 2.0], dtype=dtypes.float64, requires_grad=True)
  a = (w * 2).realize()
  b = a.exp()
  b.numpy()   # reading realizes b (and what it needs)
  b.roll(1, 0).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), 2 * np.exp([2.0, 4.0]))
  np.testing.assert_allclose(a.grad.numpy(), np.exp([2.0, 4.0]))


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_training_that_reads_its_loss_before_backward(optimizer):
  # a parameter made lazily (as layers make theirs) becomes its update's graph at the first step and is a leaf again
  # after it (the gradient is not taken through the update); Adam keeps float64 moments for float64 parameters
  from scheduler.nn.optim import SGD, Adam
  w = Tensor.ones(2, dtype=dtypes.float64) * Tensor([1.0, 2.0], dtype=dtypes.float64)
  opt = SGD([w], lr=0.1, momentum=0.9) if optimizer == "SGD" else Adam([w], lr=0.1)
  want, m, v = np.array([1.0, 2.0]), np.zeros(2), np.zeros(2)
  with Tensor.train():
    for step in range(1, 4):
      opt.zero_grad()
      loss = (w * w * w).sum()
      loss.realize()   # read before the gradient is taken, as a training loop that prints its loss does
      loss.backward()
      opt.step()
      g = 3 * want ** 2
      if optimizer == "SGD":
        m = 0.9 * m + g
        want = want - 0.1 * m
      else:
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        want = want - 0.1 * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-5)   # the learning rate and Adam's b^t are float32 tensors
