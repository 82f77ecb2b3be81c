"""AdamW, the warmup + cosine learning-rate schedule, and gradient clipping by global norm."""

from __future__ import annotations

import math
from dataclasses import dataclass

from minieagle.backend import array_module
from minieagle.errors import InvalidInputError


@dataclass
class AdamWConfig:
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise InvalidInputError(f"lr={self.lr} must be positive, e.g. 3e-3")
        for beta in self.betas:
            if not 0 <= beta < 1:
                raise InvalidInputError(f"betas={self.betas} must lie in [0, 1), e.g. (0.9, 0.95)")
        if self.weight_decay < 0:
            raise InvalidInputError(f"weight_decay={self.weight_decay} must be >= 0, e.g. 0.1")


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter), applied to matrices only: norms'
    gains are not decayed toward zero. State: first and second moments per parameter, step."""

    def __init__(self, params: dict, config: AdamWConfig | None = None):
        self.config = config or AdamWConfig()
        self.m = {name: _zeros_like(p) for name, p in params.items()}
        self.v = {name: _zeros_like(p) for name, p in params.items()}
        self.step_count = 0

    def step(self, params: dict, grads: dict, lr: float) -> None:
        """Update `params` in place from `grads` with learning rate `lr`."""
        beta1, beta2 = self.config.betas
        self.step_count += 1
        bias1 = 1.0 - beta1**self.step_count
        bias2 = 1.0 - beta2**self.step_count
        for name, p in params.items():
            g = grads[name]
            m, v = self.m[name], self.v[name]
            m *= beta1
            m += (1.0 - beta1) * g
            v *= beta2
            v += (1.0 - beta2) * g * g
            xp = array_module(p)
            update = (m / bias1) / (xp.sqrt(v / bias2) + self.config.eps)
            if p.ndim >= 2 and self.config.weight_decay:
                p *= 1.0 - lr * self.config.weight_decay
            p -= lr * update

    def state_tensors(self) -> dict:
        """Moments as a flat dict `m.<name>`, `v.<name>` (for safetensors)."""
        out = {f"m.{name}": value for name, value in self.m.items()}
        out.update({f"v.{name}": value for name, value in self.v.items()})
        return out

    def load_state_tensors(self, tensors: dict, step_count: int) -> None:
        for name in self.m:
            self.m[name][...] = tensors[f"m.{name}"]
            self.v[name][...] = tensors[f"v.{name}"]
        self.step_count = step_count


def _zeros_like(p):
    return array_module(p).zeros_like(p)


def cosine_lr(
    step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1
) -> float:
    """Linear warmup from 0 to max_lr over warmup_steps, then cosine decay to
    min_lr_ratio * max_lr at total_steps (held there after)."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return max_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine)


def wsd_lr(
    step: int, *, max_lr: float, warmup_steps: int, total_steps: int, decay_steps: int,
    min_lr_ratio: float = 0.1,
) -> float:
    """Warmup-stable-decay: linear warmup from 0 to max_lr over warmup_steps, max_lr held, then
    a linear decay to min_lr_ratio * max_lr over the last decay_steps of total_steps.

    Up to total_steps - decay_steps the rate does not depend on total_steps, so one long run's
    saved state at step s is also the state of every shorter run whose decay starts at or after
    s: the data-scaling experiment trains its largest point once and branches each smaller point
    off it, running only that point's decay (benchmarks/eagle3_scaling.py)."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return max_lr
    progress = min(1.0, (step - decay_start + 1) / max(1, decay_steps))
    return max_lr * (1.0 - (1.0 - min_lr_ratio) * progress)


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most max_norm; return the norm
    before clipping (as a host float)."""
    total = 0.0
    for g in grads.values():
        total += float(array_module(g).sum(g * g))  # one explicit scalar sync per tensor
    norm = math.sqrt(total)
    if max_norm > 0 and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale
    return norm
