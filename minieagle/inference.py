"""The fast inference path: the same Llama forward as `model.forward`, on weights laid out for it.

`model.forward` is the readable path: every linear reads the Hugging Face `[out, in]` weight as
`x @ W.T`, q, k and v are three matmuls, and each step is its own function with a backward. It is
what students step through and what training runs. Decoding runs the same mathematics here, on an
inference-prepared view derived from those parameters once (`prepare`):

- every small weight transposed to a contiguous `[in, out]` array (OpenBLAS takes a much slower
  path for `x @ W.T` with 2–26 rows, the rows of a draft tree, than for a contiguous `x @ W`),
  every large one kept as its `[out, in]` rows in cache-sized blocks (`layout`, `linear`);
- q, k, v fused into one `[d, (H + 2 Hkv) hd]` matmul, gate and up into one `[d, 2 I]`;
- RoPE's cos/sin tables computed once for every position (`model.placement` recomputes them per
  call), RMSNorm by one reduction instead of `mean`, the attention mask as an additive 0/-inf
  bias (none at all for a single decoded token, which sees every cached position);
- 2-D activations `[T, d]` (one sequence), so no batch axis travels through the layer.

Training and checkpoints keep the HF layout. The view is derived once: the transposed and fused
weights are copies, while arrays that need no new layout (the embedding, the norm weights) are
shared with `params`; so after changing any parameter, prepare again. Every function takes its
array module from its inputs, so the path runs on NumPy, CuPy and the array-api-strict test
lane alike. `tests/test_inference.py`
checks it against `model.forward` (float64, to 1e-12) on prompts, decoded tokens and draft trees.
"""

from __future__ import annotations

from dataclasses import dataclass

from minieagle import layers, model
from minieagle.backend import arange, array_module, contiguous, ops, to_device, zeros
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError


@dataclass(frozen=True)
class PreparedLayer:
    """One decoder layer's weights for inference, each in `layout`. input_norm [d] (None: the
    layer attends over its input unnormed, as EAGLE-1's draft layer); qkv d_in -> (H + 2 Hkv) hd;
    o H hd -> d; post_norm [d]; gate_up d -> 2 I (gate, then up); down I -> d."""

    input_norm: object
    qkv: object
    o: object
    post_norm: object
    gate_up: object
    down: object


def prepare_layer(params: dict, prefix: str) -> PreparedLayer:
    """The inference view of the decoder layer named `prefix` in `params` (HF names)."""
    xp = array_module(params[prefix + "self_attn.q_proj.weight"])
    attn, mlp = prefix + "self_attn.", prefix + "mlp."
    qkv = xp.concat([params[attn + name + ".weight"] for name in ("q_proj", "k_proj", "v_proj")],
                    axis=0)  # fmt: skip  # 3 x [out, d_in] -> [(H + 2 Hkv) hd, d_in]
    gate_up = xp.concat([params[mlp + "gate_proj.weight"], params[mlp + "up_proj.weight"]],
                        axis=0)  # fmt: skip  # [2 I, d]
    return PreparedLayer(
        input_norm=params.get(prefix + "input_layernorm.weight"),
        qkv=layout(qkv),
        o=layout(params[attn + "o_proj.weight"]),
        post_norm=params[prefix + "post_attention_layernorm.weight"],
        gate_up=layout(gate_up),
        down=layout(params[mlp + "down_proj.weight"]),
    )


SMALL_WEIGHT = 1 << 17  # entries (512 KB in float32): more is a large weight
BLOCK = 1 << 17  # entries in one block of a large weight's rows (512 KB in float32)
MIN_BLOCK_ROWS = 16  # a large weight whose out has no divisor from here to BLOCK / in: one block
ROWS_BY_BLOCKS = 64  # a large weight meets at most this many rows block by block
ROWS_AGAINST_BLOCKS = 6  # up to this many, the rows meet each block as x @ block.T
ROWS_FOR_TRANSPOSED_PRODUCT = 8  # from here, a small weight is applied as (weight.T @ x.T).T


def layout(weight):
    """The fast path's layout of a weight given as its HF rows [out, in] (`linear` reads both):

    - a small weight (at most SMALL_WEIGHT entries: the shipped tiny target's) transposed to a
      contiguous [in, out], for `x @ weight`;
    - a large one (SmolLM2's) kept as its rows, in blocks [nb, c, in] of c rows each, c the
      largest divisor of out with c * in <= BLOCK entries (half of the reference CPU's 1 MB
      L2), or all out rows in one block when that divisor is under MIN_BLOCK_ROWS. A
      contiguous weight is not copied: its blocks are a view of it.

    Why the blocks: docs/speed.md, "Small products"."""
    out, d_in = weight.shape
    if out * d_in <= SMALL_WEIGHT:
        return contiguous(weight.T)
    c = next((c for c in range(min(out, BLOCK // d_in), 0, -1) if out % c == 0), 1)
    if c < MIN_BLOCK_ROWS:
        c = out
    return ops(weight).reshape(contiguous(weight), (out // c, c, d_in))


def dense(weight):
    """A weight in either `layout` as an [in, out] matrix (a view for the blocks)."""
    if weight.ndim == 2:
        return weight
    nb, c, d_in = weight.shape
    return ops(weight).reshape(weight, (nb * c, d_in)).T


def linear(x, weight):
    """x [T, in] @ weight -> [T, out], the weight in `layout`, each row the same product; how it
    is called is chosen for OpenBLAS on the reference CPU (docs/speed.md, "Small products"):

    - a large weight's blocks [nb, c, in] and one row: one matrix-vector product over all its
      rows, which streams the weight at memory speed;
    - a large weight and 2 to ROWS_BY_BLOCKS rows: block by block, all in one batched matmul,
      so that each block is read from memory once; OpenBLAS's general product of one block
      and a few rows costs little more than its one-row product (over the whole weight it
      costs 2-3 times as much: it first copies the weight into its own layout). Up to
      ROWS_AGAINST_BLOCKS rows as x [R, in] @ block.T, from there block [c, in] @ x.T [in, R]:
      OpenBLAS runs the first faster for 2-6 rows and 2-3 times slower from 7;
    - a large weight and more rows: x @ rows.T, the general product;
    - a small weight: x @ weight, and from ROWS_FOR_TRANSPOSED_PRODUCT rows (weight.T @ x.T).T
      (views, no copy), 8-15 % faster for the tiny target's 16- to 64-token forwards.

    The values are the same products, summed in another order."""
    rows = x.shape[0]
    if weight.ndim == 2:
        return x @ weight if rows < ROWS_FOR_TRANSPOSED_PRODUCT else (weight.T @ x.T).T
    o = ops(x)
    nb, c, d_in = weight.shape
    if rows == 1:
        return o.reshape(o.reshape(weight, (nb * c, d_in)) @ x[0, ...], (1, nb * c))
    if rows <= ROWS_AGAINST_BLOCKS:
        y = x @ o.permute_dims(weight, (0, 2, 1))  # [R, in] @ [nb, in, c] -> [nb, R, c]
        return o.reshape(o.permute_dims(y, (1, 0, 2)), (rows, nb * c))
    if rows <= ROWS_BY_BLOCKS:
        y = weight @ contiguous(o.permute_dims(x, (1, 0)))  # [nb, c, in] @ [in, R] -> [nb, c, R]
        return o.permute_dims(o.reshape(y, (nb * c, rows)), (1, 0))
    return x @ dense(weight)


class RopeTable:
    """RoPE's cos and sin rows [P, hd] for positions 0 .. P - 1, in the dtype of `like`: row p
    holds the values `layers.rope_tables` computes for position p. P grows (doubling, at most
    max_position_embeddings) as larger positions come, so a model with a huge context costs
    only the positions it uses."""

    def __init__(self, config: LlamaConfig, like):
        self.config, self.like = config, like
        self.cos = self.sin = None
        self.length = 0

    def rows(self, position_ids, top: int):
        """cos, sin [T, 1, hd] for position_ids int [T] whose largest value is `top`."""
        if top >= self.length:
            config = self.config
            grown = min(config.max_position_embeddings, max(2 * self.length, 256))
            self.length = max(top + 1, grown)
            positions = arange(self.length, like=self.like)
            self.cos, self.sin = layers.rope_tables(
                positions, config.head_dim, config.rope_theta, self.like.dtype
            )  # [P, hd]
        xp = array_module(self.cos)
        cos = xp.take(self.cos, position_ids, axis=0)[:, None, :]
        sin = xp.take(self.sin, position_ids, axis=0)[:, None, :]
        return cos, sin


def rms_norm(x, weight, eps: float):
    """RMSNorm over the last axis, x [T, d] -> [T, d], as `layers.rmsnorm_forward` without its
    cache (one sum instead of `mean`, which costs a Python-level call on NumPy)."""
    o = ops(x)
    mean_square = o.sum_last(x * x) / x.shape[-1]  # [T, 1]
    return x * (1.0 / o.xp.sqrt(mean_square + eps)) * weight


def mask_bias(attention_mask, like):
    """bool [T, S] (True = may attend) -> additive bias [T, S]: 0 where allowed, -inf elsewhere."""
    return array_module(like).where(attention_mask, zeros((), like=like), -float("inf"))


def attention(q, keys, values, bias, groups: int):
    """Grouped-query attention for one sequence. q [T, H, hd]; keys, values [Hkv, S, hd];
    bias [T, S] additive (None: every query sees every key) -> [T, H hd]."""
    o = ops(q)
    T, H, hd = q.shape
    Hkv = keys.shape[0]
    qg = o.reshape(o.permute_dims(o.reshape(q, (T, Hkv, groups, hd)), (1, 2, 0, 3)),
                   (Hkv, groups * T, hd))  # fmt: skip  # [T, H, hd] -> [Hkv, G T, hd]
    scores = (qg @ o.permute_dims(keys, (0, 2, 1))) * (1.0 / hd**0.5)  # [Hkv, G T, S]
    if bias is not None:
        S = keys.shape[1]
        scores = o.reshape(o.reshape(scores, (Hkv, groups, T, S)) + bias, (Hkv, groups * T, S))
    probs = o.xp.exp(scores - o.max_last(scores))
    probs = probs / o.sum_last(probs)  # [Hkv, G T, S]
    out = o.reshape(probs @ values, (Hkv, groups, T, hd))  # [Hkv, G, T, hd]
    return o.reshape(o.permute_dims(out, (2, 0, 1, 3)), (T, H * hd))  # [T, H hd]


def rotate(x, cos, sin):
    """RoPE, rotate-half layout: x [T, heads, hd], cos/sin [T, 1, hd] -> [T, heads, hd]."""
    xp = array_module(x)
    half = x.shape[-1] // 2
    return x * cos + xp.concat([-x[..., half:], x[..., :half]], axis=-1) * sin


def layer_forward(layer: PreparedLayer, config: LlamaConfig, n, residual, cos, sin, bias,
                  cache, index: int):  # fmt: skip
    """One decoder layer on the prepared weights: n [T, d_in] the attention's (normed) input,
    residual [T, d] the stream it adds to; cos, sin [T, 1, hd]; bias [T, S] or None; cache the
    KVCache (batch 1) whose layer `index` receives this block's keys and values -> [T, d].
    h = residual + o(attention); out = h + down(silu(gate(m)) * up(m)), m = RMSNorm(h)."""
    o = ops(n)
    T = n.shape[0]
    H, Hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    qkv = o.reshape(linear(n, layer.qkv), (T, H + 2 * Hkv, hd))  # [T, d_in] -> [T, H + 2 Hkv, hd]
    qk = rotate(qkv[:, : H + Hkv, :], cos, sin)  # [T, H + Hkv, hd]
    k = o.permute_dims(qk[:, H:, :], (1, 0, 2))[None, ...]  # [1, Hkv, T, hd]
    v = o.permute_dims(qkv[:, H + Hkv :, :], (1, 0, 2))[None, ...]
    keys, values = cache.append(index, k, v)  # [1, Hkv, S, hd]
    a = attention(qk[:, :H, :], keys[0, ...], values[0, ...], bias, H // Hkv)  # [T, H hd]
    h = residual + linear(a, layer.o)  # [T, d]
    return mlp_block(layer, config, h)


def mlp_block(layer: PreparedLayer, config: LlamaConfig, h):
    """The layer's second half on rows h [R, d] -> [R, d]: h + down(silu(gate(m)) * up(m)),
    m = RMSNorm(h)."""
    o = ops(h)
    m = rms_norm(h, layer.post_norm, config.rms_norm_eps)
    gate_up = linear(m, layer.gate_up)  # [R, 2 I]
    inter = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :inter], gate_up[:, inter:]
    return h + linear(gate / (1.0 + o.xp.exp(-gate)) * up, layer.down)  # [R, d]


def batched_attention(q, keys, values, bias, groups: int):
    """Grouped-query attention for B sequences at once. q [B, T, H, hd]; keys, values
    [B, Hkv, S, hd]; bias [B, T, S] additive (0 or -inf), or None when every query sees every
    key -> [B, T, H hd]."""
    o = ops(q)
    B, T, H, hd = q.shape
    Hkv, S = keys.shape[1], keys.shape[2]
    qg = o.reshape(o.permute_dims(o.reshape(q, (B, T, Hkv, groups, hd)), (0, 2, 3, 1, 4)),
                   (B, Hkv, groups * T, hd))  # fmt: skip  # [B, T, H, hd] -> [B, Hkv, G T, hd]
    scores = (qg @ o.permute_dims(keys, (0, 1, 3, 2))) * (1.0 / hd**0.5)  # [B, Hkv, G T, S]
    if bias is not None:
        scores = o.reshape(o.reshape(scores, (B, Hkv, groups, T, S)) + bias[:, None, None, :, :],
                           (B, Hkv, groups * T, S))  # fmt: skip
    probs = o.xp.exp(scores - o.max_last(scores))
    probs = probs / o.sum_last(probs)  # [B, Hkv, G T, S]
    out = o.reshape(probs @ values, (B, Hkv, groups, T, hd))
    return o.reshape(o.permute_dims(out, (0, 3, 1, 2, 4)), (B, T, H * hd))  # [B, T, H hd]


def batched_layer_forward(layer: PreparedLayer, config: LlamaConfig, x, cos, sin, bias,
                          cache, index: int):  # fmt: skip
    """`layer_forward` for B sequences decoded side by side: x [B, T, d]; cos, sin
    [B, T, 1, hd] (each row its own positions); bias [B, T, S]; cache a batch-B KVCache ->
    [B, T, d]. The projections run on all B T rows as one matrix product: that is where
    decoding many sequences at once beats decoding one after another."""
    o = ops(x)
    B, T, d = x.shape
    H, Hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    rows = o.reshape(x, (B * T, d))  # [B T, d]
    n = rows if layer.input_norm is None else rms_norm(rows, layer.input_norm, config.rms_norm_eps)
    qkv = o.reshape(linear(n, layer.qkv), (B, T, H + 2 * Hkv, hd))
    qk = rotate(qkv[:, :, : H + Hkv, :], cos, sin)  # [B, T, H + Hkv, hd]
    k = o.permute_dims(qk[:, :, H:, :], (0, 2, 1, 3))  # [B, Hkv, T, hd]
    v = o.permute_dims(qkv[:, :, H + Hkv :, :], (0, 2, 1, 3))
    keys, values = cache.append(index, k, v)  # [B, Hkv, S, hd]
    a = batched_attention(qk[:, :, :H, :], keys, values, bias, H // Hkv)  # [B, T, H hd]
    h = rows + linear(o.reshape(a, (B * T, H * hd)), layer.o)  # [B T, d]
    return o.reshape(mlp_block(layer, config, h), (B, T, d))


def placement(config: LlamaConfig, rope: RopeTable, new: int, past: int, position_ids,
              attention_mask, top: int | None = None):  # fmt: skip
    """Where `new` positions after `past` cached ones sit, as `model.placement` says, for the
    fast layer: (cos, sin [new, 1, hd], additive mask bias [new, past + new] or None). A single
    new position with the default mask sees every cached one, so it needs no bias. top: the
    largest position when the caller knows it (else read from position_ids: one host sync)."""
    like = rope.like
    if position_ids is None:
        position_ids, top = past + arange(new, like=like), past + new - 1
    else:
        xp = array_module(position_ids)
        low = int(xp.min(position_ids))  # host syncs: the table is indexed by these positions
        top = int(xp.max(position_ids)) if top is None else top
        if low < 0:
            raise InvalidInputError(
                f"position_ids hold {low}; positions count from 0, pass cache.length + offsets"
            )
    if attention_mask is None and new > 1:
        attention_mask = model.causal_mask(past, new, like=like)
    elif attention_mask is not None and tuple(attention_mask.shape) != (new, past + new):
        raise InvalidInputError(
            f"attention_mask has shape {tuple(attention_mask.shape)}; expected "
            f"({new}, {past + new}) = (new positions, cached + new positions)"
        )
    bias = None if attention_mask is None else mask_bias(attention_mask, like)
    return (*rope.rows(position_ids, top), bias)


class PreparedTarget:
    """A Llama target's inference view (module docstring): `prepare(params, config)` makes it;
    `forward` is `model.forward` for one sequence with a KV cache."""

    def __init__(self, params: dict, config: LlamaConfig):
        embed = params["model.embed_tokens.weight"]
        self.config, self.params = config, params
        self.embed = embed  # [V, d]
        self.layers = [
            prepare_layer(params, model.layer_prefix(i)) for i in range(config.num_hidden_layers)
        ]
        self.norm = params["model.norm.weight"]
        self.lm_head = layout(model.lm_head_weight(params))  # [V, d] rows -> `layout`
        self.rope = RopeTable(config, embed)

    def forward(self, input_ids, *, position_ids=None, attention_mask=None, cache,
                output_hidden=(), lazy_logits: bool = False, tree_parents=None):  # fmt: skip
        """input_ids int [T]; position_ids int [T] (default cache.length + arange(T));
        attention_mask bool [T, cache.length + T] (default causal); cache a batch-1 KVCache the
        new keys and values are appended to; output_hidden as in `model.forward`.
        Returns (logits [T, V], hidden {key: [T, d]}), as `model.forward` without a batch axis.
        lazy_logits: logits as `LazyLogits`, each row computed when first read (verification
        reads only the rows along the accepted path, a few of a tree's N); tree_parents (host
        ints [T], the draft tree's parents): which rows it computes together (`LazyLogits`)."""
        config, embed = self.config, self.embed
        if input_ids.ndim != 1:
            raise InvalidInputError(
                f"input_ids has shape {tuple(input_ids.shape)}; the fast path decodes one "
                "sequence: pass int [T] (model.forward takes batches)"
            )
        if tree_parents is not None and (not lazy_logits or len(tree_parents) != len(input_ids)):
            raise InvalidInputError(
                f"tree_parents has {len(tree_parents)} entries with lazy_logits={lazy_logits} "
                f"for {len(input_ids)} tokens; pass one parent per token, with lazy_logits=True "
                "(it says which lazy rows are computed together)"
            )
        past = cache.length
        top = model.check_inputs(config, input_ids[None, :], position_ids, past)
        model.check_hidden_keys(config, output_hidden)
        cos, sin, bias = placement(
            config, self.rope, input_ids.shape[0], past, position_ids, attention_mask, top
        )
        xp = array_module(embed)
        x = xp.take(embed, input_ids, axis=0)  # [T, d]
        hidden = {}
        eps = config.rms_norm_eps
        for i, layer in enumerate(self.layers):
            if i in output_hidden:
                hidden[i] = x
            n = x if layer.input_norm is None else rms_norm(x, layer.input_norm, eps)
            x = layer_forward(layer, config, n, x, cos, sin, bias, cache, i)
        if config.num_hidden_layers in output_hidden:
            hidden[config.num_hidden_layers] = x
        final = rms_norm(x, self.norm, eps)  # [T, d]
        if "final" in output_hidden:
            hidden["final"] = final
        if lazy_logits:
            return LazyLogits(final, self.lm_head, tree_parents), hidden
        return linear(final, self.lm_head), hidden  # [T, V]

    def forward_batch(self, input_ids, *, cache, padding=None, output_hidden=(),
                      last_only: bool = False):  # fmt: skip
        """B sequences side by side, the same forward as `forward` for each row.

        input_ids int [B, T]; cache a batch-B KVCache the new keys and values are appended to;
        padding int [B] (host): row b's first padding[b] cache positions are left padding, which
        no position attends to and which positions do not count (row b's token at cache index
        j sits at position j - padding[b]); default none. Returns (logits [B, T, V], or
        [B, 1, V] for the last position only when last_only; hidden {key: [B, T, d]})."""
        import numpy as np

        config, embed = self.config, self.embed
        B, T = input_ids.shape
        past = cache.length
        padding = np.zeros(B, dtype=np.int64) if padding is None else np.asarray(padding)
        model.check_inputs(config, input_ids, None, past)
        model.check_hidden_keys(config, output_hidden)
        index = past + np.arange(T)  # cache index of each new position
        positions = np.maximum(index[None, :] - padding[:, None], 0)  # [B, T]
        keys = np.arange(past + T)  # [S]
        allowed = (keys[None, None, :] <= index[None, :, None]) & (
            keys[None, None, :] >= padding[:, None, None]
        )  # [B, T, S]: causal, and never into the padding
        allowed |= keys[None, None, :] == index[None, :, None]  # a padding row sees itself
        xp = array_module(embed)
        bias = None  # one new token per row, no padding: it sees the whole cache
        if T > 1 or padding.any():
            bias = mask_bias(to_device(allowed, embed), embed)  # [B, T, S]
        cos, sin = self.rope.rows(to_device(positions.reshape(-1), embed), int(positions.max()))
        cos = xp.reshape(cos, (B, T, 1, cos.shape[-1]))  # [B, T, 1, hd]
        sin = xp.reshape(sin, (B, T, 1, sin.shape[-1]))
        x = xp.reshape(xp.take(embed, xp.reshape(input_ids, (-1,)), axis=0), (B, T, -1))
        hidden = {}
        for i, layer in enumerate(self.layers):
            if i in output_hidden:
                hidden[i] = x
            x = batched_layer_forward(layer, config, x, cos, sin, bias, cache, i)
        if config.num_hidden_layers in output_hidden:
            hidden[config.num_hidden_layers] = x
        final = rms_norm(x, self.norm, config.rms_norm_eps)  # [B, T, d]
        if "final" in output_hidden:
            hidden["final"] = final
        read = final[:, -1:, :] if last_only else final
        R = read.shape[1]
        logits = linear(xp.reshape(read, (B * R, -1)), self.lm_head)  # [B R, V]
        return xp.reshape(logits, (B, R, -1)), hidden


class LazyLogits:
    """Logits [T, V] = linear(final [T, d], lm_head), a row computed when it is first read
    (`logits[i]` -> [V]); `len` is T. The LM head over a 26-node tree is a [26, d] x [d, V]
    product, while verification reads the rows of the accepted path only.

    parents (host ints [T], the tree of the T positions, parents[0] = -1), when given: reading
    row i also computes, in the same product, the rows below it along nodes with one child
    each (a chain's whole rest, at most ROWS_BY_BLOCKS rows). Verification reads such a row
    next whenever it accepts the draft above it, and for SmolLM2's 49,152-row head one product
    of 2-8 rows costs 1.1-1.6 times one row, not 2-8 times (docs/speed.md, "Small products")."""

    def __init__(self, final, lm_head, parents=None):
        self.final, self.lm_head, self.rows = final, lm_head, {}
        self.children = None
        if parents is not None:
            self.children = [[] for _ in parents]
            for node, parent in enumerate(parents[1:], start=1):
                self.children[int(parent)].append(node)

    def __len__(self) -> int:
        return self.final.shape[0]

    def _run(self, i: int) -> list[int]:
        """Row i and the rows computed with it: down the tree while a node has one child
        whose row is not computed yet."""
        run = [i]
        while self.children is not None and len(run) < ROWS_BY_BLOCKS:
            below = self.children[run[-1]]
            if len(below) != 1 or below[0] in self.rows:
                break
            run.append(below[0])
        return run

    def __getitem__(self, i: int):
        if i not in self.rows:
            run = self._run(i)
            if len(run) == 1:
                self.rows[i] = linear(self.final[i : i + 1, :], self.lm_head)[0, ...]  # [V]
            else:
                xp = array_module(self.final)
                read = xp.take(self.final, to_device(run, self.final), axis=0)  # [R, d]
                computed = contiguous(linear(read, self.lm_head))  # [R, V], rows in order
                for k, row in enumerate(run):
                    self.rows[row] = computed[k, ...]
        return self.rows[i]


@dataclass(frozen=True)
class TargetView:
    """What a draft head reads of its target: the parameters and the LM head (d -> V) laid out
    for the fast path. `head_view` gives a `PreparedTarget` unchanged (it has both) and
    otherwise copies only the LM head, not the whole target."""

    params: dict
    lm_head: object


def head_view(target, config: LlamaConfig):
    """The target as a head needs it: a `PreparedTarget` as it is, or a `TargetView` of
    parameters (their LM head in `layout`)."""
    if isinstance(target, PreparedTarget | TargetView):
        return target
    return TargetView(target, layout(model.lm_head_weight(target)))


def prepare(params, config: LlamaConfig) -> PreparedTarget:
    """The inference view of a Llama target's parameters (prepare again after changing them:
    the module docstring says which arrays are copies); a view already prepared for this
    config is returned as it is."""
    if isinstance(params, PreparedTarget):
        if params.config != config:
            raise InvalidInputError(
                "the prepared target was made for another config; pass the config it was "
                "prepared with (or prepare the parameters again)"
            )
        return params
    return PreparedTarget(params, config)


# ---------------------------------------------------------------------------- draft heads


class PreparedEagle1Head:
    """EAGLE-1's head (`heads.eagle1.head_forward`) on prepared weights: fc over
    [Embed(x_{t+1}), f_t], the one decoder layer, the target's LM head. lm_head: the target's
    prepared head (`PreparedTarget.lm_head`, in `layout`), shared rather than copied again."""

    def __init__(self, head: dict, cfg, target_params: dict, lm_head):
        from minieagle.heads.eagle1 import LAYER_PREFIX

        self.cfg, self.lm_head = cfg, lm_head
        self.embed = target_params["model.embed_tokens.weight"]
        self.fc = layout(head["fc.weight"])  # [d, fc_in] rows -> `layout`
        self.fc_bias = head["fc.bias"] if cfg.fc_bias else None
        self.layer = prepare_layer(head, LAYER_PREFIX)
        self.rope = RopeTable(cfg.layer, self.fc)

    def forward(self, tokens, features, cache, *, position_ids=None, attention_mask=None,
                last_only: bool = False):  # fmt: skip
        """tokens int [T], features [T, d] -> (f̂ [T, d], logits [T, V]; [1, V] for the last
        position only when last_only), appended to cache."""
        xp = array_module(self.fc)
        streams = []
        if self.cfg.inputs != "feature":
            streams.append(xp.take(self.embed, tokens, axis=0))  # [T, d]
        if self.cfg.inputs != "token":
            streams.append(features)  # [T, d]
        fc_input = xp.concat(streams, axis=-1) if len(streams) == 2 else streams[0]
        x = linear(fc_input, self.fc)  # [T, fc_in] -> [T, d]
        if self.fc_bias is not None:
            x = x + self.fc_bias
        layer, config = self.layer, self.cfg.layer
        cos, sin, bias = placement(config, self.rope, x.shape[0], cache.length,
                                   position_ids, attention_mask)  # fmt: skip
        n = x if layer.input_norm is None else rms_norm(x, layer.input_norm, config.rms_norm_eps)
        predicted = layer_forward(layer, config, n, x, cos, sin, bias, cache, 0)  # [T, d]
        read = predicted[-1:, :] if last_only else predicted
        return predicted, linear(read, self.lm_head)  # [T or 1, V]


class PreparedEagle3Head:
    """EAGLE-3's head (`heads.eagle3.head_forward`) on prepared weights: fc over the fused
    target features (skipped for the head's own outputs), the midlayer reading
    [RMSNorm(e), RMSNorm(x)] with residual x, then its own norm and LM head over the draft
    vocabulary."""

    def __init__(self, head: dict, cfg, target_params: dict):
        from minieagle.heads.eagle3 import PREFIX

        self.cfg = cfg
        self.embed = target_params["model.embed_tokens.weight"]
        self.fc = layout(head["fc.weight"])  # [d, k d] rows -> `layout`
        self.layer = prepare_layer(head, PREFIX)
        self.hidden_norm = head[PREFIX + "hidden_norm.weight"]
        self.norm = head["norm.weight"]
        self.lm_head = layout(head["lm_head.weight"])  # [N, d] rows -> `layout`
        self.rope = RopeTable(cfg.layer, self.fc)

    def forward(self, tokens, features, cache, *, target_features: bool, position_ids=None,
                attention_mask=None, last_only: bool = False):  # fmt: skip
        """tokens int [T]; features [T, k d] (target_features) or [T, d] (the head's own) ->
        (a [T, d], draft logits [T, N]; [1, N] for the last position only when last_only),
        appended to cache."""
        xp = array_module(self.fc)
        config = self.cfg.layer
        eps = config.rms_norm_eps
        hidden = linear(features, self.fc) if target_features else features  # [T, d]
        embedded = xp.take(self.embed, tokens, axis=0)  # [T, d]
        n = xp.concat([rms_norm(embedded, self.layer.input_norm, eps),
                       rms_norm(hidden, self.hidden_norm, eps)], axis=-1)  # fmt: skip  # [T, 2d]
        cos, sin, bias = placement(config, self.rope, hidden.shape[0], cache.length,
                                   position_ids, attention_mask)  # fmt: skip
        out = layer_forward(self.layer, config, n, hidden, cos, sin, bias, cache, 0)  # [T, d]
        read = out[-1:, :] if last_only else out
        return out, linear(rms_norm(read, self.norm, eps), self.lm_head)  # [T or 1, N]
