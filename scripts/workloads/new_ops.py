"""Workloads of the corpus that use the operations added for tinygrad API completeness (issues 17 and 28): an
upsampling decoder (conv_transpose2d, interpolate, reflect padding), attention written with einsum, a classifier
trained with nll_loss and cross_entropy options, evaluation metrics (topk, sort, scatter, unfold, an einsum with
an ellipsis), and a segmentation step (bilinear upsampling, void pixels). Fixed seeds, small shapes."""
from __future__ import annotations
import numpy as np
from scheduler import Tensor, nn
from scheduler.nn.optim import SGD, Adam
from scheduler.nn.state import get_parameters
from replay import replay_location


def upsampling_decoder(steps: int = 3) -> dict:
  """A decoder from a 4x4 code to an 8x8 image: transposed convolution, bilinear and nearest upsampling, a
  reflect-padded convolution; a few Adam steps toward a target image."""
  Tensor.manual_seed(11)
  rng = np.random.default_rng(12)
  code = Tensor(rng.standard_normal((2, 4, 4, 4)).astype(np.float32)).realize()
  target = Tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32)).realize()
  up_w = Tensor.kaiming_uniform(4, 3, 2, 2).realize()       # (cin, cout, k, k) for conv_transpose2d
  refine = nn.Conv2d(3, 1, 3)
  params = [up_w.requires_grad_(), *get_parameters(refine)]
  opt = Adam(params, lr=0.01, eps=1e-5)

  def decode(z: Tensor) -> Tensor:
    coarse = z.conv_transpose2d(up_w, stride=2).relu()                                      # 4x4 -> 8x8
    smooth = coarse.interpolate((16, 16), mode="bilinear", align_corners=False).interpolate((8, 8), mode="nearest")
    return refine(smooth.pad((1, 1, 1, 1), mode="reflect")).tanh()

  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = ((decode(code) - target) ** 2).mean()
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  return {"outputs": [decode(code).numpy(), up_w.numpy()], "losses": losses}


def einsum_attention() -> dict:
  """Multi-head attention written with einsum (scores, weighted values, output projection), causal by a mask."""
  rng = np.random.default_rng(13)
  x = Tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)).realize()
  wq, wk, wv = (Tensor(rng.standard_normal((8, 2, 4)).astype(np.float32) * 0.3).realize() for _ in range(3))
  wo = Tensor(rng.standard_normal((2, 4, 8)).astype(np.float32) * 0.3).realize()
  q, k, v = (Tensor.einsum("btd,dhe->bhte", x, w) for w in (wq, wk, wv))
  scores = Tensor.einsum("bhqe,bhke->bhqk", q, k) / 2.0
  causal = Tensor.ones(5, 5).tril().bool()
  weights = causal.where(scores, -float("inf")).softmax(-1)
  out = Tensor.einsum("bhqk,bhke,hed->bqd", weights, v, wo)
  trace = Tensor.einsum("ii", Tensor.einsum("bqd,bkd->qk", out, out))
  return {"outputs": [out.numpy(), weights.numpy(), trace.numpy()]}


def nll_classifier(steps: int = 4) -> dict:
  """A linear classifier trained with nll_loss over log-softmax (class weights, an ignored label), then scored
  with cross_entropy (label smoothing; class probabilities as the target)."""
  Tensor.manual_seed(14)
  rng = np.random.default_rng(15)
  x = Tensor(rng.standard_normal((16, 6)).astype(np.float32)).realize()
  labels = rng.integers(0, 4, 16)
  labels[::5] = 3   # some samples carry the ignored label
  y = Tensor(labels.astype(np.int32)).realize()
  class_weight = Tensor([1.0, 2.0, 0.5, 1.0]).realize()
  model = nn.Linear(6, 4)
  opt = SGD(get_parameters(model), lr=0.5, momentum=0.5)
  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = model(x).log_softmax(1).nll_loss(y, weight=class_weight, ignore_index=3)
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  logits = model(x)
  scores = [logits.cross_entropy(y, label_smoothing=0.1).numpy(),
            logits.cross_entropy(logits.softmax(1), reduction="none").numpy()]
  return {"outputs": [model.weight.numpy(), *scores], "losses": losses}


def multilabel_tagger(steps: int = 5) -> dict:
  """A multi-label tagger: a two-layer MLP gives 5 independent tags per sample, trained with binary cross-entropy on
  logits where each tag's positives are weighted by how rare they are (`pos_weight` = negatives / positives, as
  imbalanced multi-label training sets it), with Adam; then the per-tag loss of every sample and the predicted tags."""
  Tensor.manual_seed(16)
  rng = np.random.default_rng(17)
  features = rng.standard_normal((24, 10)).astype(np.float32)
  rates = np.array([0.5, 0.25, 0.15, 0.1, 0.3])   # how often each tag is on
  tags = (rng.random((24, 5)) < rates).astype(np.float32)
  tags[0] = 1.0   # every tag has a positive
  x, y = Tensor(features).realize(), Tensor(tags).realize()
  positives = tags.sum(0)
  pos_weight = Tensor(((len(tags) - positives) / positives).astype(np.float32)).realize()
  hidden, head = nn.Linear(10, 16), nn.Linear(16, 5)
  opt = Adam(get_parameters(hidden) + get_parameters(head), lr=0.02)

  def logits(z: Tensor) -> Tensor: return head(hidden(z).relu())

  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = logits(x).binary_crossentropy_logits(y, pos_weight=pos_weight)
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  final = logits(x)
  per_tag = final.binary_crossentropy_logits(y, reduction="none", pos_weight=pos_weight)
  return {"outputs": [hidden.weight.numpy(), hidden.bias.numpy(), head.weight.numpy(), head.bias.numpy(),
                      per_tag.numpy(), (final > 0).numpy(), pos_weight.numpy()], "losses": losses}


def ranking_eval() -> dict:
  """Scoring a classifier the way evaluation code does: top-5 accuracy (topk), the ranking of every score (sort), a
  histogram of the predicted classes (scatter with add), and moving-window features of a signal (unfold) weighted
  with an einsum over the leading axes (`...`)."""
  rng = np.random.default_rng(16)
  scores = Tensor(rng.standard_normal((8, 12)).astype(np.float32)).realize()
  labels = Tensor(rng.integers(0, 12, 8).astype(np.int32)).realize()
  _, top5 = scores.topk(5, dim=1)
  top5_accuracy = (top5 == labels.unsqueeze(1)).any(1).float().mean()
  ranked, order = scores.sort(1, descending=True)
  predicted = order[:, :1].reshape(1, 8)
  histogram = Tensor.zeros(1, 12).contiguous().scatter(1, predicted, 1.0, reduce="add")
  signal = Tensor(rng.standard_normal((8, 16)).astype(np.float32)).realize()
  taps = Tensor([0.25, 0.5, 0.25, -0.1]).realize()
  features = Tensor.einsum("...w,w->...", signal.unfold(1, 4, 2), taps)
  Tensor.realize(top5_accuracy, ranked, order, histogram, features)
  return {"outputs": [top5_accuracy.numpy(), ranked.numpy(), order.numpy(), histogram.numpy(), features.numpy()]}


def segmentation_sgd(steps: int = 3) -> dict:
  """A semantic segmentation step as such code is written: an encoder-decoder with a skip connection (padded
  convolutions, max pooling, bilinear upsampling with align_corners=True as older segmentation code does), per-pixel
  cross-entropy that ignores void pixels (label 255, as Pascal VOC and Cityscapes mark them), SGD with momentum."""
  Tensor.manual_seed(16)
  rng = np.random.default_rng(17)
  image = Tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32)).realize()
  labels = rng.integers(0, 3, (2, 8, 8))
  labels[:, :, :2] = 255   # a void border
  labels[0, 5:, 3:6] = 255
  target = Tensor(labels.astype(np.int32)).realize()
  encode, deeper, head = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 6, 3, padding=1), nn.Conv2d(10, 3, 1)
  opt = SGD(get_parameters([encode, deeper, head]), lr=0.2, momentum=0.9)

  def logits(x: Tensor) -> Tensor:
    skip = encode(x).relu()                                                         # 8x8
    coarse = deeper(skip.max_pool2d(2)).relu()                                      # 4x4
    up = coarse.interpolate((8, 8), mode="bilinear", align_corners=True)
    return head(skip.cat(up, dim=1)).permute(0, 2, 3, 1)                            # (n, h, w, classes)

  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = logits(image).sparse_categorical_crossentropy(target, ignore_index=255)
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  scores = logits(image)
  return {"outputs": [scores.numpy(), scores.argmax(-1).numpy(), head.weight.numpy()], "losses": losses}
