"""Medusa-1 heads (Cai et al. 2024, §2.1.1): K extra decoding heads on the target's last hidden
state, each guessing one token further ahead, trained with the target frozen.

At position t the target's feature h_t (its last hidden state after the final RMSNorm: the vector
its LM head reads) gives the target's own next token x_{t+1}. Head k = 1 .. K guesses x_{t+k+1}:

    r_k = h_t + SiLU(W_k h_t + b_k)        # one residual SiLU block per head, [.., d] -> [.., d]
    logits_k = r_k @ LMHead_k^T            # [.., d] -> [.., V]; head k's own LM head

W_k starts at zero, so r_k = h_t and each head starts as the target's LM head (the paper's
initialisation). As in the paper each head has its own LM head, initialised from the target's
and trained (`own_lm_head=True`, the default); `own_lm_head=False` shares the target's, frozen,
as EAGLE-1's head does: 16,512 parameters per head instead of 278,656 on the shipped target,
for fewer accepted drafts (docs/medusa.md measures both). Tensor names follow the official
code's ResBlock and LM head (`medusa_head.{k}.0.linear.weight`, `medusa_head.{k}.1.weight`,
k from 0).

Training (Medusa-1): loss = Σ_k λ_k CE(logits_k, x_{t+k+1}) over the true tokens of the corpus,
λ_k = 0.8^(k-1) (the official code's `medusa_decay_coefficient ** i` for i = k - 1 = 0 .. K-1).
`MedusaRecipe` plugs these heads into the shared head-training loop of `minieagle.train_eagle`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minieagle import layers, model
from minieagle.backend import array_module, to_device, to_host
from minieagle.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    check_head_tensors,
    check_trained_for,
    config_value,
    minieagle_version,
    read_config_json,
    read_tensors,
    storage_dtype,
    target_record,
    write_directory_atomically,
    write_tensors,
)
from minieagle.errors import InvalidInputError

IGNORE = -100  # a label no head is scored on (past the end of a window)


@dataclass(frozen=True)
class MedusaConfig:
    """hidden_size, vocab_size: the target's; num_heads: K, head k guessing x_{t+k+1};
    own_lm_head: each head has its own LM head [V, d], initialised from the target's and
    trained (the paper's design, our default), or False: all share the target's, frozen."""

    hidden_size: int
    vocab_size: int
    num_heads: int = 4
    own_lm_head: bool = True

    def __post_init__(self) -> None:
        for name in ("hidden_size", "vocab_size", "num_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(
                    f"{name}={value!r} must be a positive integer (num_heads: e.g. 4)"
                )
        if not isinstance(self.own_lm_head, bool):
            raise InvalidInputError(f"own_lm_head={self.own_lm_head!r} must be True or False")

    @classmethod
    def from_target(cls, target_config, num_heads: int = 4, own_lm_head=True) -> MedusaConfig:
        return cls(target_config.hidden_size, target_config.vocab_size, num_heads, own_lm_head)


def _names(k: int) -> tuple[str, str]:
    return f"medusa_head.{k}.0.linear.weight", f"medusa_head.{k}.0.linear.bias"


def _lm_head_name(k: int) -> str:
    return f"medusa_head.{k}.1.weight"  # the official code's per-head LM head


def head_param_shapes(cfg: MedusaConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every trainable tensor: W_k [d, d] ([out, in]) and b_k [d] per head
    (and, with own_lm_head, its LM head [V, d])."""
    d, shapes = cfg.hidden_size, {}
    for k in range(cfg.num_heads):
        weight, bias = _names(k)
        shapes[weight], shapes[bias] = (d, d), (d,)
        if cfg.own_lm_head:
            shapes[_lm_head_name(k)] = (cfg.vocab_size, d)
    return shapes


def init_heads(cfg: MedusaConfig, dtype=np.float32, lm_head=None) -> dict[str, np.ndarray]:
    """The paper's start: W_k = 0 and b_k = 0, so every head is the target's LM head
    (with own_lm_head, a copy of `lm_head` [V, d], the target's)."""
    heads = {n: np.zeros(shape, dtype=dtype) for n, shape in head_param_shapes(cfg).items()}
    if cfg.own_lm_head:
        if lm_head is None or tuple(lm_head.shape) != (cfg.vocab_size, cfg.hidden_size):
            raise InvalidInputError(
                "own_lm_head=True starts each head's LM head from the target's; pass "
                "lm_head=model.lm_head_weight(target_params)"
            )
        for k in range(cfg.num_heads):
            heads[_lm_head_name(k)] = np.array(lm_head, dtype=dtype)
    return heads


# ---------------------------------------------------------------------------- forward / backward


def _check_inputs(cfg: MedusaConfig, heads: dict, lm_head, features) -> None:
    if tuple(lm_head.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise InvalidInputError(
            f"the LM head is {tuple(lm_head.shape)} but the Medusa heads expect (vocab_size, "
            f"hidden_size) = {(cfg.vocab_size, cfg.hidden_size)}; pass the target they were "
            "trained for (model.lm_head_weight(target_params))"
        )
    if features.ndim < 1 or features.shape[-1] != cfg.hidden_size:
        raise InvalidInputError(
            f"features have shape {tuple(features.shape)}; expected [..., hidden_size="
            f"{cfg.hidden_size}], the target's 'final' hidden states"
        )
    missing = [n for n in head_param_shapes(cfg) if n not in heads]
    if missing:
        raise InvalidInputError(
            f"the Medusa heads lack {missing[:3]}; load heads saved for num_heads={cfg.num_heads}"
        )


def medusa_forward(heads: dict, cfg: MedusaConfig, lm_head, features):
    """All K heads on the target's features.

    heads: {name: array} (`head_param_shapes`); lm_head [V, d]: the target's, frozen (unused
    with own_lm_head); features [..., d]: h_t. Returns (logits [K, ..., V], cache): row k
    guesses x_{t+k+2}, i.e. head k + 1 of the paper.
    """
    _check_inputs(cfg, heads, lm_head, features)
    xp = array_module(features)
    logits, blocks = [], []
    for k in range(cfg.num_heads):
        weight, bias = _names(k)
        z, c_linear = layers.linear_forward(features, heads[weight])  # [.., d] -> [.., d]
        z = z + heads[bias]
        sig = 1.0 / (1.0 + xp.exp(-z))
        residual = features + z * sig  # h + SiLU(W h + b)   [.., d]
        own = heads[_lm_head_name(k)] if cfg.own_lm_head else None
        out, _ = layers.linear_forward(residual, lm_head if own is None else own)  # -> [.., V]
        logits.append(out)
        blocks.append((c_linear, z, sig, residual, own))
    return xp.stack(logits), (blocks, lm_head)


def medusa_backward(dlogits, cache) -> dict:
    """dlogits [K, ..., V] -> gradients of W_k and b_k (and of an own LM head; the target and
    its LM head are frozen). SiLU'(z) = σ(z) (1 + z (1 - σ(z)))."""
    blocks, lm_head = cache
    xp = array_module(lm_head)
    grads = {}
    for k, (c_linear, z, sig, residual, own) in enumerate(blocks):
        if own is None:
            dresidual = dlogits[k, ...] @ lm_head  # [.., V] @ [V, d] -> [.., d]
        else:
            dresidual, grads[_lm_head_name(k)] = layers.linear_backward(
                dlogits[k, ...], (residual, own)
            )
        dz = dresidual * sig * (1.0 + z * (1.0 - sig))  # [.., d]
        weight, bias = _names(k)
        _, grads[weight] = layers.linear_backward(dz, c_linear)
        grads[bias] = xp.sum(xp.reshape(dz, (-1, dz.shape[-1])), axis=0)  # [d]
    return grads


# ---------------------------------------------------------------------------- labels and loss


def medusa_labels(windows, num_heads: int):
    """Labels int [K, B, L] for windows int [B, L + 1] read at positions t = 0 .. L-1: head k
    (row k - 1) is scored against x_{t+k+1}, IGNORE where that lies past the window."""
    windows = np.asarray(windows)
    B, L = windows.shape[0], windows.shape[1] - 1
    labels = np.full((num_heads, B, L), IGNORE, dtype=np.int64)
    for k in range(1, num_heads + 1):
        if k + 1 <= L:
            labels[k - 1, :, : L - k] = windows[:, k + 1 :]  # x_{t+k+1} for t = 0 .. L-k-1
    return labels


def _scores(logits, labels, top5: bool):
    """Per head: (CE loss scalar, its cache, top-1 hits, top-5 hits or 0, scored positions).
    labels: on the device of logits."""
    xp = array_module(logits)
    out = []
    V = logits.shape[-1]
    for k in range(logits.shape[0]):
        flat_logits = xp.reshape(logits[k, ...], (-1, V))  # [N, V]
        flat_labels = xp.reshape(labels[k, ...], (-1,))  # [N]
        ce, c_ce = layers.cross_entropy_forward(flat_logits, flat_labels, IGNORE)
        valid = flat_labels != IGNORE
        hit1 = int(xp.sum((xp.argmax(flat_logits, axis=-1) == flat_labels) & valid))
        hit5 = 0
        if top5:  # a metric only: ranked on the host
            host_logits, host_labels = to_host(flat_logits), to_host(flat_labels)
            best = np.argpartition(-host_logits, min(5, V) - 1, axis=-1)[:, :5]  # [N, 5]
            in_best = (best == host_labels[:, None]).any(axis=-1)
            hit5 = int(np.sum(in_best & (host_labels != IGNORE)))
        out.append((ce, c_ce, hit1, hit5, int(xp.sum(valid))))
    return out


def medusa_loss(heads, cfg: MedusaConfig, lm_head, features, labels, *, decay: float = 0.8,
                top5: bool = False):  # fmt: skip
    """Σ_k decay^(k-1) CE(head k, x_{t+k+1}) and the heads' gradients.

    features [B, L, d] (h_t), labels int [K, B, L] (`medusa_labels`). Returns (loss, parts
    {ce_k, top1_k and, with top5, top5_k for k = 1 .. K}, grads)."""
    logits, cache = medusa_forward(heads, cfg, lm_head, features)  # [K, B, L, V]
    xp = array_module(logits)
    labels = to_device(to_host(labels), like=logits, dtype=xp.int64)
    loss, parts, dlogits = 0.0, {}, []
    for k, (ce, c_ce, hit1, hit5, count) in enumerate(_scores(logits, labels, top5), start=1):
        weight = decay ** (k - 1)
        loss += weight * float(ce)
        parts[f"ce_{k}"] = float(ce)
        parts[f"top1_{k}"] = hit1 / max(count, 1)
        if top5:
            parts[f"top5_{k}"] = hit5 / max(count, 1)
        dlogits.append(xp.reshape(layers.cross_entropy_backward(weight, c_ce), logits[k - 1].shape))
    return loss, parts, medusa_backward(xp.stack(dlogits), cache)


# ---------------------------------------------------------------------------- training recipe


class MedusaRecipe:
    """What training Medusa heads needs from the loop of `minieagle.train_eagle`: the target's
    final features of a window (`feature_keys`), the true tokens ahead as labels, the weighted
    cross-entropy, per-head top-1/top-5 on the validation windows, the export. Reads
    cfg.medusa_heads (K), cfg.medusa_own_lm_head and cfg.step_weight (λ's decay, 0.8)."""

    name = "medusa"
    identity_fixes = {
        "medusa_heads": "pass --medusa-heads {recorded} to resume it",
        "medusa_own_lm_head": "pass the --medusa-lm-head it used (own_lm_head={recorded})",
    }
    feature_keys = ("final",)

    def __init__(self, cfg, target_params, target_config, train_streams):
        self.cfg, self.target_params = cfg, target_params
        self.head_cfg = MedusaConfig.from_target(
            target_config, cfg.medusa_heads, cfg.medusa_own_lm_head
        )
        self.target_config = target_config
        self.lm_head = model.lm_head_weight(target_params)  # [V, d], frozen

    def init_head(self, seed: int) -> dict:
        return init_heads(self.head_cfg, lm_head=self.lm_head)

    def target_batch(self, windows: np.ndarray):
        """(features [B, L, d] at positions 0 .. L-1, labels [K, B, L]) for windows [B, L + 1]."""
        _, hidden, _ = model.forward(
            self.target_params, self.target_config, windows, output_hidden=("final",)
        )
        return self.batch_from_hidden(windows, hidden)

    reads_target_stats = False  # its labels are the window's own tokens

    def batch_from_hidden(self, windows: np.ndarray, hidden: dict, stats=None):
        features = hidden["final"][:, :-1]  # [B, L, d]
        return features, medusa_labels(windows, self.head_cfg.num_heads)

    def loss(self, head, batch, rng, mask=None) -> tuple[float, dict, dict]:
        """mask: None only (every row; `EagleTrainConfig` refuses loss_mask="answers")."""
        features, labels = batch
        loss, parts, grads = medusa_loss(
            head, self.head_cfg, self.lm_head, features, labels, decay=self.cfg.step_weight
        )
        return loss, {"top1_1": parts["top1_1"]}, grads

    def metrics(self, head, batches: list) -> dict:
        """loss, and per head k: top1_k, top5_k (the true token x_{t+k+1} is the head's
        argmax / among its 5 best) and ce_k."""
        records = []
        for features, labels in batches:
            loss, parts, _ = medusa_loss(
                head, self.head_cfg, self.lm_head, features, labels, decay=self.cfg.step_weight,
                top5=True,
            )  # fmt: skip
            records.append({"loss": loss, **parts})
        return {key: float(np.mean([r[key] for r in records])) for key in records[0]}

    def export(self, directory: Path, head: dict) -> None:
        save_medusa_heads(
            directory, head, self.head_cfg, target_dir=self.cfg.target,
            dtype=self.cfg.export_dtype,
        )  # fmt: skip


# ---------------------------------------------------------------------------- save / load


def _validate_heads(heads: dict, cfg: MedusaConfig) -> None:
    check_head_tensors(heads, head_param_shapes(cfg), "Medusa head")


def save_medusa_heads(directory, heads: dict, cfg: MedusaConfig, *, target_dir=None,
                      dtype="float32") -> Path:  # fmt: skip
    """Write `config.json` (the official code's `medusa_num_heads`, `medusa_num_layers` = 1,
    `hidden_size`, `vocab_size`, plus the target it was trained for) and `model.safetensors`,
    replacing `directory` atomically (`checkpoint.write_directory_atomically`)."""
    _validate_heads(heads, cfg)
    dtype = storage_dtype(dtype)
    config = {
        "minieagle_head": "medusa",
        "medusa_num_heads": cfg.num_heads,
        "medusa_num_layers": 1,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "medusa_own_lm_head": cfg.own_lm_head,  # False: the target's LM head, shared, frozen
        "dtype": dtype,
        "minieagle_version": minieagle_version(),
    }
    if target_dir is not None:
        config.update(target_record(target_dir))

    def write(new: Path) -> None:
        (new / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        write_tensors(new / WEIGHTS_FILE, heads, dtype)

    return write_directory_atomically(
        directory, write, own_files=(CONFIG_FILE, WEIGHTS_FILE), kind="Medusa head"
    )


def load_medusa_heads(directory, *, target_dir=None, dtype=np.float32):
    """Read heads written by `save_medusa_heads`: (heads cast to dtype, MedusaConfig). Checks
    files, config types, tensor names, shapes and finiteness; target_dir: warns when the heads
    record another target."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    fix = "train heads with `minieagle train medusa`"
    d = read_config_json(config_path, fix_missing=fix)
    if d.get("minieagle_head") != "medusa":
        raise InvalidInputError(
            f"{config_path} describes a {d.get('minieagle_head', 'non-Medusa')!r} head, not Medusa "
            "heads; pass a directory written by `minieagle train medusa`"
        )
    try:
        cfg = MedusaConfig(
            config_value("hidden_size", d.get("hidden_size"), "integer"),
            config_value("vocab_size", d.get("vocab_size"), "integer"),
            config_value("medusa_num_heads", d.get("medusa_num_heads"), "integer"),
            config_value("medusa_own_lm_head", d.get("medusa_own_lm_head"), "boolean"),
        )
    except ValueError as e:
        raise InvalidInputError(f"{config_path}: {e}") from e
    stored = read_tensors(weights_path, fix_missing=fix)
    try:
        _validate_heads(stored, cfg)
    except ValueError as e:
        raise InvalidInputError(f"{weights_path} does not match {config_path}: {e}") from e
    if target_dir is not None:
        check_trained_for(d, target_dir, kind="head", stacklevel=3)
    return {k: v.astype(dtype, copy=False) for k, v in stored.items()}, cfg
