"""Neural-network functions on tensors: normalization, dropout, one-hot, attention, triangular masks, losses.

A mixin of `Tensor`, built from the other ops. `nn/` wraps some of these in layers with parameters.
"""
from __future__ import annotations
import math
from typing import Optional
from scheduler.dtype import dtypes, least_upper_dtype
from scheduler.helpers import argfix

REDUCTIONS = ("mean", "sum", "none")


class Functional:
  def _require_int(self, message: str) -> None:
    if not dtypes.is_int(self.dtype): raise RuntimeError(message)

  def layernorm(self, axis=-1, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance)."""
    centered = self - self.mean(axis, keepdim=True)
    variance = (centered * centered).mean(axis, keepdim=True)
    return centered.mul(variance.add(eps).rsqrt())

  def one_hot(self, num_classes: int = -1):
    self._require_int(f"expect integer dtype, getting self.dtype={self.dtype}")
    classes = num_classes if num_classes != -1 else (self.max() + 1).item()
    is_class = self.unsqueeze(-1)._one_hot_along_dim(classes)
    return is_class.where(1, 0)

  def _one_hot_along_dim(self, num_classes: int, dim: int = -1):
    """self == arange(num_classes) laid along `dim` (self broadcasts over it)."""
    self._require_int(f"_one_hot_along_dim expects int index tensor, getting {self.dtype}")
    after = self.ndim - 1 - self._resolve_dim(dim)
    labels = type(self).arange(num_classes, device=self.device,
                               requires_grad=False).reshape(num_classes, *([1] * after))
    return self == labels

  def dropout(self, p=0.5):
    """In training, zero each element with probability p and scale the rest by 1 / (1 - p)."""
    if p < 0 or p > 1: raise ValueError(f"p={p} is out of range [0, 1]")
    if p == 0 or not type(self).training: return self
    if p == 1: return self.zeros_like()
    draws = type(self).rand_like(self, requires_grad=False, dtype=dtypes.default_float, contiguous=False)
    return (draws >= p).contiguous().where(self, 0) / (1.0 - p)

  def scaled_dot_product_attention(self, key, value, attn_mask: Optional = None, dropout_p: float = 0.0,
                                   is_causal: bool = False):
    """softmax(q k^T / sqrt(d) + mask) v; a bool mask (or is_causal) keeps where True."""
    if is_causal and attn_mask is not None:
      raise RuntimeError("is_causal=True builds its own mask: give attn_mask or is_causal, not both")
    score_dtype = least_upper_dtype(self.dtype, key.dtype, dtypes.float32)
    scores = self.matmul(key.transpose(-2, -1), dtype=score_dtype) / math.sqrt(self.shape[-1])
    if is_causal:
      attn_mask = scores._band_mask(0, lower=True)   # the same values as ones(rows, cols).tril(), as a constant
    if attn_mask is not None:
      # a bool mask is broadcast before it becomes -inf/0, so that nothing smaller than the scores is computed and
      # expanded (which would realize it, S39): a causal mask then costs no kernel of its own
      bias = attn_mask.expand(scores.shape).where(0, -float("inf")) if attn_mask.dtype == dtypes.bool else attn_mask
      scores = scores + bias
    weights = scores.softmax(-1).cast(self.dtype).dropout(dropout_p)
    return weights @ value

  def _band_mask(self, diagonal: int, lower: bool):
    """Bool (rows, cols) mask of j - i <= diagonal (lower) or j - i >= diagonal (upper), from movement ops on a
    constant, so it costs no kernel of its own (the reference's two aranges cost one). A row w of `period`
    values is repeated and read with a row pitch of period - 1, so T[i, j] = w[j - i + rows - 1]."""
    rows, cols = self.shape[-2], self.shape[-1]
    pitch = max(rows + cols - 2, cols)   # j - i + rows - 1 stays in [0, pitch]: no wrap-around
    period = pitch + 1
    first_kept = min(max(diagonal + rows - 1, 0), period)      # upper: w[q] = 1 for q >= this
    last_kept = min(max(diagonal + rows, 0), period)           # lower: w[q] = 1 for q < this
    ones_at = (0, last_kept) if lower else (first_kept, period)
    make = type(self)
    if ones_at[0] == ones_at[1]: row = make.zeros(period, dtype=dtypes.bool, device=self.device, requires_grad=False)
    else:
      ones = make.ones(ones_at[1] - ones_at[0], dtype=dtypes.bool, device=self.device, requires_grad=False)
      row = ones.pad(((ones_at[0], period - ones_at[1]),))
    tiled = row.reshape(1, period).expand(rows + 1, period).flatten()
    window = tiled.shrink(((rows - 1, rows - 1 + rows * pitch),)).reshape(rows, pitch)
    return window.shrink((None, (0, cols)))

  def triu(self, diagonal: int = 0):
    if 0 in self.shape[-2:]: return self
    return self._band_mask(diagonal, lower=False).where(self, self.zeros_like())

  def tril(self, diagonal: int = 0):
    if 0 in self.shape[-2:]: return self
    return self._band_mask(diagonal, lower=True).where(self, self.zeros_like())

  # ***** losses *****

  @staticmethod
  def _reduce_loss(loss, reduction: str):
    if reduction not in REDUCTIONS: raise ValueError(f"reduction must be one of mean, sum, none, got {reduction!r}")
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss

  def binary_crossentropy(self, Y, reduction: str = "mean"):
    return self._reduce_loss(-Y * self.log() - (1 - Y) * (1 - self).log(), reduction)

  def binary_crossentropy_logits(self, Y, reduction: str = "mean", pos_weight=None):
    """The same loss on logits, in the form that does not overflow: max(x, 0) - x y + log(1 + exp(-|x|)). With
    `pos_weight` (broadcast against the classes) the positive term is weighted: p y softplus(-x) + (1 - y) softplus(x),
    where softplus(-x) = softplus(x) - x."""
    if pos_weight is not None:
      softplus = self.maximum(0) + (1 + self.abs().neg().exp()).log()
      return self._reduce_loss((1 - Y) * softplus + pos_weight * Y * (softplus - self), reduction)
    return self._reduce_loss(self.maximum(0) - Y * self + (1 + self.abs().neg().exp()).log(), reduction)

  def sparse_categorical_crossentropy(self, Y, ignore_index: int = -1, label_smoothing=0.0, reduction: str = "mean"):
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError("label_smoothing must be in [0.0, 1.0]")
    if reduction not in REDUCTIONS: raise ValueError("reduction must be one of ['mean', 'sum', 'none']")
    classes = self.shape[-1]
    log_probs = self.log_softmax()
    counted = Y.ones_like(dtype=dtypes.bool) if ignore_index == -1 else (Y != ignore_index)   # which samples count
    one_hot = Y.to(self.device).flatten().reshape(-1, 1)._one_hot_along_dim(classes)
    one_hot = (one_hot * counted.reshape(-1, 1)).reshape(*Y.shape, classes)
    picked = (log_probs * one_hot).sum(-1)
    per_sample = (1 - label_smoothing) * picked + label_smoothing * (log_probs.mean(-1) * counted)
    if reduction == "none": return -per_sample
    return -(per_sample.sum() / counted.sum()) if reduction == "mean" else -per_sample.sum()

  def nll_loss(self, Y, weight: Optional = None, ignore_index: Optional[int] = None, reduction: str = "mean"):
    """Negative log likelihood of class indices Y (N, ...) under log-probabilities self (N, C, ...), torch's
    semantics: -w[y] * self[n, y]; samples whose class is ignore_index count nothing; "mean" divides by the summed
    weights of the samples that count."""
    if reduction not in REDUCTIONS: raise ValueError(f"reduction must be one of mean, sum, none, got {reduction!r}")
    Y._require_int(f"nll_loss needs integer class indices, got {Y.dtype}")
    classes = self.shape[1]
    picks = Y.unsqueeze(1)._one_hot_along_dim(classes, dim=1)                  # (N, C, ...) True at the class
    class_weight = weight.reshape(1, classes, *([1] * (self.ndim - 2))) if weight is not None else 1
    per_class = picks.where(class_weight, 0)
    if ignore_index is not None: per_class = (Y != ignore_index).unsqueeze(1).where(per_class, 0)
    sample_weight = per_class.sum(1)
    loss = -(self * per_class).sum(1)
    if reduction == "none": return loss
    return loss.sum() / sample_weight.sum() if reduction == "mean" else loss.sum()

  def cross_entropy(self, Y, reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy of logits self (N, C, ...) against class indices (N, ...) or class probabilities (N, C, ...),
    with the target mixed toward uniform by label_smoothing (torch's semantics)."""
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError("label_smoothing must be in [0.0, 1.0]")
    if reduction not in REDUCTIONS: raise ValueError(f"reduction must be one of mean, sum, none, got {reduction!r}")
    classes = self.shape[1]
    target = Y.unsqueeze(1)._one_hot_along_dim(classes, dim=1).where(1.0, 0.0) if Y.ndim == self.ndim - 1 else Y
    target = target * (1 - label_smoothing) + label_smoothing / classes
    return self._reduce_loss(-(self.log_softmax(axis=1) * target).sum(1), reduction)

  def batchnorm(self, weight, bias, mean, invstd, axis=1):
    """(x - mean) * weight * invstd + bias, with the per-channel tensors broadcast along `axis`."""
    axes = argfix(axis)
    def channels(t): return t.reshape([extent if a in axes else 1 for a, extent in enumerate(self.shape)])
    out = self - channels(mean)
    if weight is not None: out = out * channels(weight)
    scale = channels(invstd) if len(axes) == invstd.ndim else invstd
    out = out.mul(scale)
    return out + channels(bias) if bias is not None else out
