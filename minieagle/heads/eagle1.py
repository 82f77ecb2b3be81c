"""EAGLE-1's draft head (Li et al. 2024, §3): one decoder layer that predicts the target's next
feature from its current feature and the next token, read out by the target's own LM head.

At position t the head reads e = Embed(x_{t+1}) (the token one step ahead) and the target's
feature f_t (its last hidden state after the final RMSNorm), and predicts f̂_{t+1}:

    x = fc([e, f_t]) (+ bias)            # [.., T, 2d] -> [.., T, d]
    f̂_{t+1} = DecoderLayer(x)            # no input_layernorm, no final norm
    logits = f̂_{t+1} @ LMHead^T          # the target's head, frozen

Embedding and LM head belong to the target and stay frozen; the head owns `fc` and `layers.0.*`
(SafeAILab's tensor names). Training minimises SmoothL1(f̂, f) + 0.1 * CE(p_target, q_draft).
The `inputs` ablation of the paper's Fig. 4 feeds only the token ("token") or only the feature
("feature"), with fc d -> d.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minieagle import layers, losses, model
from minieagle.backend import array_module, to_device, zeros
from minieagle.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    check_head_tensors,
    check_trained_for,
    config_from_hf_dict,
    config_to_hf_dict,
    config_value,
    read_config_json,
    read_tensors,
    storage_dtype,
    target_record,
    write_directory_atomically,
    write_tensors,
)
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.kvcache import KVCache

EMBED = "embed_tokens.weight"  # the target's embedding, as the official EAGLE head stores it

INPUTS = ("token+feature", "token", "feature")
LAYER_PREFIX = "layers.0."


@dataclass(frozen=True)
class Eagle1Config:
    """layer: a one-layer LlamaConfig with the target's width, heads, vocabulary and RoPE.
    fc_bias: whether fc has a bias (SafeAILab's default; their LLaMA-3 heads drop it).
    inputs: "token+feature" (the paper), or the ablations "token" / "feature"."""

    layer: LlamaConfig
    fc_bias: bool = True
    inputs: str = "token+feature"

    def __post_init__(self) -> None:
        if self.inputs not in INPUTS:
            raise InvalidInputError(
                f"inputs={self.inputs!r} is not one of {INPUTS}; pass 'token+feature'"
            )
        if self.layer.num_hidden_layers != 1:
            raise InvalidInputError(
                f"layer has num_hidden_layers={self.layer.num_hidden_layers}; the EAGLE-1 head "
                "is one decoder layer (use Eagle1Config.from_target)"
            )

    @classmethod
    def from_target(
        cls, target_config: LlamaConfig, *, inputs: str = "token+feature", fc_bias: bool = True
    ) -> Eagle1Config:
        """The head for a target: same width, MLP, heads, vocabulary and RoPE, one layer."""
        return cls(target_config.replace(num_hidden_layers=1), fc_bias=fc_bias, inputs=inputs)

    @property
    def fc_in(self) -> int:
        """Width of fc's input: 2d for [embedding, feature], d for either alone."""
        return self.layer.hidden_size * (2 if self.inputs == "token+feature" else 1)


def head_param_shapes(cfg: Eagle1Config) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every trainable tensor: fc, then the decoder layer without
    input_layernorm (SafeAILab EAGLE-1 layout; embedding and LM head are the target's)."""
    d = cfg.layer.hidden_size
    shapes: dict[str, tuple[int, ...]] = {"fc.weight": (d, cfg.fc_in)}
    if cfg.fc_bias:
        shapes["fc.bias"] = (d,)
    source = model.layer_prefix(0)
    for name, shape in model.param_shapes(cfg.layer).items():
        if name.startswith(source) and not name.endswith("input_layernorm.weight"):
            shapes[LAYER_PREFIX + name[len(source) :]] = shape
    return shapes


def init_head(cfg: Eagle1Config, seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    """Fresh head: the decoder layer as `model.init_params` initialises layer 0; fc as
    nn.Linear does (uniform in ±1/sqrt(fan_in)), so x keeps a third of its input's variance."""
    layer = model.init_params(cfg.layer, seed=seed, dtype=dtype)
    source = model.layer_prefix(0)
    rng = np.random.default_rng([seed, 1])
    head = {}
    for name, shape in head_param_shapes(cfg).items():
        if name.startswith("fc."):
            bound = 1.0 / np.sqrt(cfg.fc_in)
            head[name] = rng.uniform(-bound, bound, size=shape).astype(dtype)
        else:
            head[name] = layer[source + name[len(LAYER_PREFIX) :]]
    return head


def new_head_cache(cfg: Eagle1Config, head: dict, capacity: int, batch: int = 1) -> KVCache:
    """An empty one-layer KV cache for the head, on the device and dtype of its weights."""
    layer = cfg.layer
    return KVCache(1, batch, layer.num_key_value_heads, layer.head_dim, capacity, head["fc.weight"])


# ---------------------------------------------------------------------------- forward / backward


def _check_target(cfg: Eagle1Config, target_params: dict) -> None:
    shape = tuple(model.lm_head_weight(target_params).shape)
    want = (cfg.layer.vocab_size, cfg.layer.hidden_size)
    if shape != want:
        raise InvalidInputError(
            f"the target's LM head is {shape} but the head expects (vocab_size, hidden_size) = "
            f"{want}; train the head for this target (Eagle1Config.from_target)"
        )


def _with_batch(x, name: str, ndim: int):
    """(x with a leading batch axis, whether it had one); x must have ndim or ndim + 1 axes."""
    if x is None:
        raise InvalidInputError(f"{name} is None but the head's inputs need it; pass {name}")
    if x.ndim not in (ndim, ndim + 1):
        raise InvalidInputError(
            f"{name} has {x.ndim} axes; expected {ndim} or {ndim + 1} (batched)"
        )
    return (x, True) if x.ndim == ndim + 1 else (x[None, ...], False)


def _head_inputs(cfg: Eagle1Config, tokens, features):
    """The checked inputs the head reads: (ids int [B, T] or None, features [B, T, d] or None,
    whether a batch was given); None for the stream the `inputs` ablation leaves out."""
    ids = f = batched = None
    if cfg.inputs != "feature":
        ids, batched = _with_batch(tokens, "tokens", 1)
        xp = array_module(ids)
        if int(xp.min(ids)) < 0 or int(xp.max(ids)) >= cfg.layer.vocab_size:
            raise InvalidInputError(
                f"tokens hold ids outside [0, vocab_size={cfg.layer.vocab_size}); encode text "
                "with the target's tokenizer"
            )
    if cfg.inputs != "token":
        f, batched = _with_batch(features, "features", 2)
        if f.shape[-1] != cfg.layer.hidden_size:
            raise InvalidInputError(
                f"features have width {f.shape[-1]} but the head expects hidden_size="
                f"{cfg.layer.hidden_size}; pass the target's 'final' hidden states"
            )
    if ids is not None and f is not None and tuple(ids.shape[:2]) != tuple(f.shape[:2]):
        raise InvalidInputError(
            f"tokens {tuple(tokens.shape)} and features {tuple(features.shape)} disagree on "
            "(batch, positions); pair x_{t+1} with f_t position by position"
        )
    return ids, f, batched


def head_forward(
    head: dict,
    cfg: Eagle1Config,
    target_params: dict,
    tokens,
    features,
    *,
    position_ids=None,
    attention_mask=None,
    cache: KVCache | None = None,
    keep_caches: bool = False,
):
    """The head over T new positions, optionally appending to its KV cache.

    tokens int [T] or [B, T]: x_{t+1} (ignored when inputs == "feature"). features [.., T, d]:
    f_t (ignored when inputs == "token"). position_ids int [T] (default cache.length + arange(T)).
    attention_mask bool [T, past + T] (default causal; a tree mask for draft trees).
    Returns (predicted features f̂ [.., T, d], logits [.., T, V], caches or None); the batch
    axis is present iff it was in the inputs.
    """
    _check_target(cfg, target_params)
    ids, features, batched = _head_inputs(cfg, tokens, features)  # [B, T], [B, T, d] or None
    past = cache.length if cache is not None else 0
    layer = cfg.layer
    ### BEGIN SOLUTION eagle1_head
    streams = []
    if ids is not None:  # Embed(x_{t+1}); the embedding is frozen, so its cache is dropped
        embedded, _ = layers.embedding_forward(target_params["model.embed_tokens.weight"], ids)
        streams.append(embedded)  # [B, T, d]
    if features is not None:
        streams.append(features)  # [B, T, d]: f_t
    xp = array_module(streams[0])
    fc_input = xp.concat(streams, axis=-1) if len(streams) == 2 else streams[0]  # [B, T, fc_in]
    x, c_fc = layers.linear_forward(fc_input, head["fc.weight"])  # [B, T, fc_in] -> [B, T, d]
    if cfg.fc_bias:
        x = x + head["fc.bias"]
    cos, sin, attention_mask = model.placement(
        layer, x.shape[1], past, position_ids, attention_mask, like=x
    )
    predicted, c_layer = model.decoder_layer_forward(
        head, LAYER_PREFIX, layer, x, cos, sin, attention_mask, cache, 0
    )  # [B, T, d]
    lm_head = model.lm_head_weight(target_params)  # [V, d]
    logits, _ = layers.linear_forward(predicted, lm_head)  # [B, T, d] -> [B, T, V]
    ### END SOLUTION
    # head_backward reads fc's cache, the layer's cache and the LM head.
    caches = (c_fc, c_layer, lm_head, batched) if keep_caches else None
    if not batched:
        predicted, logits = predicted[0, ...], logits[0, ...]
    return predicted, logits, caches


def head_backward(dpredicted, dlogits, caches, cfg: Eagle1Config) -> dict:
    """Gradients of the head's parameters (only: the target is frozen) from upstream gradients
    on the predicted features [.., T, d] and on the logits [.., T, V] (either may be None)."""
    c_fc, c_layer, lm_head, batched = caches
    if not batched:
        dpredicted = None if dpredicted is None else dpredicted[None, ...]
        dlogits = None if dlogits is None else dlogits[None, ...]
    shape = (*c_fc[0].shape[:2], cfg.layer.hidden_size)  # [B, T, d]
    dout = zeros(shape, like=lm_head) if dpredicted is None else dpredicted
    if dlogits is not None:
        dout = dout + dlogits @ lm_head  # [B, T, V] @ [V, d]; the frozen head gets no grad
    dx, grads = model.decoder_layer_backward(dout, c_layer, LAYER_PREFIX, cfg.layer)
    _, grads["fc.weight"] = layers.linear_backward(dx, c_fc, input_grad=False)  # fc reads data
    if cfg.fc_bias:
        xp = array_module(dx)
        grads["fc.bias"] = xp.sum(xp.reshape(dx, (-1, dx.shape[-1])), axis=0)  # [d]
    return grads


# ---------------------------------------------------------------------------- losses


def _losses(head, cfg, target_params, tokens, features, next_features, loss_mask, p_weight):
    """Forward pass and both losses: (loss, parts, caches for the backward)."""
    predicted, logits, caches = head_forward(
        head, cfg, target_params, tokens, features, keep_caches=True
    )
    xp = array_module(predicted)
    target_logits = next_features @ model.lm_head_weight(target_params).T  # [.., T, V]
    target_probs = layers.softmax(target_logits)  # [.., T, V]: p, the soft labels
    l1, c_l1 = losses.smooth_l1_forward(predicted, next_features, loss_mask)
    ce, c_ce = losses.soft_cross_entropy_forward(logits, target_probs, loss_mask)
    weights = xp.astype(loss_mask, predicted.dtype)
    count = max(float(xp.sum(weights)), 1.0)
    same_argmax = xp.argmax(logits, axis=-1) == xp.argmax(target_logits, axis=-1)  # [.., T]
    agree = xp.astype(same_argmax, weights.dtype)
    q = c_ce[4]  # the draft's probabilities, kept by the soft-CE forward
    overlap = xp.sum(xp.minimum(q, target_probs), axis=-1)  # [.., T]
    parts = {
        "smooth_l1": float(l1),
        "soft_ce": float(ce),
        "top1": float(xp.sum(agree * weights)) / count,
        "accept": float(xp.sum(overlap * weights)) / count,
    }
    return float(l1) + p_weight * float(ce), parts, (caches, c_l1, c_ce)


def eagle1_metrics(
    head, cfg, target_params, tokens, features, next_features, loss_mask, *, p_weight=0.1
) -> dict:
    """The loss and its parts without gradients: loss, smooth_l1, soft_ce, top1 (the draft's
    argmax equals the target's: greedy acceptance of a first draft token) and accept
    (sum_v min(p_v, q_v): acceptance of a first draft token sampled from q at temperature 1)."""
    args = (head, cfg, target_params, tokens, features, next_features, loss_mask, p_weight)
    loss, parts, _ = _losses(*args)
    return {"loss": loss, **parts}


def eagle1_loss(
    head,
    cfg: Eagle1Config,
    target_params,
    tokens,
    features,
    next_features,
    loss_mask,
    *,
    p_weight: float = 0.1,
    noise: float = 0.0,
    rng: np.random.Generator | None = None,
) -> tuple[float, dict, dict]:
    """SmoothL1(f̂, f_{t+1}) + p_weight * CE(softmax(LMHead(f_{t+1})), softmax(LMHead(f̂))),
    averaged over positions where loss_mask is set, and the head's gradients.

    tokens int [.., T] (x_{t+1}), features [.., T, d] (f_t), next_features [.., T, d] (f_{t+1}),
    loss_mask [.., T]. noise: half-width a of the uniform noise U(-a, a) added to the input
    features only (paper §3.2; needs rng). Returns (loss, parts {smooth_l1, soft_ce, top1,
    accept}, grads {head name: grad})."""
    if noise < 0:
        raise InvalidInputError(f"noise={noise} is negative; pass a half-width such as 0.1 (or 0)")
    if noise > 0 and cfg.inputs != "token":
        if rng is None:
            raise InvalidInputError(f"noise={noise} needs rng=np.random.default_rng(seed)")
        draw = rng.uniform(-noise, noise, size=tuple(features.shape))
        features = features + to_device(draw, like=features, dtype=features.dtype)
    loss, parts, (caches, c_l1, c_ce) = _losses(
        head, cfg, target_params, tokens, features, next_features, loss_mask, p_weight
    )
    dpredicted = losses.smooth_l1_backward(1.0, c_l1)
    dlogits = losses.soft_cross_entropy_backward(p_weight, c_ce)
    return loss, parts, head_backward(dpredicted, dlogits, caches, cfg)


# ---------------------------------------------------------------------------- save / load


def _validate_head(head: dict, cfg: Eagle1Config) -> None:
    """The head must hold exactly the tensors of `cfg`, each of its shape, floating point and
    finite (a NaN would make every draft useless, or crash the tree search)."""
    check_head_tensors(head, head_param_shapes(cfg))


def save_head(directory, head: dict, cfg: Eagle1Config, *, target_dir=None, dtype="float32"):
    """Write the head as `config.json` (a one-layer Llama config plus SafeAILab's "bias" and our
    "minieagle_inputs") and `model.safetensors`, replacing `directory` atomically.

    target_dir: the target it was trained for. Its path and, when its weights exist, its
    `target_fingerprint` are recorded, so `load_head(..., target_dir=)` can warn about a head
    used with another target."""
    _validate_head(head, cfg)
    dtype = storage_dtype(dtype)
    config = config_to_hf_dict(cfg.layer, dtype)
    config.update(bias=cfg.fc_bias, minieagle_inputs=cfg.inputs, minieagle_head="eagle1")
    if target_dir is not None:
        config.update(target_record(target_dir))

    def write(new: Path) -> None:
        (new / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        write_tensors(new / WEIGHTS_FILE, head, dtype)

    return write_directory_atomically(
        directory, write, own_files=(CONFIG_FILE, WEIGHTS_FILE), kind="draft head"
    )


def load_head(
    directory, *, target_dir=None, dtype=np.float32
) -> tuple[dict[str, np.ndarray], Eagle1Config]:
    """Read a head written by `save_head`: (head params cast to dtype, its config).

    Checks it as `load_checkpoint` checks a model (files present and readable, config types,
    tensor names, shapes, dtypes, no NaN/inf). target_dir: the target it will draft for; when
    the head records another target's fingerprint, warns (UserWarning) that acceptance will be
    poor. Raises FileNotFoundError or ValueError naming the file, the problem and the fix."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    fix = "train a head with `minieagle train eagle1`"
    d = read_config_json(config_path, fix_missing=fix)
    try:
        bias = True if d.get("bias") is None else config_value("bias", d["bias"], "boolean")
        inputs = d.get("minieagle_inputs", "token+feature")
        cfg = Eagle1Config(config_from_hf_dict(d), fc_bias=bias, inputs=inputs)
    except ValueError as e:
        raise InvalidInputError(f"{config_path}: {e}") from e
    stored = read_tensors(weights_path, fix_missing=fix)
    embed = stored.pop(EMBED, None)  # an export for the official code (`export_official`)
    V, d_model = cfg.layer.vocab_size, cfg.layer.hidden_size
    if embed is not None and tuple(embed.shape) != (V, d_model):
        raise InvalidInputError(
            f"{weights_path}: tensor {EMBED!r} has shape {tuple(embed.shape)}, expected "
            f"{(V, d_model)} (the target's embedding); delete it (minieagle embeds with the "
            "target's own)"
        )
    try:
        _validate_head(stored, cfg)
    except ValueError as e:
        raise InvalidInputError(f"{weights_path} does not match {config_path}: {e}") from e
    if target_dir is not None:
        check_trained_for(d, target_dir, kind="head", stacklevel=3)  # warn at the caller
    return {k: v.astype(dtype, copy=False) for k, v in stored.items()}, cfg


def export_official(head_dir, target_dir, out_dir, *, dtype="float16") -> Path:
    """The head at `head_dir` in the form the official EAGLE code (SafeAILab/EAGLE) loads:
    the same `config.json` and tensors plus `embed_tokens.weight`, the target's embedding.

    The official head module owns an `embed_tokens` and loads its state dict strictly, so a
    file without it is refused there; minieagle's own heads leave it out (the head embeds with
    the target's, and SmolLM2's embedding is 28M parameters against the head's 4M).
    `load_head` reads an exported head too (it checks and drops the embedding)."""
    from minieagle.checkpoint import target_embedding

    head, cfg = load_head(head_dir, target_dir=target_dir, dtype=np.float32)
    embedding, _ = target_embedding(target_dir, cfg.layer.hidden_size, head_dir)
    dtype = storage_dtype(dtype)
    config = read_config_json(Path(head_dir) / CONFIG_FILE, fix_missing="")
    tensors = {**head, EMBED: embedding}

    def write(new: Path) -> None:
        exported = {**config, "dtype": dtype, "torch_dtype": dtype}
        (new / CONFIG_FILE).write_text(json.dumps(exported, indent=2) + "\n")
        write_tensors(new / WEIGHTS_FILE, tensors, dtype)

    return write_directory_atomically(
        out_dir, write, own_files=(CONFIG_FILE, WEIGHTS_FILE), kind="draft head"
    )
