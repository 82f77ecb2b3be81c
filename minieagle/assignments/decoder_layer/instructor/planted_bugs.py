"""Planted bugs of the decoder_layer assignment, for `minieagle assignment check`.

Instructors only: each quotes a line of the solution, so the student edition leaves this
file out. See grader.PlantedBug."""

from minieagle.assignments.grader import PlantedBug

PLANTED_BUGS = (
    PlantedBug(
        "attention residual subtracted",
        "model.py",
        "    h = x + o\n",
        "    h = x - o\n",
        "residual",
    ),
    PlantedBug(
        "RoPE applied to v as well",
        "model.py",
        "    k, c_rk = layers.rope_forward(k, cos, sin)\n    return",
        "    k, c_rk = layers.rope_forward(k, cos, sin)\n"
        "    v, _ = layers.rope_forward(v, cos, sin)\n    return",
        "RoPE rotates q and k only",
    ),
    PlantedBug(
        "new keys and values never appended to the cache",
        "model.py",
        "    if cache is not None:\n        k, v = cache.append(layer, k, v)  # [B, Hkv, S, hd]\n",
        "",
        "cache.append(layer, k, v)",
    ),
    PlantedBug(
        "k and v split into num_attention_heads heads",
        "model.py",
        "    k = _split_heads(k, Hkv)  # [B, Hkv, T, hd]\n",
        "    k = _split_heads(k, H)  # [B, Hkv, T, hd]\n",
        "num_key_value_heads",
    ),
    PlantedBug(
        "residual gradient dropped after the MLP",
        "model.py",
        "    dh = dout + dh_n\n",
        "    dh = dh_n\n",
        "the residual",
    ),
    PlantedBug(
        "dn1 from q_proj only",
        "model.py",
        "    return dn1_q + dn1_k + dn1_v, grads\n",
        "    return dn1_q, grads\n",
        "sum of the three",
    ),
    PlantedBug(
        "dx without the residual's share",
        "model.py",
        "    return dh + dx_n, grads\n",
        "    return dx_n, grads\n",
        "x reaches the output twice",
    ),
)
