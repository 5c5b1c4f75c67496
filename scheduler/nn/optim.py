"""Optimizers that update parameters in place with `assign`: SGD (momentum, nesterov, weight decay), LARS,
Adam, AdamW and LAMB; `OptimizerGroup` steps several as one. `step()` realizes the updated parameters and the
optimizer's state in one schedule.

Update rules (g the gradient, lr the learning rate, t the step count):
- SGD: g += wd * w; with momentum b = mu * b + g and g = b (nesterov: g = g + mu * b); w -= lr * g.
- LARS: SGD whose step is scaled per parameter by the trust ratio r = tcoef * ||w|| / (||g|| + wd * ||w||) (1 when
  either norm is 0). `classic` (LARS's default) scales g by r * lr before the momentum, else after it.
- AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  w -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * w).
  Adam is AdamW without weight decay.
- LAMB: AdamW's step u = m_hat / (sqrt(v_hat) + eps) + wd * w scaled by the trust ratio ||w|| / ||u|| (1 when
  either norm is 0): w -= lr * ||w|| / ||u|| * u.
"""
from __future__ import annotations
from scheduler.tensor import Tensor
from scheduler.dtype import dtypes, least_upper_dtype
from scheduler.helpers import dedup
from scheduler.tensor.base import places_tensors


def _state_like(t: Tensor, dtype=None) -> Tensor:
  """A zero-filled optimizer state tensor shaped like parameter t."""
  return Tensor.zeros(*t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=False).contiguous()


class Optimizer:
  """Holds the trainable parameters (requires_grad not False) and the other tensors handed in (`buffers`,
  realized with each step). Subclasses implement `_update`."""
  @places_tensors
  def __init__(self, params: list[Tensor], lr: float):
    trainable = [p.requires_grad is not False for p in params]
    for p, train in zip(params, trainable):
      if train and p.requires_grad is None: p.requires_grad = True
    self.params: list[Tensor] = dedup(p for p, train in zip(params, trainable) if train)
    if not self.params: raise ValueError("optimizer got no parameters that require grad")
    self.buffers: list[Tensor] = dedup(p for p, train in zip(params, trainable) if not train)
    self.device = self.params[0].device   # the state lives where the parameters do
    if not isinstance(lr, Tensor):
      lr = Tensor([lr], dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous().realize()
    self.lr = lr

  @places_tensors
  def schedule_step(self) -> list[Tensor]:
    """The tensors one step writes (state, parameters, buffers), unrealized."""
    if not Tensor.training:
      raise RuntimeError("Tensor.training is False; set it (or use Tensor.train()) before stepping an optimizer")
    grads = [p.grad for p in self.params]
    if any(g is None for g in grads):
      raise RuntimeError(f"parameters {[i for i, g in enumerate(grads) if g is None]} have no gradient; call "
                         f"backward() first")
    return [*self._update(grads), *self.params, *self.buffers]

  def step(self) -> None:
    Tensor.realize(*self.schedule_step())

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    """Assign the new parameter values; return the state tensors the step also writes."""
    raise NotImplementedError


class SGD(Optimizer):
  """SGD, and LARS when `tcoef` is not 0 (see the module docstring)."""
  @places_tensors
  def __init__(self, params: list[Tensor], lr=0.001, momentum=0.0, weight_decay=0.0, nesterov=False, classic=False,
               tcoef=0.0):
    self.nesterov, self.momentum, self.wd, self.classic, self.tcoef = nesterov, momentum, weight_decay, classic, tcoef
    Optimizer.__init__(self, params, lr)
    # velocities start as the constant 0 (no kernel): the first step's assign replaces that graph, and the schedule
    # then realizes the velocity together with the gradient it equals, as the reference does (9 kernels for a
    # nesterov step over 2 convs rather than 13)
    self.b = [Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device, requires_grad=False) for p in self.params] \
      if momentum else []

  def _trust_ratio(self, w: Tensor, g: Tensor):
    weight_norm, grad_norm = w.square().sum().sqrt(), g.square().sum().sqrt()
    both = (weight_norm > 0) & (grad_norm > 0)
    return both.where(self.tcoef * weight_norm / (grad_norm + self.wd * weight_norm), 1.0)

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    velocities = self.b or [None] * len(self.params)
    for w, g, velocity in zip(self.params, grads, velocities):
      scale = self.lr if self.tcoef == 0 else self._trust_ratio(w.detach(), g) * self.lr
      step = g + self.wd * w.detach()
      if self.classic: step = step * scale
      if velocity is not None:
        velocity.assign(self.momentum * velocity + step)
        step = step + self.momentum * velocity if self.nesterov else velocity
      if not self.classic: step = step * scale
      w.assign((w.detach() - step).cast(w.dtype))
    return self.b


def LARS(params: list[Tensor], lr=0.001, momentum=0.9, weight_decay=1e-4, nesterov=False, classic=True,
         tcoef=0.001) -> SGD:
  """Layer-wise adaptive rate scaling (You et al., 2017): SGD with momentum whose step is scaled per parameter."""
  return SGD(params, lr, momentum, weight_decay, nesterov, classic, tcoef)


class AdamW(Optimizer):
  """Adam with decoupled weight decay; Adam is AdamW with weight_decay=0."""
  trust_ratio = False   # LAMB's layer-wise scaling of the step

  @places_tensors
  def __init__(self, params: list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
    self.wd, self.eps, self.b1, self.b2 = weight_decay, eps, b1, b2
    Optimizer.__init__(self, params, lr)
    # b1^t and b2^t, kept as tensors so that the step count lives on the device
    self.b1_t = Tensor.ones((1,), dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous()
    self.b2_t = Tensor.ones((1,), dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous()
    # moments in float32, or in the parameter's dtype when it is wider (float64 parameters got float32 moments, and the
    # float64 gradient could not be assigned into them)
    self.m = [_state_like(p, least_upper_dtype(p.dtype, dtypes.float32)) for p in self.params]
    self.v = [_state_like(p, least_upper_dtype(p.dtype, dtypes.float32)) for p in self.params]

  def _update(self, grads: list[Tensor]) -> list[Tensor]:
    self.b1_t *= self.b1
    self.b2_t *= self.b2
    for w, g, m, v in zip(self.params, grads, self.m, self.v):
      m.assign(self.b1 * m + (1.0 - self.b1) * g)
      v.assign(self.b2 * v + (1.0 - self.b2) * (g * g))
      m_hat, v_hat = m / (1.0 - self.b1_t), v / (1.0 - self.b2_t)
      direction = m_hat / (v_hat.sqrt() + self.eps) + self.wd * w.detach()
      if self.trust_ratio:
        weight_norm, step_norm = w.detach().square().sum().sqrt(), direction.square().sum().sqrt()
        both = (weight_norm > 0) & (step_norm > 0)
        direction = direction * both.where(weight_norm / step_norm, 1.0)
      w.assign((w.detach() - self.lr * direction).cast(w.dtype))
    return [self.b1_t, self.b2_t, *self.m, *self.v]


def Adam(params: list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-8) -> AdamW:
  return AdamW(params, lr, b1, b2, eps, weight_decay=0.0)


class LAMB(AdamW):
  """AdamW whose step is scaled per parameter by ||w|| / ||step|| (You et al., 2019)."""
  trust_ratio = True

  @places_tensors
  def __init__(self, params: list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0):
    super().__init__(params, lr, b1, b2, eps, weight_decay)


class OptimizerGroup:
  """Several optimizers stepped as one: `step()` realizes all their updates in one schedule."""
  def __init__(self, *optimizers: Optimizer):
    if not optimizers: raise ValueError("OptimizerGroup needs at least one optimizer")
    self.optimizers = list(optimizers)
    self.params = [p for o in self.optimizers for p in o.params]
    self.buffers = [b for o in self.optimizers for b in o.buffers]

  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]

  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]

  def step(self) -> None:
    Tensor.realize(*self.schedule_step())

  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
