"""EAGLE-3's draft head (Li et al. 2025, §3): one decoder layer that reads the target's fused
low/mid/high features and the next token, predicts that token's successor directly over a
reduced draft vocabulary, and is trained by *training-time test* (TTT) on its own outputs.

At position t the head reads e = Embed(x_{t+1}) (the target's embedding, frozen) and a feature
x_t: the fused target feature g_t = fc([l_t, m_t, h_t]) at real positions, or its own previous
output a at drafted ones (fc is skipped then). Then

    n = [RMSNorm_input(e), RMSNorm_hidden(x_t)]      # [.., T, 2d]: embedding first
    h = x_t + o_proj(attention(q(n), k(n), v(n)))    # the residual is the UN-normed feature
    a = h + down(silu(gate(RMSNorm_post(h))) * up(RMSNorm_post(h)))
    logits = lm_head(RMSNorm_norm(a))                # [.., T, N] over the draft vocabulary

a (pre-norm) is the next step's feature. l, m, h are the residual streams ENTERING target layers
`aux_layers` (default 2, L//2, L-3). Draft id i stands for target id ids[i] = i + d2t[i] (a
`DraftVocab`). Tensor names follow SafeAILab/SpecForge (`fc`, `midlayer.*`, `norm`, `lm_head`).

The paper's ablation (Table 2, "no feature loss + TTT") reads ONE target feature, the top one:
aux_layers = (L,), the residual stream after the last layer (before the final norm), and fc is
[d, d]. Such a head's fused features are as wide as its own outputs, so `head_forward` is told
which it gets (`target_features`) instead of guessing from the width.

TTT (`ttt_loss`) unrolls the head `steps` times over a window: index t at step s simulates
drafting position t + s from the real context <= t and its own chain (see `ttt_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from minieagle import layers, losses, model
from minieagle.backend import arange, array_module, to_host, zeros
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.heads.eagle1 import _with_batch
from minieagle.kvcache import KVCache

PREFIX = "midlayer."
TTT_ATTENTION = ("diagonal", "explicit")
_REBUILD = "rebuild d2t/t2d from the same token ids (DraftVocab(ids, V).d2t / .t2d)"


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """(2, L // 2, L - 3): the target layers whose input streams EAGLE-3 fuses (low, mid, high),
    as in the official code and SGLang. Raises for a target too shallow to give three distinct
    layers (L <= 6)."""
    L = num_layers
    if L < 3:
        raise InvalidInputError(
            f"the target has num_hidden_layers={L}; EAGLE-3 fuses the inputs of three distinct "
            "layers, so it needs a target with at least 3 layers"
        )
    low_mid_high = (2, L // 2, L - 3)
    if not low_mid_high[0] < low_mid_high[1] < low_mid_high[2]:
        raise InvalidInputError(
            f"the default aux layers (2, L//2, L-3) = {low_mid_high} for num_hidden_layers={L} "
            f"are not three distinct increasing layers; pass aux_layers explicitly, e.g. "
            f"(0, {L // 2}, {L - 1})"
        )
    return low_mid_high


def _check_aux_layers(aux_layers, num_layers: int | None) -> tuple[int, ...]:
    """aux_layers as a tuple of ints: three, strictly increasing, in [0, num_layers) (low, mid,
    high), or one in [0, num_layers] (a single feature; num_layers = the top feature, the stream
    after the last layer)."""
    values = tuple(aux_layers)
    if len(values) not in (1, 3) or not all(isinstance(i, int | np.integer) for i in values):
        raise InvalidInputError(
            f"aux_layers={aux_layers!r} must be three layer indices (low, mid, high), e.g. "
            "(2, L // 2, L - 3), or one (a single feature, e.g. (L,): the top feature)"
        )
    values = tuple(int(i) for i in values)
    if len(values) == 1:
        if values[0] < 0 or (num_layers is not None and values[0] > num_layers):
            top = "L" if num_layers is None else num_layers
            raise InvalidInputError(
                f"aux_layers={values} is outside [0, {top}]: one index names the stream entering "
                f"that layer ({top} = after the last layer); pass e.g. ({top},), the top feature"
            )
        return values
    if not 0 <= values[0] < values[1] < values[2]:
        raise InvalidInputError(
            f"aux_layers={values} must be three distinct non-negative layer indices in "
            "increasing order (low, mid, high); pass e.g. (0, 1, 2)"
        )
    if num_layers is not None and values[2] >= num_layers:
        raise InvalidInputError(
            f"aux_layers={values} reach outside the target's layers [0, {num_layers}); pass "
            f"indices below num_hidden_layers={num_layers}"
        )
    return values


@dataclass(frozen=True)
class Eagle3Config:
    """layer: a one-layer LlamaConfig with the target's width, heads, MLP, vocabulary and RoPE.
    aux_layers: 0-based target layers whose INPUT residual stream is fused: three (low, mid,
    high; EAGLE-3) or one (e.g. (L,), the top feature: the paper's ablation without fusion).
    draft_vocab_size: N, the size of the draft vocabulary (1 <= N <= the target's V)."""

    layer: LlamaConfig
    aux_layers: tuple[int, ...]
    draft_vocab_size: int

    def __post_init__(self) -> None:
        if self.layer.num_hidden_layers != 1:
            raise InvalidInputError(
                f"layer has num_hidden_layers={self.layer.num_hidden_layers}; the EAGLE-3 head "
                "is one decoder layer (use Eagle3Config.from_target)"
            )
        object.__setattr__(self, "aux_layers", _check_aux_layers(self.aux_layers, None))
        V, N = self.layer.vocab_size, self.draft_vocab_size
        if not isinstance(N, int | np.integer) or N < 1:
            raise InvalidInputError(
                f"draft_vocab_size={N!r} must be a positive integer; pass e.g. {V} (the full "
                "vocabulary)"
            )
        if N > V:
            raise InvalidInputError(
                f"draft_vocab_size={N} exceeds the target's vocab_size={V}; the draft vocabulary "
                f"is a subset of the target's, so pass a size in [1, {V}]"
            )

    @property
    def num_features(self) -> int:
        """k, the number of target features fused: fc maps [.., k d] to [.., d]."""
        return len(self.aux_layers)

    @classmethod
    def from_target(
        cls,
        target_config: LlamaConfig,
        *,
        aux_layers: tuple[int, ...] | None = None,
        draft_vocab_size: int | None = None,
        intermediate_size: int | None = None,
    ) -> Eagle3Config:
        """The head for a target: same width, MLP, heads, vocabulary and RoPE, one layer; aux
        layers (2, L//2, L-3), the full vocabulary and the target's MLP width unless given."""
        L = target_config.num_hidden_layers
        aux = default_aux_layers(L) if aux_layers is None else _check_aux_layers(aux_layers, L)
        layer = target_config.replace(num_hidden_layers=1)
        if intermediate_size is not None:
            if not isinstance(intermediate_size, int | np.integer) or intermediate_size < 1:
                raise InvalidInputError(
                    f"intermediate_size={intermediate_size!r} must be a positive integer, e.g. "
                    f"{target_config.intermediate_size} (the target's MLP width)"
                )
            layer = layer.replace(intermediate_size=int(intermediate_size))
        return cls(
            layer,
            aux_layers=aux,
            draft_vocab_size=target_config.vocab_size
            if draft_vocab_size is None
            else draft_vocab_size,
        )


# ---------------------------------------------------------------------------- draft vocabulary


@dataclass(frozen=True, eq=False)
class DraftVocab:
    """The draft vocabulary: draft id i predicts target id ids[i].

    ids: int64 [N], strictly increasing target ids in [0, target_vocab_size). The checkpoint
    buffers are derived: d2t [N] = ids - arange(N) (target = draft + d2t[draft]) and t2d bool [V]
    (which target ids the draft can predict)."""

    ids: Any
    target_vocab_size: int

    def __post_init__(self) -> None:
        xp = array_module(self.ids)
        ids = xp.astype(xp.asarray(self.ids), xp.int64)
        object.__setattr__(self, "ids", ids)
        V = self.target_vocab_size
        host = to_host(ids)
        if host.ndim != 1 or host.size == 0:
            raise InvalidInputError(
                f"ids has shape {host.shape}; expected a non-empty 1-D array of target token ids"
            )
        if np.any(host[1:] <= host[:-1]) or host[0] < 0 or host[-1] >= V:
            raise InvalidInputError(
                f"ids must be strictly increasing target ids in [0, {V}), got {host.tolist()}; "
                "sort and deduplicate them (np.unique)"
            )

    @classmethod
    def full(cls, vocab_size: int, like=None) -> DraftVocab:
        """Every target id: d2t is all zeros (the reduced vocabulary switched off)."""
        return cls(arange(vocab_size, like=np.zeros(0) if like is None else like), vocab_size)

    @classmethod
    def from_buffers(cls, d2t, t2d) -> DraftVocab:
        """The vocabulary a checkpoint's d2t [N] and t2d [V] describe (checked to agree)."""
        check_draft_vocab(d2t, t2d, t2d.shape[0])
        return cls(arange(d2t.shape[0], like=d2t, dtype=d2t.dtype) + d2t, t2d.shape[0])

    @property
    def size(self) -> int:
        return self.ids.shape[0]

    @property
    def d2t(self):
        """int64 [N]: target id = draft id + d2t[draft id]."""
        return self.ids - arange(self.size, like=self.ids, dtype=self.ids.dtype)

    @property
    def t2d(self):
        """bool [V]: True at the target ids the draft vocabulary holds."""
        xp = array_module(self.ids)
        every = arange(self.target_vocab_size, like=self.ids, dtype=self.ids.dtype)  # [V]
        slot = xp.clip(xp.searchsorted(self.ids, every), 0, self.size - 1)  # [V]
        return xp.take(self.ids, slot) == every


def draft_vocab_from_counts(counts, size: int) -> DraftVocab:
    """The `size` most frequent target ids (ties: the lower id first), sorted ascending, as in
    the official `scandata`. counts: [V] non-negative occurrences of each id in the
    (loss-masked) training targets."""
    counts = np.asarray(to_host(counts), dtype=np.float64)
    if counts.ndim != 1:
        raise InvalidInputError(f"counts has shape {counts.shape}; expected [vocab_size]")
    V = counts.shape[0]
    if not 1 <= size <= V:
        raise InvalidInputError(
            f"size={size} is outside [1, {V}] (the target's vocab_size); pass a draft "
            "vocabulary size no larger than the target's"
        )
    if np.any(counts < 0):
        raise InvalidInputError(
            f"counts hold negative values (min {counts.min()}); pass occurrence counts (>= 0)"
        )
    most_frequent = np.argsort(-counts, kind="stable")[:size]  # stable: ties keep id order
    return DraftVocab(np.sort(most_frequent).astype(np.int64), V)


def check_draft_vocab(d2t, t2d, target_vocab: int) -> None:
    """Raise unless d2t [N] and t2d [target_vocab] describe the same draft vocabulary: the
    target ids arange(N) + d2t strictly increase inside [0, V), and t2d marks exactly them."""
    d2t, t2d = to_host(d2t), to_host(t2d)
    if d2t.ndim != 1 or d2t.size == 0:
        raise InvalidInputError(
            f"d2t has shape {d2t.shape}; expected [draft_vocab_size]; {_REBUILD}"
        )
    if t2d.shape != (target_vocab,):
        raise InvalidInputError(
            f"t2d has shape {t2d.shape}; expected ({target_vocab},) (the target's vocab_size); "
            f"{_REBUILD}"
        )
    N = d2t.shape[0]
    ids = np.arange(N) + d2t  # [N]
    if np.any(ids[1:] <= ids[:-1]):
        i = int(np.argmax(ids[1:] <= ids[:-1])) + 1
        raise InvalidInputError(
            f"d2t maps draft ids {i - 1} and {i} to target ids {ids[i - 1]} and {ids[i]}, "
            f"which do not increase; {_REBUILD}"
        )
    if ids[0] < 0 or ids[-1] >= target_vocab:
        bad = int(ids[0] if ids[0] < 0 else ids[-1])
        raise InvalidInputError(
            f"d2t maps a draft id to target id {bad}, outside [0, {target_vocab}); {_REBUILD}"
        )
    marked = int(np.sum(t2d))
    if marked != N:
        raise InvalidInputError(
            f"t2d marks {marked} target ids but d2t has {N} draft ids; {_REBUILD}"
        )
    if not np.all(t2d[ids]):
        i = int(np.argmin(t2d[ids]))
        raise InvalidInputError(
            f"d2t maps draft id {i} to target id {ids[i]}, which t2d does not mark; {_REBUILD}"
        )


def draft_to_target(draft_ids, vocab: DraftVocab):
    """Target ids of draft ids (any shape): id + d2t[id], i.e. vocab.ids[id]."""
    xp = array_module(draft_ids)
    flat = xp.take(vocab.ids, xp.reshape(draft_ids, (-1,)))  # [n]
    return xp.reshape(flat, draft_ids.shape)


# ---------------------------------------------------------------------------- parameters


def head_param_shapes(cfg: Eagle3Config) -> dict[str, tuple[int, ...]]:
    """Name -> shape ([out, in]) of every trainable tensor, in the SpecForge/SGLang layout."""
    layer = cfg.layer
    d, inter, hd = layer.hidden_size, layer.intermediate_size, layer.head_dim
    q_out, kv_out = layer.num_attention_heads * hd, layer.num_key_value_heads * hd
    p = PREFIX
    return {
        "fc.weight": (d, cfg.num_features * d),  # [d, kd]: [d, 3d] fusing three features
        p + "input_layernorm.weight": (d,),
        p + "hidden_norm.weight": (d,),
        p + "self_attn.q_proj.weight": (q_out, 2 * d),
        p + "self_attn.k_proj.weight": (kv_out, 2 * d),
        p + "self_attn.v_proj.weight": (kv_out, 2 * d),
        p + "self_attn.o_proj.weight": (d, q_out),
        p + "post_attention_layernorm.weight": (d,),
        p + "mlp.gate_proj.weight": (inter, d),
        p + "mlp.up_proj.weight": (inter, d),
        p + "mlp.down_proj.weight": (d, inter),
        "norm.weight": (d,),
        "lm_head.weight": (cfg.draft_vocab_size, d),
    }


def init_head(cfg: Eagle3Config, seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    """Fresh head: norms at 1; linear weights N(0, initializer_range), o_proj and down_proj
    scaled by 1/sqrt(2) as `model.init_params` scales a one-layer model's; fc as nn.Linear
    (uniform in ±1/sqrt(k d)), so g keeps a third of its input's variance."""
    rng = np.random.default_rng(seed)
    std = cfg.layer.initializer_range
    fc_bound = 1.0 / np.sqrt(cfg.num_features * cfg.layer.hidden_size)
    head = {}
    for name, shape in head_param_shapes(cfg).items():
        if name.endswith("norm.weight"):
            head[name] = np.ones(shape, dtype=dtype)
        elif name == "fc.weight":
            head[name] = rng.uniform(-fc_bound, fc_bound, size=shape).astype(dtype)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            head[name] = (rng.standard_normal(shape) * std / np.sqrt(2)).astype(dtype)
        else:
            head[name] = (rng.standard_normal(shape) * std).astype(dtype)
    return head


def widen_mlp(head: dict, cfg: Eagle3Config, intermediate_size: int, seed: int = 0):
    """(head, cfg) with an MLP of intermediate_size units computing the same function: the old
    units keep their weights; each new unit's gate and up rows start as `init_head` draws them
    and its down_proj column at zero, so the unit adds nothing until training moves that column
    (its gradient, silu(gate · x) * (up · x), is not zero). A trained head continued wider
    starts where it stopped, not from scratch."""
    old = cfg.layer.intermediate_size
    if not isinstance(intermediate_size, int | np.integer) or intermediate_size < old:
        raise InvalidInputError(
            f"intermediate_size={intermediate_size!r} is narrower than the head's {old}; a head "
            f"can only be widened (pass at least {old}, or train a fresh head)"
        )
    wide = replace(cfg, layer=cfg.layer.replace(intermediate_size=int(intermediate_size)))
    fresh = init_head(wide, seed=seed)
    xp = array_module(head["fc.weight"])
    out = dict(head)
    for name in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
        w = head[PREFIX + name]
        new_rows = xp.asarray(fresh[PREFIX + name][old:], dtype=w.dtype)
        out[PREFIX + name] = xp.concatenate([w, new_rows], axis=0)
    down = head[PREFIX + "mlp.down_proj.weight"]
    zeros = xp.zeros((down.shape[0], intermediate_size - old), dtype=down.dtype)
    out[PREFIX + "mlp.down_proj.weight"] = xp.concatenate([down, zeros], axis=1)
    return out, wide


def widen_vocab(head: dict, cfg: Eagle3Config, vocab: DraftVocab, counts, size: int,
                target_lm_weight):
    """(head, cfg, vocab) with a draft vocabulary of `size` ids: the head's own ids and the
    `size - N` most frequent others by counts [V] (ties: the lower id first). Kept ids keep
    their trained LM-head rows; a new id's row starts as its row of the target's LM head
    (target_lm_weight [V, d]) through the linear map that best carries the target's rows of
    the kept ids onto the head's (least squares over the N kept ids), so a new token starts
    scored the way the head scores tokens the target places like it, not from nothing."""
    old_ids = to_host(vocab.ids)
    grown = grow_draft_vocab(vocab, counts, size)
    ids = to_host(grown.ids)
    added = np.setdiff1d(ids, old_ids)
    weight = head["lm_head.weight"]
    xp = array_module(weight)
    rows = np.asarray(to_host(target_lm_weight), dtype=np.float64)
    old_rows = np.asarray(to_host(weight), dtype=np.float64)
    fit, *_ = np.linalg.lstsq(rows[old_ids], old_rows, rcond=None)  # [d, d]
    new = np.empty((len(ids), weight.shape[1]), dtype=np.float64)
    new[np.searchsorted(ids, old_ids)] = old_rows
    new[np.searchsorted(ids, added)] = rows[added] @ fit
    out = dict(head)
    out["lm_head.weight"] = xp.asarray(new.astype(to_host(weight).dtype))
    return out, replace(cfg, draft_vocab_size=len(ids)), grown


def grow_draft_vocab(vocab: DraftVocab, counts, size: int) -> DraftVocab:
    """The draft vocabulary of `size` ids that keeps vocab's and adds the `size - N` most
    frequent others by counts [V] (ties: the lower id first)."""
    N, V = vocab.size, vocab.target_vocab_size
    if not isinstance(size, int | np.integer) or not N <= size <= V:
        raise InvalidInputError(
            f"size={size!r} is outside [{N}, {V}]: a head's draft vocabulary ({N} ids) can only "
            f"grow, up to the target's {V}; pass a size in that range or train a fresh head"
        )
    counts = np.asarray(to_host(counts), dtype=np.float64)
    if counts.shape != (V,):
        raise InvalidInputError(f"counts has shape {counts.shape}; expected [{V}]")
    old_ids = to_host(vocab.ids)
    others = np.setdiff1d(np.arange(V), old_ids)  # ascending, so a stable sort breaks ties by id
    added = others[np.argsort(-counts[others], kind="stable")[: size - N]]
    return DraftVocab(array_module(vocab.ids).asarray(np.union1d(old_ids, added)), V)


def new_head_cache(cfg: Eagle3Config, head: dict, capacity: int, batch: int = 1) -> KVCache:
    """An empty one-layer KV cache for the head, on the device and dtype of its weights."""
    layer = cfg.layer
    return KVCache(1, batch, layer.num_key_value_heads, layer.head_dim, capacity, head["fc.weight"])


def fuse_features(hidden: dict, aux_layers) -> Any:
    """[l, m, h] [.., T, 3d]: the target's `model.forward(..., output_hidden=aux_layers)` taps
    concatenated in the order of aux_layers (low, mid, high for a config's aux_layers); for a
    single aux layer, that tap itself [.., T, d]."""
    missing = [i for i in aux_layers if i not in hidden]
    if missing:
        raise InvalidInputError(
            f"the target's hidden states lack the inputs of layers {missing}; run "
            f"model.forward(..., output_hidden={tuple(aux_layers)})"
        )
    xp = array_module(hidden[aux_layers[0]])
    return xp.concat([hidden[i] for i in aux_layers], axis=-1)  # k x [.., T, d] -> [.., T, kd]


# ---------------------------------------------------------------------------- the decoder layer


def _attention_input_forward(head, cfg: Eagle3Config, embedded, hidden):
    """[RMSNorm_input(e), RMSNorm_hidden(x)]: e, x [B, T, d] -> ([B, T, 2d], cache)."""
    eps = cfg.layer.rms_norm_eps
    n_e, c_e = layers.rmsnorm_forward(embedded, head[PREFIX + "input_layernorm.weight"], eps)
    n_h, c_h = layers.rmsnorm_forward(hidden, head[PREFIX + "hidden_norm.weight"], eps)
    xp = array_module(n_e)
    return xp.concat([n_e, n_h], axis=-1), (c_e, c_h)  # [B, T, 2d]


def _attention_input_backward(dn, cache):
    """dn [B, T, 2d] -> (dembedded [B, T, d], dhidden [B, T, d], {name: grad})."""
    c_e, c_h = cache
    d, grads = dn.shape[-1] // 2, {}
    de, grads[PREFIX + "input_layernorm.weight"] = layers.rmsnorm_backward(dn[..., :d], c_e)
    dh, grads[PREFIX + "hidden_norm.weight"] = layers.rmsnorm_backward(dn[..., d:], c_h)
    return de, dh, grads


def midlayer_forward(head, cfg: Eagle3Config, embedded, hidden, cos, sin, mask, cache=None):
    """EAGLE-3's decoder layer. embedded, hidden [B, T, d]; cos, sin [T, hd]; mask bool
    [T, past + T]; cache: the head's KVCache or None -> (out [B, T, d], cache).

    The Llama block of `model` with two changes: q, k, v read [RMSNorm_input(e),
    RMSNorm_hidden(x)] (2d wide), and the residual is the un-normed feature x."""
    n, c_in = _attention_input_forward(head, cfg, embedded, hidden)  # [B, T, 2d]
    (q, k, v), c_qkv = model.qkv_forward(head, PREFIX, cfg.layer, n, cos, sin)
    if cache is not None:
        k, v = cache.append(0, k, v)  # [B, Hkv, S, hd]
    a, c_att = layers.attention_forward(q, k, v, mask)  # [B, H, T, hd]
    out, c_post = model.post_attention_forward(head, PREFIX, cfg.layer, hidden, a)
    return out, (c_in, c_qkv, c_att, c_post)


def midlayer_backward(dout, cache, cfg: Eagle3Config):
    """dout [B, T, d] -> (dembedded [B, T, d], dhidden [B, T, d], {name: grad}); for a forward
    without KV cache (as `model.decoder_layer_backward`)."""
    c_in, c_qkv, c_att, c_post = cache
    dresidual, da, grads = model.post_attention_backward(dout, c_post, PREFIX, cfg.layer)
    dq, dk, dv = layers.attention_backward(da, c_att)
    dn, qkv_grads = model.qkv_backward(dq, dk, dv, c_qkv, PREFIX)
    dembedded, dhidden, norm_grads = _attention_input_backward(dn, c_in)
    return dembedded, dresidual + dhidden, {**grads, **qkv_grads, **norm_grads}


def _readout_forward(head, cfg: Eagle3Config, out):
    """Draft logits lm_head(RMSNorm_norm(a)): a [B, T, d] -> ([B, T, N], cache)."""
    normed, c_norm = layers.rmsnorm_forward(out, head["norm.weight"], cfg.layer.rms_norm_eps)
    logits, c_head = layers.linear_forward(normed, head["lm_head.weight"])  # [B, T, N]
    return logits, (c_norm, c_head)


def _readout_backward(dlogits, cache):
    """dlogits [B, T, N] -> (dout [B, T, d], {name: grad})."""
    c_norm, c_head = cache
    grads = {}
    dnormed, grads["lm_head.weight"] = layers.linear_backward(dlogits, c_head)
    dout, grads["norm.weight"] = layers.rmsnorm_backward(dnormed, c_norm)
    return dout, grads


# ---------------------------------------------------------------------------- head forward


def _check_target(cfg: Eagle3Config, target_params: dict) -> None:
    shape = tuple(target_params["model.embed_tokens.weight"].shape)
    want = (cfg.layer.vocab_size, cfg.layer.hidden_size)
    if shape != want:
        raise InvalidInputError(
            f"the target's embedding is {shape} but the head expects (vocab_size, hidden_size) = "
            f"{want}; build the head for this target (Eagle3Config.from_target)"
        )


def _check_token_ids(cfg: Eagle3Config, ids) -> None:
    xp = array_module(ids)
    if int(xp.min(ids)) < 0 or int(xp.max(ids)) >= cfg.layer.vocab_size:
        raise InvalidInputError(
            f"tokens hold ids outside [0, vocab_size={cfg.layer.vocab_size}); encode text with "
            "the target's tokenizer"
        )


def _feature_width_error(
    cfg: Eagle3Config, width: int, target_features: bool | None = None
) -> InvalidInputError:
    d, k = cfg.layer.hidden_size, cfg.num_features
    fused = f"{k} * hidden_size = {k * d} (the target's fused features, fuse_features)"
    own = f"hidden_size = {d} (the head's own outputs)"
    if target_features is None:
        expected = f"{fused} or {own}" if k > 1 else f"hidden_size = {d}"
    else:
        expected = fused if target_features else own
    return InvalidInputError(f"features have width {width} but the head expects {expected}")


def _reads_target_features(cfg: Eagle3Config, width: int, target_features: bool | None) -> bool:
    """Whether features of this width go through fc: target_features when given (checked
    against the width), else inferred from the width, which a one-feature head cannot do."""
    d, k = cfg.layer.hidden_size, cfg.num_features
    if target_features is not None and not isinstance(target_features, bool):
        raise InvalidInputError(
            f"target_features={target_features!r} must be True (the target's fused features, "
            "through fc), False (the head's own outputs) or None (inferred from the width)"
        )
    if target_features is None:
        if k == 1 and width == d:
            raise InvalidInputError(
                f"features of width {width} are ambiguous for a head with one aux layer "
                f"(aux_layers={cfg.aux_layers}): the target's feature and the head's own outputs "
                "are both hidden_size wide; pass target_features=True (the target's, through "
                "fc) or target_features=False (the head's own outputs, fc skipped)"
            )
        if width not in (k * d, d):
            raise _feature_width_error(cfg, width)
        return width == k * d
    if width != (k * d if target_features else d):
        raise _feature_width_error(cfg, width, target_features)
    return target_features


def head_forward(
    head: dict,
    cfg: Eagle3Config,
    target_params: dict,
    tokens,
    features,
    *,
    target_features: bool | None = None,
    position_ids=None,
    attention_mask=None,
    cache: KVCache | None = None,
    keep_caches: bool = False,
):
    """The head over T new positions, optionally appending to its KV cache.

    tokens int [T] or [B, T]: x_{t+1}. features: [.., T, k d] fused target features (fc maps them
    to d; k = cfg.num_features) or [.., T, d] the head's own outputs (fc skipped).
    target_features: which of the two `features` are, True or False; None infers it from the
    width, and raises for a one-feature head (k = 1), whose two widths are equal. position_ids
    int [T] (default cache.length + arange(T)). attention_mask bool [T, past + T] (default
    causal; a tree mask for draft trees). Returns (hidden_out [.., T, d] (pre-norm: the next
    step's feature), logits [.., T, N] over the draft vocabulary, caches or None); the batch
    axis is present iff it was in the inputs.
    """
    _check_target(cfg, target_params)
    ids, batched = _with_batch(tokens, "tokens", 1)  # [B, T]
    f, features_batched = _with_batch(features, "features", 2)  # [B, T, kd] or [B, T, d]
    if batched != features_batched or tuple(ids.shape) != tuple(f.shape[:2]):
        raise InvalidInputError(
            f"tokens {tuple(tokens.shape)} and features {tuple(features.shape)} disagree on "
            "(batch, positions); pair x_{t+1} with its feature position by position"
        )
    _check_token_ids(cfg, ids)
    if _reads_target_features(cfg, f.shape[-1], target_features):
        hidden, c_fc = layers.linear_forward(f, head["fc.weight"])  # [B, T, kd] -> [B, T, d]
    else:
        hidden, c_fc = f, None
    past = cache.length if cache is not None else 0
    cos, sin, attention_mask = model.placement(
        cfg.layer, hidden.shape[1], past, position_ids, attention_mask, like=hidden
    )
    embedded, _ = layers.embedding_forward(target_params["model.embed_tokens.weight"], ids)
    out, c_mid = midlayer_forward(head, cfg, embedded, hidden, cos, sin, attention_mask, cache)
    logits, c_read = _readout_forward(head, cfg, out)  # [B, T, N]
    caches = (c_fc, c_mid, c_read, batched) if keep_caches else None
    if not batched:
        out, logits = out[0, ...], logits[0, ...]
    return out, logits, caches


def head_backward(dhidden_out, dlogits, caches, cfg: Eagle3Config) -> dict:
    """Gradients of every head tensor (the target is frozen) from upstream gradients on
    hidden_out [.., T, d] and logits [.., T, N] (either may be None). fc.weight's is zero when
    the features were the head's own outputs."""
    c_fc, c_mid, c_read, batched = caches
    if not batched:
        dhidden_out = None if dhidden_out is None else dhidden_out[None, ...]
        dlogits = None if dlogits is None else dlogits[None, ...]
    normed = c_read[0][0]  # [B, T, d]: the readout's RMSNorm output, for shape and device
    if dlogits is None:
        dlogits = zeros((*normed.shape[:2], cfg.draft_vocab_size), like=normed)
    dout, grads = _readout_backward(dlogits, c_read)
    if dhidden_out is not None:
        dout = dout + dhidden_out
    _, dhidden, mid_grads = midlayer_backward(dout, c_mid, cfg)
    grads.update(mid_grads)
    if c_fc is None:
        grads["fc.weight"] = zeros(head_param_shapes(cfg)["fc.weight"], like=normed)
    else:
        _, grads["fc.weight"] = layers.linear_backward(dhidden, c_fc, input_grad=False)
    return {name: grads[name] for name in head_param_shapes(cfg)}


# ---------------------------------------------------------------------------- TTT attention


def diagonal_attention_forward(q, keys, values, causal_block):
    """Training-time-test attention of step s (paper §3.2, Fig. 6), without materialising the
    [T, (s+1)T] mask: the query at index t sees the step-0 keys that causal_block allows (indices
    <= t) and, of every later step 1..s, only the key at index t (the "diagonal").

    q [B, H, T, hd]; keys, values: s + 1 arrays [B, Hkv, T, hd] (steps 0..s); causal_block bool
    [T, T] -> (out [B, H, T, hd], cache). Causal scores [.., T, T] and s per-index dot products
    [.., T] share one softmax; out = P_causal @ V_0 + sum_j P_j * V_j.
    """
    ### BEGIN SOLUTION eagle3_ttt
    xp = array_module(q)
    B, H, T, hd = q.shape
    Hkv = keys[0].shape[1]
    qg = xp.reshape(q, (B, Hkv, H // Hkv, T, hd))  # [B, Hkv, G, T, hd]
    scale = 1.0 / hd**0.5
    causal = (qg @ keys[0][:, :, None, :, :].mT) * scale  # [B, Hkv, G, T, T]
    scores = [xp.where(causal_block, causal, -xp.inf)]
    for k in keys[1:]:
        diagonal = xp.sum(qg * k[:, :, None, :, :], axis=-1) * scale  # [B, Hkv, G, T]
        scores.append(diagonal[..., None])  # [B, Hkv, G, T, 1]
    probs = layers.softmax(xp.concat(scores, axis=-1))  # [B, Hkv, G, T, T + s]
    out = probs[..., :T] @ values[0][:, :, None, :, :]  # [B, Hkv, G, T, hd]
    for j, v in enumerate(values[1:]):
        out = out + probs[..., T + j, None] * v[:, :, None, :, :]
    return xp.reshape(out, (B, H, T, hd)), (qg, tuple(keys), tuple(values), probs, scale)
    ### END SOLUTION


def diagonal_attention_backward(dout, cache):
    """dout [B, H, T, hd] -> (dq [B, H, T, hd], dkeys, dvalues: s + 1 arrays [B, Hkv, T, hd])."""
    ### BEGIN SOLUTION eagle3_ttt
    qg, keys, values, probs, scale = cache
    xp = array_module(dout)
    B, Hkv, G, T, hd = qg.shape
    dout = xp.reshape(dout, qg.shape)  # [B, Hkv, G, T, hd]
    dprobs = [dout @ values[0][:, :, None, :, :].mT]  # [B, Hkv, G, T, T]
    for v in values[1:]:
        dprobs.append(xp.sum(dout * v[:, :, None, :, :], axis=-1)[..., None])  # [.., T, 1]
    dprobs = xp.concat(dprobs, axis=-1)  # [B, Hkv, G, T, T + s]
    dscores = probs * (dprobs - xp.sum(dprobs * probs, axis=-1, keepdims=True))
    dcausal = dscores[..., :T]  # [B, Hkv, G, T, T]
    dq = dcausal @ keys[0][:, :, None, :, :]  # [B, Hkv, G, T, hd]
    dkeys = [xp.sum(dcausal.mT @ qg, axis=2) * scale]  # [B, Hkv, T, hd]
    dvalues = [xp.sum(probs[..., :T].mT @ dout, axis=2)]
    for j in range(1, len(keys)):
        dscore = dscores[..., T + j - 1, None]  # [B, Hkv, G, T, 1]
        dq = dq + dscore * keys[j][:, :, None, :, :]
        dkeys.append(xp.sum(dscore * qg, axis=2) * scale)
        dvalues.append(xp.sum(probs[..., T + j - 1, None] * dout, axis=2))
    return xp.reshape(dq * scale, (B, Hkv * G, T, hd)), dkeys, dvalues
    ### END SOLUTION


def _explicit_attention_forward(q, keys, values, causal_block):
    """The same attention spelled out: keys/values of steps 0..s concatenated along the sequence
    axis, one ordinary masked attention with mask [T, (s+1)T] = [causal_block | I | ... | I]."""
    xp = array_module(q)
    T = q.shape[2]
    index = arange(T, like=causal_block)
    same_index = index[:, None] == index[None, :]  # [T, T]
    mask = xp.concat([causal_block] + [same_index] * (len(keys) - 1), axis=1)  # [T, (s+1)T]
    k, v = xp.concat(keys, axis=2), xp.concat(values, axis=2)  # [B, Hkv, (s+1)T, hd]
    out, c_att = layers.attention_forward(q, k, v, mask)
    return out, (c_att, len(keys), T)


def _explicit_attention_backward(dout, cache):
    c_att, steps, T = cache
    dq, dk, dv = layers.attention_backward(dout, c_att)  # dk, dv [B, Hkv, (s+1)T, hd]
    dkeys = [dk[:, :, j * T : (j + 1) * T, :] for j in range(steps)]
    dvalues = [dv[:, :, j * T : (j + 1) * T, :] for j in range(steps)]
    return dq, dkeys, dvalues


_ATTENTION_PAIRS = {
    "diagonal": (diagonal_attention_forward, diagonal_attention_backward),
    "explicit": (_explicit_attention_forward, _explicit_attention_backward),
}


# ---------------------------------------------------------------------------- training-time test


def _causal_block(T: int, step: int, old_diagonal_mask: bool, like):
    """bool [T, T]: the step-0 keys a step-`step` query sees. The pre-2025-09 official code also
    masked, after each step j, the offset-j diagonal, leaving keys <= t - step: wrong (kept only
    as a negative control)."""
    block = model.causal_mask(0, T, like=like)
    if old_diagonal_mask and step > 0:
        index = arange(T, like=like)
        block = block & (index[None, :] <= index[:, None] - step)
    return block


def _ttt_forward(
    head,
    cfg: Eagle3Config,
    target_params,
    tokens,
    fused,
    *,
    steps: int,
    attention: str = "diagonal",
    old_diagonal_mask: bool = False,
    pe_shift: bool = True,
):
    """The head unrolled `steps` times over windows: (per-step logits [B, T, N], caches).

    old_diagonal_mask and pe_shift=False build the two historical bugs (negative controls)."""
    xp = array_module(fused)
    B, T = fused.shape[:2]
    layer = cfg.layer
    embed = target_params["model.embed_tokens.weight"]
    attend, _ = _ATTENTION_PAIRS[attention]
    ### BEGIN SOLUTION eagle3_ttt
    padding = zeros((B, steps - 1), like=tokens, dtype=tokens.dtype)
    chain = xp.concat([tokens, padding], axis=1)  # [B, T + steps]: x_0 .. x_T, then pad id 0
    index = arange(T, like=fused)
    # Step 0 reads the target's features, always through fc (also when k = 1 and they are d wide).
    hidden, c_fc = layers.linear_forward(fused, head["fc.weight"])  # [B, T, kd] -> [B, T, d]
    keys, values, step_logits, step_caches = [], [], [], []
    for s in range(steps):
        embedded, _ = layers.embedding_forward(embed, chain[:, 1 + s : 1 + s + T])  # x_{t+1+s}
        positions = index + s if pe_shift else index  # the "PE shift": t + s
        cos, sin = layers.rope_tables(positions, layer.head_dim, layer.rope_theta, fused.dtype)
        n, c_in = _attention_input_forward(head, cfg, embedded, hidden)  # [B, T, 2d]
        (q, k, v), c_qkv = model.qkv_forward(head, PREFIX, layer, n, cos, sin)
        keys.append(k)
        values.append(v)
        block = _causal_block(T, s, old_diagonal_mask, like=index)
        a, c_att = attend(q, keys, values, block)  # [B, H, T, hd]
        out, c_post = model.post_attention_forward(head, PREFIX, layer, hidden, a)
        logits, c_read = _readout_forward(head, cfg, out)  # [B, T, N]
        step_logits.append(logits)
        step_caches.append((c_in, c_qkv, c_att, c_post, c_read))
        hidden = out  # the draft's own output is the next step's feature
    return step_logits, (c_fc, step_caches, attention)
    ### END SOLUTION


def _add(total: dict, grads: dict) -> None:
    for name, grad in grads.items():
        total[name] = grad if name not in total else total[name] + grad


def _ttt_backward(step_dlogits, caches, cfg: Eagle3Config) -> dict:
    """Every head tensor's gradient through all unrolled steps, last step first: each step's
    output gets its loss's gradient plus the next step's (hidden_norm and residual) gradient,
    and each step's keys/values collect the gradients of every later query that saw them."""
    ### BEGIN SOLUTION eagle3_ttt
    c_fc, step_caches, attention = caches
    _, attend_backward = _ATTENTION_PAIRS[attention]
    steps = len(step_caches)
    dkeys, dvalues = [None] * steps, [None] * steps
    grads: dict = {}
    dnext = None  # gradient on step s's output from step s + 1's feature input
    for s in reversed(range(steps)):
        c_in, c_qkv, c_att, c_post, c_read = step_caches[s]
        dout, g = _readout_backward(step_dlogits[s], c_read)
        _add(grads, g)
        if dnext is not None:
            dout = dout + dnext
        dresidual, da, g = model.post_attention_backward(dout, c_post, PREFIX, cfg.layer)
        _add(grads, g)
        dq, dks, dvs = attend_backward(da, c_att)
        for j in range(s + 1):
            dkeys[j] = dks[j] if dkeys[j] is None else dkeys[j] + dks[j]
            dvalues[j] = dvs[j] if dvalues[j] is None else dvalues[j] + dvs[j]
        dn, g = model.qkv_backward(dq, dkeys[s], dvalues[s], c_qkv, PREFIX)  # complete by now
        _add(grads, g)
        _, dhidden, g = _attention_input_backward(dn, c_in)
        _add(grads, g)
        dnext = dresidual + dhidden
    _, grads["fc.weight"] = layers.linear_backward(dnext, c_fc)
    return {name: grads[name] for name in head_param_shapes(cfg)}
    ### END SOLUTION


def _shift(x, s: int):
    """x [B, T, ...] moved s positions left along axis 1, the last s positions zero (False)."""
    s = min(s, x.shape[1])  # steps may outnumber the window's positions
    if s == 0:
        return x
    pad = zeros((x.shape[0], s, *x.shape[2:]), like=x)
    return array_module(x).concat([x[:, s:, ...], pad], axis=1)


@dataclass
class DraftTargets:
    """What `ttt_loss` reads of the target's logits [B, T, V], without the whole vocabulary:
    `logits` [B, T, N], the logits on the draft ids (vocab.ids, in draft-id order); `top` int
    [B, T], the argmax over all V (a target id); `lse` [B, T], the logsumexp over all V, so that
    exp(logits - lse) is the target's probability of each draft id. `draft_targets` makes them
    from whole logits; `distill` records top and lse as it writes its shards
    (feature_cache.TARGET_STATS), and a head trained on them multiplies the target's final
    features by the N draft rows of its LM head only, not all V (docs/distill.md)."""

    logits: Any
    top: Any
    lse: Any


def draft_targets(target_logits, vocab: DraftVocab) -> DraftTargets:
    """The `DraftTargets` of whole logits [B, T, V] (V = vocab.target_vocab_size)."""
    xp = array_module(target_logits)
    return DraftTargets(
        logits=xp.take(target_logits, vocab.ids, axis=-1),
        top=xp.argmax(target_logits, axis=-1),
        lse=layers.logsumexp(target_logits),
    )


def _check_ttt_inputs(cfg, vocab, tokens, fused, target_logits, loss_mask, steps, attention):
    if attention not in TTT_ATTENTION:
        raise InvalidInputError(
            f"attention={attention!r} is not one of {TTT_ATTENTION}; pass 'diagonal'"
        )
    if not isinstance(steps, int) or steps < 1:
        raise InvalidInputError(f"steps={steps!r} is below 1; pass a count such as 7")
    if vocab.size != cfg.draft_vocab_size or vocab.target_vocab_size != cfg.layer.vocab_size:
        raise InvalidInputError(
            f"the draft vocabulary maps {vocab.size} ids into {vocab.target_vocab_size} but the "
            f"head has draft_vocab_size={cfg.draft_vocab_size} over vocab_size="
            f"{cfg.layer.vocab_size}; build the vocabulary for this head"
        )
    if fused.ndim != 3:
        raise InvalidInputError(
            f"fused has shape {tuple(fused.shape)}; expected [B, T, {cfg.num_features} * "
            "hidden_size]"
        )
    if fused.shape[-1] != cfg.num_features * cfg.layer.hidden_size:
        raise _feature_width_error(cfg, fused.shape[-1], target_features=True)
    B, T = fused.shape[:2]
    want = {
        "tokens": (tokens, (B, T + 1)),
        "target_logits": (target_logits, (B, T, cfg.layer.vocab_size)),
        "loss_mask": (loss_mask, (B, T)),
    }
    if isinstance(target_logits, DraftTargets):
        del want["target_logits"]
        want["target_logits.logits"] = (target_logits.logits, (B, T, cfg.draft_vocab_size))
        want["target_logits.top"] = (target_logits.top, (B, T))
        want["target_logits.lse"] = (target_logits.lse, (B, T))
    for name, (x, shape) in want.items():
        if tuple(x.shape) != shape:
            raise InvalidInputError(
                f"{name} has shape {tuple(x.shape)}; expected {shape} for fused of shape "
                f"{tuple(fused.shape)} (tokens [B, T + 1], target_logits [B, T, V], "
                "loss_mask [B, T])"
            )
    _check_token_ids(cfg, tokens)


def ttt_loss(
    head,
    cfg: Eagle3Config,
    target_params,
    vocab: DraftVocab,
    tokens,
    fused,
    target_logits,
    loss_mask,
    *,
    steps: int = 7,
    step_weight: float = 0.8,
    attention: str = "diagonal",
    grads: bool = True,
) -> tuple[float, dict, dict | None]:
    """The training-time-test loss over a batch of windows and every head tensor's gradient.

    tokens int [B, T + 1]: the window x_0 .. x_T. fused [B, T, kd]: the target's fused features
    at positions 0 .. T-1. target_logits [B, T, V]: row t holds the target's logits at position
    t + 1 (its prediction of x_{t+2}); or their `DraftTargets`, all the loss reads of them
    (the same loss, without the whole vocabulary). loss_mask [B, T]: whether row t's label
    counts.

    Step s = 0 .. steps-1, index t simulates drafting position t + s: it reads token x_{t+1+s}
    (teacher-forced) and, for s = 0, the feature g_t = fc(fused_t), else its own output at index t
    from step s-1; its RoPE position is t + s; it attends to step-0 keys at indices <= t and to
    index t of each step 1..s. Its label is softmax(target_logits[t+s] over the draft ids), counted
    where loss_mask[t+s] and the target's argmax (over the full vocabulary) is a draft id;
    indices with t + s >= T count nowhere. loss_s = sum of soft-CE over counted positions / (B T)
    (the official mean over all positions); loss = sum_s step_weight^s loss_s.

    attention: "diagonal" (fast) or "explicit" (concatenated keys and an explicit mask; the
    oracle). Returns (loss, parts, grads): parts["step_loss"], ["top1"] (the draft's argmax is
    the target's) and ["accept"] (sum_v min(p_v, q_v), the acceptance of a token sampled from
    q), each a list over steps, top1/accept averaged over positions where loss_mask holds.
    grads=False skips the backward pass (grads None): what scoring a head needs, at about a
    third of the cost.
    """
    _check_ttt_inputs(cfg, vocab, tokens, fused, target_logits, loss_mask, steps, attention)
    xp = array_module(fused)
    B, T = fused.shape[:2]
    step_logits, caches = _ttt_forward(
        head, cfg, target_params, tokens, fused, steps=steps, attention=attention
    )
    targets = target_logits  # logits on the draft ids, argmax and logsumexp over all V
    if not isinstance(targets, DraftTargets):
        targets = draft_targets(target_logits, vocab)
    ### BEGIN SOLUTION eagle3_ttt
    target_top = targets.top  # [B, T]
    in_draft_vocab = xp.reshape(xp.take(vocab.t2d, xp.reshape(target_top, (-1,))), (B, T))
    labels = layers.softmax(targets.logits)  # [B, T, N]
    target_on_draft = xp.exp(targets.logits - targets.lse[..., None])  # [B, T, N]
    requested = xp.astype(loss_mask, xp.bool)
    counted = requested & in_draft_vocab
    total, parts, step_dlogits = 0.0, {"step_loss": [], "top1": [], "accept": []}, []
    for s, logits in enumerate(step_logits):  # index t at step s is scored against row t + s
        ce, c_ce = losses.soft_cross_entropy_forward(logits, _shift(labels, s), _shift(counted, s))
        per_all = c_ce[3] / (B * T)  # soft_cross_entropy averages over counted positions
        loss_s = float(ce) * per_all
        weight = step_weight**s
        total += weight * loss_s
        step_dlogits.append(losses.soft_cross_entropy_backward(weight * per_all, c_ce))
        weights = xp.astype(_shift(requested, s), logits.dtype)  # [B, T]
        count = max(float(xp.sum(weights)), 1.0)
        draft_top = draft_to_target(xp.argmax(logits, axis=-1), vocab)  # [B, T]
        agree = xp.astype(draft_top == _shift(target_top, s), logits.dtype)
        q = c_ce[4]  # the draft's probabilities, kept by the soft-CE forward
        overlap = xp.sum(xp.minimum(q, _shift(target_on_draft, s)), axis=-1)  # [B, T]
        parts["step_loss"].append(loss_s)
        parts["top1"].append(float(xp.sum(agree * weights)) / count)
        parts["accept"].append(float(xp.sum(overlap * weights)) / count)
    ### END SOLUTION
    return total, parts, _ttt_backward(step_dlogits, caches, cfg) if grads else None
