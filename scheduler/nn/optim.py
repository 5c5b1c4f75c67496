"""Optimizers that update parameters in place with `assign`: SGD (momentum, nesterov, weight decay),
Adam and AdamW. `step()` realizes the updated parameters and the optimizer state together."""
from __future__ import annotations
from scheduler.tensor import Tensor
from scheduler.dtype import dtypes
from scheduler.helpers import dedup


class Optimizer:
  def __init__(self, params: list[Tensor], lr: float):
    for x in params:
      if x.requires_grad is None: x.requires_grad = True
    self.params: list[Tensor] = dedup([x for x in params if x.requires_grad])
    if not self.params: raise ValueError("optimizer got no parameters that require grad")
    self.buffers: list[Tensor] = dedup([x for x in params if not x.requires_grad])
    self.lr = Tensor([lr], requires_grad=False, dtype=dtypes.float32).contiguous().realize() if not isinstance(lr, Tensor) else lr

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def step(self) -> None: Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    if not Tensor.training: raise RuntimeError("Tensor.training is False; set it (or use Tensor.train()) before stepping an optimizer")
    missing = [i for i, p in enumerate(self.params) if p.grad is None]
    if missing: raise RuntimeError(f"parameters {missing} have no gradient; call backward() first")
    return self._update([p.grad for p in self.params]) + self.params + self.buffers

  def _update(self, grads: list[Tensor]) -> list[Tensor]: raise NotImplementedError


class SGD(Optimizer):
  def __init__(self, params: list[Tensor], lr=0.001, momentum=0.0, weight_decay=0.0, nesterov=False):
    super().__init__(params, lr)
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.b = [Tensor.zeros(*t.shape, dtype=t.dtype, device=t.device, requires_grad=False).contiguous() for t in self.params] if momentum else []

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    for i, (t, g) in enumerate(zip(self.params, grads)):
      g = g.contiguous() + self.wd * t.detach()
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      t.assign((t.detach() - g * self.lr).cast(t.dtype))
    return self.b


class AdamW(Optimizer):
  """Adam with decoupled weight decay; Adam is AdamW with weight_decay=0."""
  def __init__(self, params: list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd = b1, b2, eps, weight_decay
    self.b1_t, self.b2_t = (Tensor.ones((1,), dtype=dtypes.float32, requires_grad=False).contiguous() for _ in [b1, b2])
    self.m = [Tensor.zeros(*t.shape, dtype=dtypes.float32, device=t.device, requires_grad=False).contiguous() for t in self.params]
    self.v = [Tensor.zeros(*t.shape, dtype=dtypes.float32, device=t.device, requires_grad=False).contiguous() for t in self.params]

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    self.b1_t *= self.b1
    self.b2_t *= self.b2
    for i, (t, g) in enumerate(zip(self.params, grads)):
      self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      m_hat = self.m[i] / (1.0 - self.b1_t)
      v_hat = self.v[i] / (1.0 - self.b2_t)
      up = (m_hat / (v_hat.sqrt() + self.eps)) + self.wd * t.detach()
      t.assign((t.detach() - self.lr * up).cast(t.dtype))
    return [self.b1_t, self.b2_t] + self.m + self.v


def Adam(params: list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-8) -> AdamW: return AdamW(params, lr, b1, b2, eps, 0.0)
