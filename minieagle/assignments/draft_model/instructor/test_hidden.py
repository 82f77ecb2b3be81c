"""Hidden tests for the draft-model drafter: drafts after rejections, q provenance, the exact law,
and efficiency."""

import numpy as np
import pytest
from test_public import CONFIG, DRAFT, DRAFT_CONFIG, GREEDY, TARGET  # the same tiny models

from minieagle import model
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.generate import generate
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.testing import generation_law, target_law, total_variation

SAMPLED = SamplingParams(temperature=1.0)
LAW_SAMPLING = SamplingParams(temperature=1.0, top_k=2)  # 2 tokens per draw: a small enumeration


def draft_logits(context):
    logits, _, _ = model.forward(DRAFT, DRAFT_CONFIG, np.asarray(list(context)))
    return logits[-1]


def greedy_continuation(context, n):
    context = list(context)
    for _ in range(n):
        context.append(int(np.argmax(draft_logits(context))))
    return context[-n:]


@pytest.mark.points(3)
@pytest.mark.parametrize("kept_drafts", [0, 1, 2, 3])
def test_next_cycle_drafts_from_the_kept_context(kept_drafts):
    """After the target keeps a prefix, the next chain continues exactly what was kept."""
    prompt = [1, 4, 3, 5]
    drafter = DraftModelDrafter(DRAFT, DRAFT_CONFIG, gamma=3)
    drafter.begin(prompt, {}, GREEDY)
    tree = drafter.propose(prompt[-1], SeededRandomness(0), max_nodes=16)
    kept = [prompt[-1], *(int(t) for t in tree.tokens[1 : 1 + kept_drafts])]
    next_root = 0 if kept_drafts < 3 else 4  # a correction (or bonus) token from the "target"
    drafter.accept(kept, {}, next_root)
    second = drafter.propose(next_root, SeededRandomness(0), max_nodes=16)
    context = [*prompt, *kept[1:], next_root]
    want = greedy_continuation(context, 3)
    got = [int(t) for t in second.tokens[1:]]
    assert got == want, (
        f"after keeping {kept_drafts} of 3 drafts, the next cycle drafted {got}, but the draft "
        f"model's greedy continuation of the kept context is {want}: roll the draft cache back to "
        "the committed length plus the accepted drafts it read, and make the unread kept tokens "
        "pending"
    )


@pytest.mark.points(1)
def test_a_cycle_that_drafted_nothing_keeps_the_root_pending():
    """max_nodes = 1 drafts nothing; the root must still reach the draft model later."""
    prompt = [1, 4, 3]
    drafter = DraftModelDrafter(DRAFT, DRAFT_CONFIG, gamma=2)
    drafter.begin(prompt, {}, GREEDY)
    tree = drafter.propose(prompt[-1], SeededRandomness(0), max_nodes=1)
    assert len(tree) == 1, f"max_nodes=1 leaves room for the root only, got {len(tree)} nodes"
    drafter.accept([prompt[-1]], {}, 5)
    got = [int(t) for t in drafter.propose(5, SeededRandomness(0), max_nodes=16).tokens[1:]]
    want = greedy_continuation([*prompt, 5], 2)
    assert got == want, (
        f"drafted {got} after an empty cycle, expected {want} (the root stays pending)"
    )


@pytest.mark.points(2)
def test_sampled_drafts_carry_the_distribution_they_were_drawn_from():
    """T = 1: each draft's proposal is the processed draft distribution at its context."""
    prompt = [1, 4, 3, 5]
    sampling = SamplingParams(temperature=0.7, top_k=4)
    drafter = DraftModelDrafter(DRAFT, DRAFT_CONFIG, gamma=3)
    drafter.begin(prompt, {}, sampling)
    tree = drafter.propose(prompt[-1], SeededRandomness(5), max_nodes=16)
    context = list(prompt)
    for node in range(1, len(tree)):
        q = tree.proposals[node]
        want = target_distribution(draft_logits(context), sampling)
        assert q is not None, (
            "a sampled draft must carry the q it was drawn from (proposal None means deterministic)"
        )
        assert np.allclose(q, want, atol=1e-12), (
            f"draft {node} carries a q that is not target_distribution(draft logits, sampling) at "
            "its context"
        )
        assert q[int(tree.tokens[node])] > 0, "the draft token has probability 0 under its own q"
        context.append(int(tree.tokens[node]))


@pytest.mark.points(3)
def test_exact_law_at_temperature_one():
    """T = 1: the emitted tokens follow the target's law exactly (every branch enumerated)."""
    prompt, k = [1, 4], 2
    make = lambda: DraftModelDrafter(DRAFT, DRAFT_CONFIG, gamma=2)  # noqa: E731
    law, accepts = generation_law(TARGET, CONFIG, prompt, make, LAW_SAMPLING, k)
    tv = total_variation(law, target_law(TARGET, CONFIG, prompt, LAW_SAMPLING, k))
    assert tv < 1e-12, (
        f"the law of the emitted tokens differs from the target's by TV = {tv:.3e}: check that "
        "each sampled draft carries its q and that the draft's cache is rolled back"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [3, 4])
def test_greedy_equals_vanilla_over_many_cycles(seed):
    """T = 0, 20 tokens: equal to vanilla greedy with drafts both accepted and rejected."""
    draft = model.init_params(DRAFT_CONFIG, seed=seed, dtype=np.float64)
    prompt = [1, 3]
    vanilla = generate(
        TARGET, CONFIG, prompt, max_new_tokens=20, sampling=GREEDY, stop_at_eos=False
    )
    spec = generate(
        TARGET, CONFIG, prompt, drafter=DraftModelDrafter(draft, DRAFT_CONFIG, gamma=4),
        max_new_tokens=20, sampling=GREEDY, stop_at_eos=False,
    )  # fmt: skip
    assert spec.tokens == vanilla.tokens, f"emitted {spec.tokens}, vanilla greedy {vanilla.tokens}"


@pytest.mark.points(3)
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["T=0", "T=1"])
def test_the_target_as_its_own_draft_is_always_accepted(sampling):
    """Efficiency: drafting with the target itself, every draft is accepted (tau = gamma + 1)."""
    gamma = 3
    result = generate(
        TARGET, CONFIG, [1, 4], drafter=DraftModelDrafter(TARGET, CONFIG, gamma=gamma),
        max_new_tokens=16, sampling=sampling, seed=0, stop_at_eos=False,
    )  # fmt: skip
    full = [a for a in result.accepted_per_cycle[:-1]]
    assert full and all(a == gamma for a in full), (
        f"with the target as the draft model every one of the gamma = {gamma} drafts must be "
        f"accepted each cycle; accepted per cycle: {result.accepted_per_cycle}. Check that you "
        "draft gamma tokens and roll the cache back to exactly what was kept"
    )
