"""The Llama decoder: parameters, forward (with KV cache, masks, positions, feature taps), backward.

Parameters are a flat dict keyed by Hugging Face `LlamaForCausalLM` tensor names, every linear
weight stored `[out, in]` as in `nn.Linear`, so a checkpoint is this dict written to safetensors.
"""

from __future__ import annotations

import numpy as np

from minieagle import layers
from minieagle.backend import arange, array_module
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError


def layer_prefix(i: int) -> str:
    return f"model.layers.{i}."


def param_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's HF name and shape, in HF order."""
    d, inter, hd = config.hidden_size, config.intermediate_size, config.head_dim
    q_out = config.num_attention_heads * hd
    kv_out = config.num_key_value_heads * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, d)}
    for i in range(config.num_hidden_layers):
        p = layer_prefix(i)
        shapes[p + "input_layernorm.weight"] = (d,)
        shapes[p + "self_attn.q_proj.weight"] = (q_out, d)
        shapes[p + "self_attn.k_proj.weight"] = (kv_out, d)
        shapes[p + "self_attn.v_proj.weight"] = (kv_out, d)
        shapes[p + "self_attn.o_proj.weight"] = (d, q_out)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, d)
        shapes[p + "mlp.up_proj.weight"] = (inter, d)
        shapes[p + "mlp.down_proj.weight"] = (d, inter)
    shapes["model.norm.weight"] = (d,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    return shapes


def init_params(config: LlamaConfig, seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    """Fresh parameters: norms at 1, weights N(0, initializer_range), output projections scaled
    down by sqrt(2 L) (GPT-2's residual scaling) so the residual stream starts near unit size."""
    rng = np.random.default_rng(seed)
    std = config.initializer_range
    residual_std = std / np.sqrt(2 * config.num_hidden_layers)
    params = {}
    for name, shape in param_shapes(config).items():
        if name.endswith("norm.weight"):
            params[name] = np.ones(shape, dtype=dtype)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            params[name] = (rng.standard_normal(shape) * residual_std).astype(dtype)
        else:
            params[name] = (rng.standard_normal(shape) * std).astype(dtype)
    return params


# ---------------------------------------------------------------------------- forward


def causal_mask(past: int, new: int, xp=np, *, like=None):
    """bool [new, past + new]: position past + i sees everything up to itself.

    Made with module `xp`, or on the module and device of the array `like` when given."""
    if like is None:
        like = xp.zeros(0)
    key_positions = arange(past + new, like=like)  # [S]
    query_positions = past + arange(new, like=like)  # [T]
    return key_positions[None, :] <= query_positions[:, None]


def placement(config: LlamaConfig, new: int, past: int, position_ids, attention_mask, like):
    """Where `new` positions after `past` cached ones sit: (cos, sin [new, hd], mask [new,
    past + new]). position_ids default to past + arange(new), the mask to causal; a mask of
    another shape is refused. One definition for the target and the draft heads."""
    if position_ids is None:
        position_ids = past + arange(new, like=like)
    if attention_mask is None:
        attention_mask = causal_mask(past, new, like=like)
    elif tuple(attention_mask.shape) != (new, past + new):
        raise InvalidInputError(
            f"attention_mask has shape {tuple(attention_mask.shape)}; expected "
            f"({new}, {past + new}) = (new positions, cached + new positions)"
        )
    cos, sin = layers.rope_tables(position_ids, config.head_dim, config.rope_theta, like.dtype)
    return cos, sin, attention_mask


def check_inputs(config: LlamaConfig, input_ids, position_ids, past: int) -> int:
    """Host-side checks; on a device each int(...) below is one explicit scalar sync.
    Returns the largest position the new tokens take."""
    T = input_ids.shape[-1]
    if T == 0:
        raise InvalidInputError("input_ids is empty; pass at least one token id")
    xp = array_module(input_ids)
    low, high = int(xp.min(input_ids)), int(xp.max(input_ids))
    if low < 0 or high >= config.vocab_size:
        bad = low if low < 0 else high
        raise InvalidInputError(
            f"token id {bad} is outside [0, vocab_size={config.vocab_size}); encode text with "
            "the tokenizer saved beside this model"
        )
    if position_ids is None:
        top = past + T - 1
    else:
        top = int(array_module(position_ids).max(position_ids))
    if top >= config.max_position_embeddings or past + T > config.max_position_embeddings:
        raise InvalidInputError(
            f"sequence of {past} cached + {T} new tokens (largest position {top}) exceeds "
            f"max_position_embeddings={config.max_position_embeddings}; shorten the prompt or "
            "generate fewer tokens"
        )
    return top


def check_hidden_keys(config: LlamaConfig, output_hidden) -> None:
    """Each key of output_hidden must be "final" or a layer index in [0, L]."""
    for key in output_hidden:
        if key != "final" and not (isinstance(key, int) and 0 <= key <= config.num_hidden_layers):
            raise InvalidInputError(
                f"output_hidden key {key!r} must be 'final' or an int in "
                f"[0, {config.num_hidden_layers}]"
            )


def _split_heads(x, heads: int):
    """[B, T, heads * hd] -> [B, heads, T, hd]."""
    xp = array_module(x)
    B, T, width = x.shape
    per_head = xp.reshape(x, (B, T, heads, width // heads))  # [B, T, heads, hd]
    return xp.permute_dims(per_head, (0, 2, 1, 3))  # [B, heads, T, hd]


def _merge_heads(x):
    """[B, heads, T, hd] -> [B, T, heads * hd]; the inverse of `_split_heads`."""
    xp = array_module(x)
    B, heads, T, hd = x.shape
    return xp.reshape(xp.permute_dims(x, (0, 2, 1, 3)), (B, T, heads * hd))


def qkv_forward(params, prefix: str, config: LlamaConfig, n1, cos, sin):
    """The attention's rotated queries and its keys and values, from the normed input.

    n1 [B, T, d_in] (d_in = d in a Llama layer, 2d in EAGLE-3's) -> ((q [B, H, T, hd],
    k [B, Hkv, T, hd], v [B, Hkv, T, hd]), cache); RoPE rotates q and k by cos, sin."""
    H, Hkv, p = config.num_attention_heads, config.num_key_value_heads, prefix
    ### BEGIN SOLUTION decoder_layer
    q, c_q = layers.linear_forward(n1, params[p + "self_attn.q_proj.weight"])  # [B, T, H*hd]
    k, c_k = layers.linear_forward(n1, params[p + "self_attn.k_proj.weight"])  # [B, T, Hkv*hd]
    v, c_v = layers.linear_forward(n1, params[p + "self_attn.v_proj.weight"])
    q = _split_heads(q, H)  # [B, H, T, hd]
    k = _split_heads(k, Hkv)  # [B, Hkv, T, hd]
    v = _split_heads(v, Hkv)
    q, c_rq = layers.rope_forward(q, cos, sin)
    k, c_rk = layers.rope_forward(k, cos, sin)
    return (q, k, v), (c_q, c_k, c_v, c_rq, c_rk)
    ### END SOLUTION


def qkv_backward(dq, dk, dv, cache, prefix: str):
    """dq [B, H, T, hd], dk, dv [B, Hkv, T, hd] -> (dn1 [B, T, d_in], {name: grad})."""
    ### BEGIN SOLUTION decoder_layer
    c_q, c_k, c_v, c_rq, c_rk = cache
    p, grads = prefix, {}
    dq = _merge_heads(layers.rope_backward(dq, c_rq))  # [B, H, T, hd] -> [B, T, H*hd]
    dk = _merge_heads(layers.rope_backward(dk, c_rk))  # [B, Hkv, T, hd] -> [B, T, Hkv*hd]
    dv = _merge_heads(dv)
    dn1_q, grads[p + "self_attn.q_proj.weight"] = layers.linear_backward(dq, c_q)
    dn1_k, grads[p + "self_attn.k_proj.weight"] = layers.linear_backward(dk, c_k)
    dn1_v, grads[p + "self_attn.v_proj.weight"] = layers.linear_backward(dv, c_v)
    return dn1_q + dn1_k + dn1_v, grads
    ### END SOLUTION


def post_attention_forward(params, prefix: str, config: LlamaConfig, x, a):
    """The block after attention: a [B, H, T, hd], the residual stream x [B, T, d] ->
    (out [B, T, d], cache), with h = x + o_proj(a) and out = h + down(silu(gate(n)) * up(n)),
    n = RMSNorm(h)."""
    p = prefix
    ### BEGIN SOLUTION decoder_layer
    a = _merge_heads(a)  # [B, T, H*hd]
    o, c_o = layers.linear_forward(a, params[p + "self_attn.o_proj.weight"])  # [B, T, d]
    h = x + o
    n2, c_n2 = layers.rmsnorm_forward(
        h, params[p + "post_attention_layernorm.weight"], config.rms_norm_eps
    )
    g, c_g = layers.linear_forward(n2, params[p + "mlp.gate_proj.weight"])  # [B, T, I]
    u, c_u = layers.linear_forward(n2, params[p + "mlp.up_proj.weight"])  # [B, T, I]
    m, c_m = layers.swiglu_forward(g, u)
    down, c_d = layers.linear_forward(m, params[p + "mlp.down_proj.weight"])  # [B, T, d]
    return h + down, (c_o, c_n2, c_g, c_u, c_m, c_d)
    ### END SOLUTION


def post_attention_backward(dout, cache, prefix: str, config: LlamaConfig):
    """dout [B, T, d] -> (dx [B, T, d] (the residual's share), da [B, H, T, hd], {name: grad})."""
    ### BEGIN SOLUTION decoder_layer
    c_o, c_n2, c_g, c_u, c_m, c_d = cache
    p, grads = prefix, {}
    dm, grads[p + "mlp.down_proj.weight"] = layers.linear_backward(dout, c_d)
    dg, du = layers.swiglu_backward(dm, c_m)
    dn2_g, grads[p + "mlp.gate_proj.weight"] = layers.linear_backward(dg, c_g)
    dn2_u, grads[p + "mlp.up_proj.weight"] = layers.linear_backward(du, c_u)
    dh_n, grads[p + "post_attention_layernorm.weight"] = layers.rmsnorm_backward(
        dn2_g + dn2_u, c_n2
    )
    dh = dout + dh_n
    da, grads[p + "self_attn.o_proj.weight"] = layers.linear_backward(dh, c_o)
    return dh, _split_heads(da, config.num_attention_heads), grads  # da: [B, H, T, hd]
    ### END SOLUTION


def decoder_layer_forward(
    params, prefix: str, config: LlamaConfig, x, cos, sin, mask, cache=None, layer: int = 0
):
    """One pre-norm Llama block. x [B, T, d] -> (x + attn + mlp [B, T, d], cache).

    h = x + o_proj(attention(rope(q), rope(k), v));  out = h + down(silu(gate(n)) * up(n)),
    with n = RMSNorm(h) and the attention input RMSNorm(x). A layer without
    `input_layernorm.weight` in params attends over x itself: EAGLE-1's draft layer drops that
    norm because its input is already a normalised feature mix. The two halves around the
    attention (`qkv_forward`, `post_attention_forward`) also serve EAGLE-3's layer."""
    ### BEGIN SOLUTION decoder_layer
    p = prefix
    if p + "input_layernorm.weight" in params:
        n1, c_n1 = layers.rmsnorm_forward(
            x, params[p + "input_layernorm.weight"], config.rms_norm_eps
        )
    else:
        n1, c_n1 = x, None
    (q, k, v), c_qkv = qkv_forward(params, p, config, n1, cos, sin)
    if cache is not None:
        k, v = cache.append(layer, k, v)  # [B, Hkv, S, hd]
    a, c_att = layers.attention_forward(q, k, v, mask)  # [B, H, T, hd]
    out, c_post = post_attention_forward(params, p, config, x, a)
    return out, (c_n1, c_qkv, c_att, c_post)
    ### END SOLUTION


def decoder_layer_backward(dout, cache, prefix: str, config: LlamaConfig):
    """dout [B, T, d] -> (dx [B, T, d], {name: grad})."""
    ### BEGIN SOLUTION decoder_layer
    c_n1, c_qkv, c_att, c_post = cache
    dh, da, grads = post_attention_backward(dout, c_post, prefix, config)
    dq, dk, dv = layers.attention_backward(da, c_att)
    dn1, qkv_grads = qkv_backward(dq, dk, dv, c_qkv, prefix)
    grads.update(qkv_grads)
    if c_n1 is None:
        return dh + dn1, grads
    dx_n, grads[prefix + "input_layernorm.weight"] = layers.rmsnorm_backward(dn1, c_n1)
    return dh + dx_n, grads
    ### END SOLUTION


def lm_head_weight(params):
    """[V, d]: the untied head, or the embedding matrix when tied."""
    return params.get("lm_head.weight", params["model.embed_tokens.weight"])


def forward(
    params,
    config: LlamaConfig,
    input_ids,
    *,
    position_ids=None,
    attention_mask=None,
    cache=None,
    output_hidden=(),
    keep_caches: bool = False,
):
    """The decoder over new tokens, optionally appending to a KV cache.

    input_ids: int [T] or [B, T]. position_ids: int [T] (default: cache.length + arange(T)).
    attention_mask: bool [T, past + T] (True = may attend; default causal). cache: KVCache or None.
    output_hidden: which hidden states to return: an int i is the residual stream entering layer
    i (i = L is the stream after the last layer, before the final norm); "final" is the output of
    the final RMSNorm, the feature that EAGLE-1 drafts from.
    Returns (logits [.., T, V], hidden {key: [.., T, d]}, caches or None); the batch axis is
    present iff it was in input_ids.
    """
    embed = params["model.embed_tokens.weight"]
    batched = input_ids.ndim == 2
    ids = input_ids if batched else input_ids[None, :]  # [B, T]
    past = cache.length if cache is not None else 0
    check_inputs(config, ids, position_ids, past)
    cos, sin, attention_mask = placement(
        config, ids.shape[1], past, position_ids, attention_mask, like=embed
    )
    check_hidden_keys(config, output_hidden)
    x, c_emb = layers.embedding_forward(embed, ids)  # [B, T, d]
    hidden, layer_caches = {}, []
    for i in range(config.num_hidden_layers):
        if i in output_hidden:
            hidden[i] = x
        x, c = decoder_layer_forward(
            params, layer_prefix(i), config, x, cos, sin, attention_mask, cache, i
        )
        if keep_caches:
            layer_caches.append(c)
    if config.num_hidden_layers in output_hidden:
        hidden[config.num_hidden_layers] = x
    final, c_norm = layers.rmsnorm_forward(x, params["model.norm.weight"], config.rms_norm_eps)
    if "final" in output_hidden:
        hidden["final"] = final
    logits, c_head = layers.linear_forward(final, lm_head_weight(params))  # [B, T, V]
    if not batched:
        logits = logits[0, ...]  # [T, V]
        hidden = {key: value[0, ...] for key, value in hidden.items()}
    caches = (c_emb, layer_caches, c_norm, c_head) if keep_caches else None
    return logits, hidden, caches


def backward(dlogits, caches, config: LlamaConfig, dfinal=None):
    """Gradients of every parameter from dlogits [B, T, V] (and optionally a gradient on the
    final normed hidden state, dfinal [B, T, d]). Returns {HF name: grad}."""
    c_emb, layer_caches, c_norm, c_head = caches
    grads = {}
    dfinal_head, dhead = layers.linear_backward(dlogits, c_head)
    if dfinal is not None:
        dfinal_head = dfinal_head + dfinal
    dx, grads["model.norm.weight"] = layers.rmsnorm_backward(dfinal_head, c_norm)
    for i in reversed(range(config.num_hidden_layers)):
        dx, layer_grads = decoder_layer_backward(dx, layer_caches[i], layer_prefix(i), config)
        grads.update(layer_grads)
    dembed = layers.embedding_backward(dx, c_emb)
    if config.tie_word_embeddings:
        grads["model.embed_tokens.weight"] = dembed + dhead  # the shared matrix: both uses add
    else:
        grads["model.embed_tokens.weight"] = dembed
        grads["lm_head.weight"] = dhead
    return grads


def loss_and_grads(params, config: LlamaConfig, input_ids, targets):
    """Mean next-token cross-entropy and its gradients. input_ids, targets int [B, T]
    (targets = -100 where ignored). Returns (loss float, {name: grad})."""
    logits, _, caches = forward(params, config, input_ids, keep_caches=True)
    xp = array_module(logits)
    B, T, V = logits.shape
    flat_logits = xp.reshape(logits, (B * T, V))  # [B*T, V]
    loss, c_loss = layers.cross_entropy_forward(flat_logits, xp.reshape(targets, (-1,)))
    dlogits = xp.reshape(layers.cross_entropy_backward(1.0, c_loss), (B, T, V))
    return float(loss), backward(dlogits, caches, config)
