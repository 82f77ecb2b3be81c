"""Planted bugs of the eagle3_ttt assignment, for `minieagle assignment check`.

Instructors only: each quotes a line of the solution, so the student edition leaves this
file out. See grader.PlantedBug."""

from minieagle.assignments.grader import PlantedBug

PLANTED_BUGS = (
    PlantedBug(
        "TTT mask without its diagonal",
        "heads/eagle3.py",
        "        scores.append(diagonal[..., None])  # [B, Hkv, G, T, 1]\n",
        "        scores.append(diagonal[..., None] - xp.inf)  # [B, Hkv, G, T, 1]\n",
        "(the diagonal)",
    ),
    PlantedBug(
        "no token shift between steps",
        "heads/eagle3.py",
        "chain[:, 1 + s : 1 + s + T]",
        "chain[:, 1 : 1 + T]",
        "x_{t+1+s}",
    ),
    PlantedBug(
        "own output not fed back (every step reads the target's feature)",
        "heads/eagle3.py",
        "        hidden = out  # the draft's own output is the next step's feature\n",
        "",
        "its own output",
    ),
    PlantedBug(
        "no PE shift (RoPE position t at every step)",
        "heads/eagle3.py",
        "        positions = index + s if pe_shift else index",
        "        positions = index",
        "RoPE position t + s",
    ),
    PlantedBug(
        "loss mask not shifted with the step",
        "heads/eagle3.py",
        "_shift(labels, s), _shift(counted, s)",
        "_shift(labels, s), counted",
        "the loss mask must move with the labels",
    ),
    PlantedBug(
        "steps weighted step_weight^(s+1)",
        "heads/eagle3.py",
        "        weight = step_weight**s\n",
        "        weight = step_weight ** (s + 1)\n",
        "step 0 has weight 1",
    ),
    PlantedBug(
        "backward drops earlier steps' key/value gradients",
        "heads/eagle3.py",
        "        for j in range(s + 1):\n",
        "        for j in range(s, s + 1):\n",
        "earlier steps' keys",
    ),
    PlantedBug(
        "query head h reads key/value head h % Hkv (GQA grouping)",
        "heads/eagle3.py",
        "    qg = xp.reshape(q, (B, Hkv, H // Hkv, T, hd))  # [B, Hkv, G, T, hd]\n",
        "    qg = xp.swapaxes(xp.reshape(q, (B, H // Hkv, Hkv, T, hd)), 1, 2)  # h -> h % Hkv\n",
        "h // (H // Hkv)",
    ),
)
