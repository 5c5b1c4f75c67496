"""The model workloads of the corpus: fixed seeds, small shapes."""
from __future__ import annotations
import os
import numpy as np
from scheduler import Tensor, Variable, dtypes, nn
from scheduler.nn.optim import LARS, SGD, Adam, AdamW
from scheduler.nn.state import get_parameters, get_state_dict, safe_save, safe_load, load_state_dict
from replay import replay_location
from scripts.workloads.files import exclusive_folder


def _data(seed: int, shape, classes: int):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape).astype(np.float32)
  y = rng.integers(0, classes, shape[0]).astype(np.int32)
  return Tensor(x).realize(), Tensor(y).realize()


class MLP:
  def __init__(self, sizes=(16, 32, 4)):
    self.l1, self.l2 = nn.Linear(sizes[0], sizes[1]), nn.Linear(sizes[1], sizes[2])
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())


def train(model, opt, x: Tensor, y: Tensor, steps: int) -> list[float]:
  """Training steps; each realizes its loss together with the update, so the loss is the one before the step."""
  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  return losses


def mlp_sgd(steps: int = 5) -> dict:
  """A 2-layer MLP trained for a few SGD steps (nesterov momentum, weight decay) on synthetic data."""
  Tensor.manual_seed(1)
  model = MLP()
  x, y = _data(0, (32, 16), 4)
  losses = train(model, SGD(get_parameters(model), lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True), x, y, steps)
  return {"outputs": [model.l1.weight.numpy(), model(x).numpy()], "losses": losses}


class AutocastMLP(MLP):
  """The MLP computed in bfloat16 on float32 master weights, as mixed-precision training runs it: inputs and weights
  cast down for the matmuls, the logits cast back up for the loss."""
  def __call__(self, x: Tensor) -> Tensor:
    def linear(layer, h): return h.linear(layer.weight.cast(dtypes.bfloat16).T, layer.bias.cast(dtypes.bfloat16))
    hidden = linear(self.l1, x.cast(dtypes.bfloat16)).relu()
    return linear(self.l2, hidden).cast(dtypes.float32)


def bf16_lars(steps: int = 4) -> dict:
  """A 2-layer MLP whose forward and backward run in bfloat16 on float32 master weights, trained with LARS (momentum,
  weight decay, a per-layer trust ratio)."""
  Tensor.manual_seed(5)
  model = AutocastMLP()
  x, y = _data(6, (32, 16), 4)
  losses = train(model, LARS(get_parameters(model), lr=2.0, momentum=0.9, weight_decay=1e-4, tcoef=0.02), x, y, steps)
  return {"outputs": [model.l1.weight.numpy(), model.l2.bias.numpy(), model(x).numpy()], "losses": losses}


class CharLSTM:
  """A character-level language model: an embedding, an LSTM cell unrolled over the sequence, a linear head."""
  def __init__(self, vocab=12, embed=8, hidden=16):
    self.emb, self.cell, self.head = nn.Embedding(vocab, embed), nn.LSTMCell(embed, hidden), nn.Linear(hidden, vocab)

  def __call__(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """Logits of each next token (batch, steps, vocab) and the last hidden state."""
    state, logits = None, []
    for step in range(tokens.shape[1]):
      state = self.cell(self.emb(tokens[:, step]), state)
      logits.append(self.head(state[0]))
    return Tensor.stack(*logits, dim=1), state[0]


LSTM_SEQUENCE = 6


def lstm_bptt(steps: int = 2) -> dict:
  """A character-level LSTM language model unrolled over 6 steps, trained with Adam by backpropagation through time
  on random sequences of 12 symbols."""
  Tensor.manual_seed(7)
  model = CharLSTM()
  tokens = Tensor(np.random.default_rng(8).integers(0, 12, (4, LSTM_SEQUENCE + 1)).astype(np.int32)).realize()
  opt, losses = Adam(get_parameters(model), lr=0.03), []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        logits, last = model(tokens[:, :-1])
        loss = logits.sparse_categorical_crossentropy(tokens[:, 1:])
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  return {"outputs": [model.head.weight.numpy(), last.numpy()], "losses": losses}


WARP_SIZE = 8
# near the identity but off the pixel grid: at whole-pixel coordinates bilinear sampling has a kink
WARP_START = [[1.0, 0.02, 0.13], [-0.03, 1.0, -0.07]]


def bilinear_warp(image: Tensor, theta: Tensor) -> Tensor:
  """`image` (H, W) sampled at the affine transform `theta` (2x3, pixel units about the centre) of its own pixel grid,
  by bilinear interpolation written out as users write it: floor for the corner, the fraction for the weights, gathers
  of the four corners (coordinates clamped to the image)."""
  size = image.shape[0]
  centre = (size - 1) / 2
  ys, xs = Tensor.meshgrid(Tensor.arange(size).float() - centre, Tensor.arange(size).float() - centre)
  grid = Tensor.stack(xs.flatten(), ys.flatten(), Tensor.ones(size * size))   # (3, H*W)
  x, y = ((theta @ grid) + centre).clip(0, size - 1.001)                       # source coordinates
  x0, y0 = x.floor(), y.floor()
  wx, wy = x - x0, y - y0
  flat, corner = image.flatten(), (y0 * size + x0).cast(dtypes.int32)
  def at(offset: int) -> Tensor: return flat.gather(0, corner + offset)
  top = at(0) * (1 - wx) + at(1) * wx
  bottom = at(size) * (1 - wx) + at(size + 1) * wx
  return (top * (1 - wy) + bottom * wy).reshape(size, size)


def warp_registration(steps: int = 3) -> dict:
  """Image registration as spatial-transformer code does it: an affine warp of an 8x8 image by bilinear sampling,
  its 2x3 parameters fitted by SGD to a target (the gradient reaches them through the sampling weights)."""
  rng = np.random.default_rng(10)
  image = Tensor(rng.standard_normal((WARP_SIZE, WARP_SIZE)).astype(np.float32)).realize()
  target = bilinear_warp(image, Tensor([[0.95, 0.1, 0.4], [-0.1, 1.05, -0.3]])).realize()
  theta = Tensor(WARP_START, requires_grad=True)
  opt, losses = SGD([theta], lr=0.02, momentum=0.5), []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = (bilinear_warp(image, theta) - target).square().mean()
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  return {"outputs": [theta.numpy(), bilinear_warp(image, theta).numpy()], "losses": losses}


class CNN:
  def __init__(self):
    # no conv bias: batchnorm cancels it, its gradient is rounding noise, and Adam would amplify that noise
    self.conv, self.bn, self.fc = nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm(4), nn.Linear(4 * 3 * 3, 3)
  def __call__(self, x: Tensor) -> Tensor:
    return self.fc(self.bn(self.conv(x)).relu().max_pool2d().reshape(x.shape[0], -1))


def cnn_adam(steps: int = 4) -> dict:
  """A small CNN (conv, batchnorm, max-pool, linear) trained for a few Adam steps."""
  Tensor.manual_seed(2)
  model = CNN()
  x, y = _data(3, (8, 1, 8, 8), 3)
  losses = train(model, Adam(get_parameters(model), lr=0.01, eps=1e-5), x, y, steps)
  with Tensor.train(False): evaluated = model(x).numpy()
  return {"outputs": [model.conv.weight.numpy(), model.bn.running_mean.numpy(), evaluated], "losses": losses}


class Block:
  def __init__(self, vocab=11, dim=16, heads=2, seq=6):
    self.emb, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.fc1, self.fc2, self.head = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.Linear(dim, vocab)
    self.heads, self.dim = heads, dim

  def __call__(self, idx: Tensor) -> Tensor:
    b, t = idx.shape
    x = self.emb(idx) + self.pos(Tensor.arange(t).reshape(1, t))
    q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, self.dim // self.heads).permute(2, 0, 3, 1, 4).chunk(3)
    att = q.squeeze(0).scaled_dot_product_attention(k.squeeze(0), v.squeeze(0), is_causal=True)
    x = x + self.proj(att.permute(0, 2, 1, 3).reshape(b, t, self.dim))
    x = x + self.fc2(self.fc1(self.ln2(x)).gelu())
    return self.head(x)


def transformer_adamw() -> dict:
  """A transformer block (embedding, causal attention, layernorm, MLP): forward and one AdamW step."""
  Tensor.manual_seed(4)
  model = Block()
  rng = np.random.default_rng(5)
  idx = Tensor(rng.integers(0, 11, (2, 6)).astype(np.int32)).realize()
  tgt = Tensor(rng.integers(0, 11, (2, 6)).astype(np.int32)).realize()
  # eps well above rounding noise: some gradients here are exactly zero in real arithmetic (the first position
  # attends only to itself), and Adam would turn their rounding noise into full-size steps
  opt = AdamW(get_parameters(model), lr=0.01, eps=1e-5)
  with Tensor.train():
    logits = model(idx)
    loss = logits.sparse_categorical_crossentropy(tgt)
    opt.zero_grad()
    loss.backward()
    # the forward's results and the update in one realize: the logits are those of the weights before the step
    Tensor.realize(logits, loss, *opt.schedule_step())
    loss_after = model(idx).sparse_categorical_crossentropy(tgt)
  return {"outputs": [logits.numpy(), model.qkv.weight.numpy()], "losses": [loss.item(), loss_after.item()]}


def symbolic_seq() -> dict:
  """A variable sequence length bound to several values: the same kernels, different lengths."""
  rng = np.random.default_rng(6)
  x = Tensor(rng.standard_normal((12, 8)).astype(np.float32)).realize()
  w = Tensor(rng.standard_normal((8, 4)).astype(np.float32)).realize()
  seq = Variable("seq", 1, 12)
  outs = []
  for n in (3, 7, 12):
    part = x.shrink(((0, seq.bind(n)), None))
    outs.append((part @ w).relu().sum(0).numpy())
  return {"outputs": outs}


def disk_state_dict() -> dict:
  """Save a model's state dict as safetensors and load it back through the DISK device."""
  Tensor.manual_seed(7)
  model = MLP((6, 5, 2))
  for p in get_parameters(model): p.realize()
  # a fixed path: the DISK device's name is part of the captured graph, and identical runs should store identical
  # payloads
  with exclusive_folder("process-replay-disk-workload") as folder:
    path = os.path.join(folder, "model.safetensors")
    safe_save(get_state_dict(model), path)
    loaded = safe_load(path)
    other = MLP((6, 5, 2))
    load_state_dict(other, loaded)
    x = Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)).realize()
    return {"outputs": [other(x).numpy(), model(x).numpy()]}


class LlamaBlock:
  """One decoder layer as LLaMA-family inference code writes it: RMSNorm, rotary position embeddings, grouped-query
  attention over a key/value cache written in place, a SwiGLU MLP; the token embedding doubles as the output head."""
  def __init__(self, vocab=32, dim=16, heads=4, kv_heads=2, hidden=32, max_seq=8, seed=21):
    rng = np.random.default_rng(seed)
    def weight(*shape): return Tensor((rng.standard_normal(shape) * 0.3).astype(np.float32)).realize()
    self.dim, self.heads, self.kv_heads, self.head_dim, self.max_seq = dim, heads, kv_heads, dim // heads, max_seq
    self.embed = weight(vocab, dim)
    self.wq, self.wk, self.wv, self.wo = (weight(dim, dim), weight(dim, kv_heads * self.head_dim),
                                          weight(dim, kv_heads * self.head_dim), weight(dim, dim))
    self.w_gate, self.w_up, self.w_down = weight(dim, hidden), weight(dim, hidden), weight(hidden, dim)
    self.attn_norm, self.mlp_norm = Tensor.ones(dim).contiguous().realize(), weight(dim).abs().realize()
    self.cache_k = Tensor.zeros(1, max_seq, kv_heads, self.head_dim).contiguous().realize()
    self.cache_v = Tensor.zeros(1, max_seq, kv_heads, self.head_dim).contiguous().realize()
    freqs = 1.0 / (10000.0 ** (Tensor.arange(0, self.head_dim, 2).float() / self.head_dim))
    angles = Tensor.arange(max_seq).float().reshape(max_seq, 1) * freqs.reshape(1, -1)
    self.cos, self.sin = angles.cos().contiguous().realize(), angles.sin().contiguous().realize()

  @staticmethod
  def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-5) -> Tensor:
    return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * weight

  def rotate(self, x: Tensor, start, length: int) -> Tensor:
    """Each pair of a head's features turned by its position's angle."""
    batch, seq, heads, head_dim = x.shape
    cos = self.cos.shrink(((start, start + length), None)).reshape(1, seq, 1, head_dim // 2)
    sin = self.sin.shrink(((start, start + length), None)).reshape(1, seq, 1, head_dim // 2)
    pairs = x.reshape(batch, seq, heads, head_dim // 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    return Tensor.stack(even * cos - odd * sin, even * sin + odd * cos, dim=-1).reshape(batch, seq, heads, head_dim)

  def __call__(self, tokens: Tensor, start) -> Tensor:
    """Logits for `tokens` at positions start.. (`start` an int, or a bound Variable when decoding one token)."""
    batch, seq = tokens.shape
    x = self.embed[tokens]
    h = self.rms_norm(x, self.attn_norm)
    q = self.rotate((h @ self.wq).reshape(batch, seq, self.heads, self.head_dim), start, seq)
    k = self.rotate((h @ self.wk).reshape(batch, seq, self.kv_heads, self.head_dim), start, seq)
    v = (h @ self.wv).reshape(batch, seq, self.kv_heads, self.head_dim)
    self.cache_k.shrink((None, (start, start + seq), None, None)).assign(k).realize()
    self.cache_v.shrink((None, (start, start + seq), None, None)).assign(v).realize()
    repeat = self.heads // self.kv_heads
    keys = self.cache_k.shrink((None, (0, start + seq), None, None)).repeat_interleave(repeat, dim=2)
    values = self.cache_v.shrink((None, (0, start + seq), None, None)).repeat_interleave(repeat, dim=2)
    scores = q.transpose(1, 2) @ keys.permute(0, 2, 3, 1) / self.head_dim ** 0.5
    if seq > 1: scores = scores + Tensor.full((1, 1, seq, start + seq), float("-inf")).triu(start + 1)
    attended = (scores.softmax(-1) @ values.transpose(1, 2)).transpose(1, 2).reshape(batch, seq, self.dim)
    x = x + attended @ self.wo
    h = self.rms_norm(x, self.mlp_norm)
    x = x + ((h @ self.w_gate).silu() * (h @ self.w_up)) @ self.w_down
    return x @ self.embed.T


def llama_decode(prompt=(3, 17, 5), new_tokens: int = 3) -> dict:
  """Text generation with a LLaMA-style decoder layer: the prompt in one pass, then one token at a time at a position
  bound to a Variable (one set of kernels for every step), greedy, and a last token sampled at temperature 0.7."""
  Tensor.manual_seed(22)
  model = LlamaBlock()
  logits = [model(Tensor([list(prompt)], dtype=dtypes.int32), 0)[0].realize()]
  tokens, position = [], len(prompt)
  for _ in range(new_tokens):
    tokens.append(int(logits[-1][-1].argmax().item()))
    start = Variable("start_pos", 1, model.max_seq - 1).bind(position)
    logits.append(model(Tensor([[tokens[-1]]], dtype=dtypes.int32), start)[0].realize())
    position += 1
  sampled = (logits[-1][-1] / 0.7).softmax().multinomial()
  return {"outputs": [x.numpy() for x in logits] + [np.array(tokens), sampled.numpy()]}


def _from_numpy(rng, layer, scale: float):
  """`layer` with weights from a numpy generator, as a checkpoint's would be: normal weights times `scale`, then normal
  biases times 0.1 (drawn in that order, so that numpy can draw the same ones)."""
  layer.weight = Tensor((rng.standard_normal(layer.weight.shape) * scale).astype(np.float32))
  layer.bias = Tensor((rng.standard_normal(layer.bias.shape) * 0.1).astype(np.float32))
  return layer


class Denoiser:
  """The noise predictor of a DDPM training loop, small: a sinusoidal timestep embedding through a linear layer, a
  strided and a dilated convolution with group norm between, a transposed convolution back up, and a skip connection.
  Weights come from a numpy generator (as a checkpoint's would), so that numpy can compute the same forward pass."""
  def __init__(self, seed: int, channels: int = 2, width: int = 8):
    rng = np.random.default_rng(seed)
    def conv(layer, scale=0.3): return _from_numpy(rng, layer, scale)
    self.width = width
    self.conv_in = conv(nn.Conv2d(channels, width, 3, padding=1))
    self.time = conv(nn.Linear(width, width))
    self.down = conv(nn.Conv2d(width, width, 3, stride=2, padding=1))
    self.norm = nn.GroupNorm(2, width)
    self.mid = conv(nn.Conv2d(width, width, 3, padding=2, dilation=2))
    self.up = conv(nn.ConvTranspose2d(width, width, 4, stride=2, padding=1))
    self.conv_out = conv(nn.Conv2d(2 * width, channels, 3, padding=1), 0.1)

  def timestep_embedding(self, t: Tensor) -> Tensor:
    half = self.width // 2
    freqs = (Tensor.arange(half).float() * (-np.log(10000.0) / half)).exp()
    angles = t.float().reshape(-1, 1) * freqs.reshape(1, half)
    return angles.sin().cat(angles.cos(), dim=1)

  def __call__(self, x: Tensor, t: Tensor) -> Tensor:
    h = self.conv_in(x).silu() + self.time(self.timestep_embedding(t)).silu().reshape(x.shape[0], self.width, 1, 1)
    d = self.norm(self.down(h)).silu()
    d = d + self.mid(d).silu()
    return self.conv_out(self.up(d).silu().cat(h, dim=1))


def ddpm_step(steps: int = 3) -> dict:
  """Denoising diffusion training as DDPM code writes it: images noised to a random timestep of a linear beta
  schedule with noise from randn, the mean squared error of the predicted noise, gradients clipped to a global norm
  of 1, AdamW, and an exponential moving average of the weights kept by assign."""
  Tensor.manual_seed(30)
  rng = np.random.default_rng(31)
  images = Tensor(rng.uniform(-1, 1, (4, 2, 8, 8)).astype(np.float32)).realize()
  alpha_bar = np.cumprod(1 - np.linspace(1e-4, 0.02, 50)).astype(np.float32)
  model = Denoiser(32)
  params = get_parameters(model)
  for p in params: p.realize()
  average = [p.detach().contiguous().realize() for p in params]
  opt = AdamW(params, lr=3e-3, weight_decay=1e-2)
  losses, first_noise = [], None
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        t = rng.integers(0, 50, 4)
        a = Tensor(np.sqrt(alpha_bar[t]).reshape(4, 1, 1, 1))
        b = Tensor(np.sqrt(1 - alpha_bar[t]).reshape(4, 1, 1, 1))
        noise = Tensor.randn(4, 2, 8, 8).realize()
        if first_noise is None: first_noise = noise.numpy()
        opt.zero_grad()
        loss = (model(a * images + b * noise, Tensor(t.astype(np.int32))) - noise).square().mean()
        loss.backward()
        total = Tensor.stack(*[p.grad.square().sum() for p in params]).sum().sqrt()
        scale = (1.0 / (total + 1e-6)).minimum(1.0)
        for p in params: p.grad = p.grad * scale
        updates = opt.schedule_step()
        for kept, p in zip(average, params): kept.assign(kept * 0.9 + p.detach() * 0.1)
        Tensor.realize(loss, *updates, *average)
        losses.append(loss.item())
  return {"outputs": [first_noise, model.conv_out.weight.numpy(), average[0].numpy(), average[-1].numpy()],
          "losses": losses}


def _numpy_linear(rng, fan_in: int, fan_out: int) -> nn.Linear:
  return _from_numpy(rng, nn.Linear(fan_in, fan_out), 1 / np.sqrt(fan_in))


def gan_step(steps: int = 3) -> dict:
  """Adversarial training as GAN code writes it: a generator from randn noise, a discriminator with leaky ReLUs, the
  discriminator's loss on real samples and on generated ones with the generator cut off by detach, then the
  generator's loss through the discriminator, each player with its own Adam, the binary cross-entropy taken on
  logits."""
  Tensor.manual_seed(40)
  rng = np.random.default_rng(41)
  real = Tensor(np.concatenate([rng.normal(2.0, 0.5, (16, 4)), rng.normal(-2.0, 0.5, (16, 4))]).astype(np.float32))
  g1, g2, d1, d2 = _numpy_linear(rng, 3, 16), _numpy_linear(rng, 16, 4), _numpy_linear(rng, 4, 16), \
    _numpy_linear(rng, 16, 1)
  def generate(z: Tensor) -> Tensor: return g2(g1(z).relu())
  def judge(x: Tensor) -> Tensor: return d2(d1(x).leakyrelu(0.2))
  g_opt = Adam(get_parameters([g1, g2]), lr=2e-3, b1=0.5)
  d_opt = Adam(get_parameters([d1, d2]), lr=2e-3, b1=0.5)
  ones, zeros = Tensor.ones(32, 1), Tensor.zeros(32, 1)
  d_losses, g_losses, first_z = [], [], None
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        z = Tensor.randn(32, 3).realize()
        if first_z is None: first_z = z.numpy()
        fake = generate(z)
        d_opt.zero_grad()
        d_loss = judge(real).binary_crossentropy_logits(ones) + judge(fake.detach()).binary_crossentropy_logits(zeros)
        d_loss.backward()
        Tensor.realize(d_loss, *d_opt.schedule_step())
        g_opt.zero_grad()
        g_loss = judge(fake).binary_crossentropy_logits(ones)
        g_loss.backward()
        Tensor.realize(g_loss, *g_opt.schedule_step())
        d_losses.append(d_loss.item())
        g_losses.append(g_loss.item())
  return {"outputs": [first_z, np.array(g_losses), generate(Tensor(first_z)).numpy(), d1.weight.numpy()],
          "losses": d_losses}


def text_classifier(steps: int = 4) -> dict:
  """A bag-of-embeddings text classifier as such code is written: padded token ids (0 pads), an embedding table, a
  mean over the real tokens only (a mask from the ids, divided by each text's length), a linear head, cross-entropy
  with label smoothing, SGD; then the predicted classes of the texts."""
  Tensor.manual_seed(50)
  rng = np.random.default_rng(51)
  lengths = rng.integers(2, 9, 12)
  ids = np.zeros((12, 8), np.int32)
  for row, length in enumerate(lengths): ids[row, :length] = rng.integers(1, 20, length)
  labels = Tensor((ids[:, 0] % 3).astype(np.int32)).realize()   # the first token decides the class
  tokens = Tensor(ids).realize()
  embed = nn.Embedding(20, 6)
  embed.weight = Tensor((rng.standard_normal((20, 6)) * 0.5).astype(np.float32))
  head = _numpy_linear(rng, 6, 3)
  opt = SGD([embed.weight, *get_parameters(head)], lr=0.5)

  def logits() -> Tensor:
    real = (tokens != 0).unsqueeze(-1)
    pooled = (embed(tokens) * real).sum(1) / real.sum(1).cast(dtypes.float32)
    return head(pooled)

  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = logits().cross_entropy(labels, label_smoothing=0.1)
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  scores = logits()
  return {"outputs": [scores.numpy(), scores.argmax(-1).numpy(), embed.weight.numpy()], "losses": losses}


def gcn_node_classifier(steps: int = 4) -> dict:
  """Node classification with a two-layer graph convolutional network written as message passing, as graph libraries
  do it: node degrees summed by scatter_reduce over the edge list (self loops added), each edge's message gathered
  from its source node's features and scaled by 1/sqrt(deg(src) deg(dst)), the messages summed into their target
  nodes by scatter_reduce; cross-entropy on the labelled nodes only, Adam."""
  Tensor.manual_seed(60)
  rng = np.random.default_rng(61)
  nodes, features, classes = 12, 5, 3
  pairs = {tuple(sorted(p)) for p in rng.integers(0, nodes, (20, 2)) if p[0] != p[1]}
  edges = np.array([(a, b) for a, b in pairs] + [(b, a) for a, b in pairs] + [(n, n) for n in range(nodes)]).T
  src, dst = Tensor(edges[0].astype(np.int32)).realize(), Tensor(edges[1].astype(np.int32)).realize()
  x = Tensor(rng.standard_normal((nodes, features)).astype(np.float32)).realize()
  labels = Tensor(rng.integers(0, classes, nodes).astype(np.int32)).realize()
  labelled = Tensor(np.arange(0, nodes, 2).astype(np.int32)).realize()
  w1 = Tensor((rng.standard_normal((features, 8)) / np.sqrt(features)).astype(np.float32))
  w2 = Tensor((rng.standard_normal((8, classes)) / np.sqrt(8)).astype(np.float32))
  opt = Adam([w1, w2], lr=0.05)
  count = edges.shape[1]
  degree = Tensor.zeros(nodes).scatter_reduce(0, dst, Tensor.ones(count), reduce="sum")
  scale = (degree.gather(0, src) * degree.gather(0, dst)).rsqrt().reshape(count, 1)

  def propagate(h: Tensor) -> Tensor:
    width = h.shape[1]
    messages = h.gather(0, src.reshape(count, 1).expand(count, width)) * scale
    return Tensor.zeros(nodes, width).scatter_reduce(0, dst.reshape(count, 1).expand(count, width), messages,
                                                     reduce="sum")

  def logits() -> Tensor: return propagate(propagate(x @ w1).relu() @ w2)

  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = logits()[labelled].sparse_categorical_crossentropy(labels[labelled])
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  scores = logits()
  return {"outputs": [scores.numpy(), scores.argmax(-1).numpy(), w1.numpy()], "losses": losses}


def wavenet_step(steps: int = 3) -> dict:
  """Next-sample prediction with a WaveNet-style stack, as audio models write it: causal 1-D convolutions (padded on
  the left only) dilated 1, 2 and 4, gated activations (tanh times sigmoid), residual and skip connections of 1x1
  convolutions, the mean squared error against the signal one step ahead, Adam."""
  Tensor.manual_seed(70)
  rng = np.random.default_rng(71)
  time = np.arange(33)
  wave = (np.sin(time * 0.4)[None] * rng.uniform(0.5, 1.0, (2, 1)) + rng.normal(0, 0.05, (2, 33))).astype(np.float32)
  signal, target = Tensor(wave[:, None, :32]).realize(), Tensor(wave[:, None, 1:]).realize()
  width, dilations = 6, (1, 2, 4)

  def layer(fan_in: int, fan_out: int, kernel: int, **options) -> nn.Conv2d:
    return _from_numpy(rng, nn.Conv1d(fan_in, fan_out, kernel, **options), 1 / np.sqrt(fan_in * kernel))

  start = layer(1, width, 1)
  # the last block's residual output would reach nothing: it has none
  blocks = [(layer(width, width, 2, dilation=d), layer(width, width, 2, dilation=d),
             layer(width, width, 1) if d != dilations[-1] else None, layer(width, width, 1), d) for d in dilations]
  head = layer(width, 1, 1)
  opt = Adam(get_parameters([start, head, *[[c for c in b[:4] if c is not None] for b in blocks]]), lr=1e-2)

  def predict(x: Tensor) -> Tensor:
    h, skips = start(x), []
    for filt, gate, residual, skip, d in blocks:
      past = h.pad(((0, 0), (0, 0), (d, 0)))   # causal: each output sees its own sample and the ones before
      z = filt(past).tanh() * gate(past).sigmoid()
      if residual is not None: h = h + residual(z)
      skips.append(skip(z))
    return head(Tensor.stack(*skips).sum(0).relu())

  losses = []
  with Tensor.train():
    for step in range(steps):
      with replay_location(f"step {step}"):
        opt.zero_grad()
        loss = (predict(signal) - target).square().mean()
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        losses.append(loss.item())
  return {"outputs": [predict(signal).numpy(), head.weight.numpy()], "losses": losses}
