"""Medusa-1: the heads (minieagle.heads.medusa) and the drafter (minieagle.drafters.medusa),
float64, on the 6-token tiny target of the drafter tests.

- The heads' backward matches centred differences, one bound per tensor (random upstream
  gradients); a backward that drops SiLU's derivative is caught by the same check.
- Zero-initialised heads are the target's LM head; labels are the true tokens k + 1 ahead.
- Save/load round-trips; bad configs, shapes, NaN and other head kinds are refused.
- Greedy Medusa decoding emits exactly greedy vanilla's tokens (random heads, many prompts).
- At T > 0 the exact law of the emitted tokens is the target's (drafting and verification
  enumerated); the Medusa tree's candidates are deterministic.
- Heads that agree with the target (a target that repeats its last token, zero-initialised
  heads) get every level accepted: τ = depth + 1; a drafter proposing nothing fails the check.
- Tree shapes, pruning to max_nodes; bad trees, heads for another target, CLI wiring; the
  shipped heads decode greedily like vanilla on the shipped target.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_eagle import CONFIG, LAW_TOLERANCE, TARGET, V
from tiny_eagle import run as _run

from minieagle import model
from minieagle.drafters import NoDrafter, build_drafter
from minieagle.drafters.medusa import (
    DEFAULT_MEDUSA_TREE,
    MedusaDrafter,
    resolve_medusa_tree,
    tree_from_accuracies,
)
from minieagle.generate import greedy_reference
from minieagle.gradcheck import gradient_errors
from minieagle.heads.medusa import (
    IGNORE,
    MedusaConfig,
    head_param_shapes,
    init_heads,
    load_medusa_heads,
    medusa_backward,
    medusa_forward,
    medusa_labels,
    medusa_loss,
    save_medusa_heads,
)
from minieagle.sampling import SamplingParams
from minieagle.testing import generation_law, target_law, total_variation
from minieagle.tree import depths

CFG = MedusaConfig.from_target(CONFIG, num_heads=4)
GRAD_BOUND = 1e-7  # float64 centred differences; measured errors are about 1e-9


def _random_heads(seed: int, scale: float = 1.0, cfg: MedusaConfig = CFG) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(0, scale, size=s) for n, s in head_param_shapes(cfg).items()}


HEADS = _random_heads(1)


def _drafter(tree="default", heads=HEADS, cfg=CFG):
    return MedusaDrafter(TARGET, CONFIG, heads, cfg, tree=tree)


# ---------------------------------------------------------------------------- the heads


def _check_gradients(backward, seed: int = 0, own_lm_head: bool = False) -> dict:
    """Relative errors of `backward(dlogits, cache)` against centred differences of
    sum(logits * dlogits), dlogits random; one entry per tensor."""
    cfg = MedusaConfig(hidden_size=8, vocab_size=11, num_heads=3, own_lm_head=own_lm_head)
    rng = np.random.default_rng(seed)
    heads = _random_heads(seed, 0.5, cfg)
    lm_head, features = rng.normal(size=(11, 8)), rng.normal(size=(2, 5, 8))
    dlogits = rng.normal(size=(3, 2, 5, 11))
    _, cache = medusa_forward(heads, cfg, lm_head, features)
    grads = backward(dlogits, cache)

    def f():
        return float(np.sum(medusa_forward(heads, cfg, lm_head, features)[0] * dlogits))

    return gradient_errors(f, heads, grads, seed=seed)


@pytest.mark.parametrize("own_lm_head", [False, True])
def test_backward_matches_centred_differences(own_lm_head):
    errors = _check_gradients(medusa_backward, own_lm_head=own_lm_head)
    assert len(errors) == (9 if own_lm_head else 6)
    for name, error in errors.items():
        assert error < GRAD_BOUND, f"{name}: relative error {error:.2e}"


def _without_silu_derivative(dlogits, cache):
    """A planted bug: SiLU's derivative taken as σ(z) alone (the backward run with z = 0)."""
    blocks, lm_head = cache
    planted = [(c, np.zeros_like(z), sig, r, own) for c, z, sig, r, own in blocks]
    return medusa_backward(dlogits, (planted, lm_head))


def test_the_gradient_check_catches_a_wrong_silu_derivative():
    errors = _check_gradients(_without_silu_derivative)
    assert max(errors.values()) > 1e-3


@pytest.mark.parametrize("own_lm_head", [False, True])
def test_the_loss_gradient_matches_centred_differences(own_lm_head):
    cfg = MedusaConfig(hidden_size=8, vocab_size=11, num_heads=3, own_lm_head=own_lm_head)
    rng = np.random.default_rng(2)
    heads = _random_heads(2, 0.5, cfg)
    lm_head, features = rng.normal(size=(11, 8)), rng.normal(size=(2, 6, 8))
    labels = medusa_labels(rng.integers(0, 11, size=(2, 7)), 3)
    _, _, grads = medusa_loss(heads, cfg, lm_head, features, labels, decay=0.8)
    errors = gradient_errors(
        lambda: medusa_loss(heads, cfg, lm_head, features, labels, decay=0.8)[0], heads, grads
    )
    for name, error in errors.items():
        assert error < GRAD_BOUND, f"{name}: relative error {error:.2e}"


@pytest.mark.parametrize("own_lm_head", [False, True])
def test_zero_initialised_heads_are_the_target_lm_head(own_lm_head):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(3, CONFIG.hidden_size))
    lm_head = model.lm_head_weight(TARGET)
    cfg = MedusaConfig.from_target(CONFIG, 4, own_lm_head)
    heads = init_heads(cfg, np.float64, lm_head=lm_head)
    logits, _ = medusa_forward(heads, cfg, lm_head, features)
    assert logits.shape == (4, 3, V)
    for k in range(4):
        np.testing.assert_allclose(logits[k], features @ lm_head.T, rtol=0, atol=1e-12)


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 3), st.integers(2, 9), st.integers(1, 5), st.integers(0, 2**31))
def test_labels_are_the_true_tokens_k_plus_one_ahead(batch, length, heads, seed):
    windows = np.random.default_rng(seed).integers(0, 50, size=(batch, length + 1))
    labels = medusa_labels(windows, heads)
    assert labels.shape == (heads, batch, length)
    for k in range(1, heads + 1):
        for t in range(length):
            want = windows[:, t + k + 1] if t + k + 1 <= length else IGNORE
            np.testing.assert_array_equal(labels[k - 1, :, t], want)


def test_loss_weights_decay_per_head():
    rng = np.random.default_rng(3)
    cfg = MedusaConfig(hidden_size=8, vocab_size=11, num_heads=3)
    args = (_random_heads(3, 0.5, cfg), cfg, rng.normal(size=(11, 8)), rng.normal(size=(2, 6, 8)))
    labels = medusa_labels(rng.integers(0, 11, size=(2, 7)), 3)
    loss, parts, _ = medusa_loss(*args, labels, decay=0.5)
    assert loss == pytest.approx(parts["ce_1"] + 0.5 * parts["ce_2"] + 0.25 * parts["ce_3"])


@pytest.mark.parametrize("own_lm_head", [False, True])
def test_save_and_load_round_trip(tmp_path, own_lm_head):
    want_cfg = MedusaConfig.from_target(CONFIG, 3, own_lm_head)
    want = _random_heads(5, cfg=want_cfg)
    save_medusa_heads(tmp_path / "heads", want, want_cfg, dtype="float64")
    heads, cfg = load_medusa_heads(tmp_path / "heads", dtype=np.float64)
    assert cfg == want_cfg
    assert heads.keys() == want.keys()
    assert all(np.array_equal(heads[n], want[n]) for n in want)
    assert sorted(p.name for p in (tmp_path / "heads").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_heads": 0}, "num_heads=0 must be a positive integer"),
        ({"hidden_size": 2.5}, "hidden_size=2.5 must be a positive integer"),
        ({"own_lm_head": "yes"}, "own_lm_head='yes' must be True or False"),
    ],
)
def test_bad_configs_are_refused(change, message):
    fields = dict(hidden_size=16, vocab_size=6, num_heads=4) | change
    with pytest.raises(ValueError, match=message):
        MedusaConfig(**fields)


def test_bad_heads_are_refused(tmp_path):
    bad = dict(HEADS, **{"medusa_head.0.0.linear.bias": np.full(16, np.nan)})
    with pytest.raises(ValueError, match="1 NaN|16 NaN"):
        save_medusa_heads(tmp_path / "nan", bad, CFG)
    short = {k: v for k, v in HEADS.items() if not k.startswith("medusa_head.3.")}
    with pytest.raises(ValueError, match=r"medusa_head.3.0.linear.bias: got None"):
        save_medusa_heads(tmp_path / "short", short, CFG)
    from minieagle.heads.eagle1 import Eagle1Config, init_head, save_head

    eagle = Eagle1Config.from_target(CONFIG)
    save_head(tmp_path / "eagle1", init_head(eagle), eagle)
    with pytest.raises(ValueError, match="not Medusa heads"):
        load_medusa_heads(tmp_path / "eagle1")
    with pytest.raises(ValueError, match=r"features have shape \(3, 5\)"):
        medusa_forward(HEADS, CFG, model.lm_head_weight(TARGET), np.zeros((3, 5)))


# ---------------------------------------------------------------------------- greedy


@settings(deadline=None, max_examples=40)
@given(
    st.lists(st.integers(0, V - 1), min_size=1, max_size=10),
    st.sampled_from(["default", "chain:4", "chain:1", [[0], [1], [0, 0]]]),
    st.integers(0, 2),
    st.integers(0, 18),
)
def test_greedy_medusa_is_greedy_vanilla(prompt, tree, heads_seed, n):
    drafter = _drafter(tree, heads=_random_heads(heads_seed))
    assert _run(prompt, drafter, n=n).tokens == greedy_reference(TARGET, CONFIG, prompt, n)


def test_greedy_cases_accept_drafts_and_fill_the_context():
    """Guards the test above: random heads' drafts are both rejected and accepted, and
    decoding up to a full context prunes the tree and stays exact."""
    accepted = set()
    for seed in range(3):
        for prompt in ([1, 3], [4, 0, 5], [2, 2, 2, 2]):
            result = _run(prompt, _drafter(heads=_random_heads(seed)), n=20)
            accepted |= set(result.accepted_per_cycle)
    assert 0 in accepted and max(accepted) >= 2
    prompt = [1, 3, 4]
    result = _run(prompt, _drafter(), n=CONFIG.max_position_embeddings)
    assert result.stop_reason == "context_full"
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, len(result.tokens))


# ---------------------------------------------------------------------------- the exact law


@pytest.mark.parametrize(
    ("sampling", "tree", "n"),
    [
        (SamplingParams(temperature=1.0), [[0], [1], [0, 0]], 2),
        (SamplingParams(temperature=1.0, top_k=3), "chain:2", 3),
        (SamplingParams(temperature=0.7, top_p=0.9), [[0], [1], [0, 0]], 2),
    ],
    ids=str,
)
def test_sampled_medusa_has_the_target_law(sampling, tree, n):
    prompt = [1, 3]
    law, accepted = generation_law(TARGET, CONFIG, prompt, lambda: _drafter(tree), sampling, n)
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances were walked


def test_the_law_check_catches_a_lossy_verifier(monkeypatch):
    """Negative control: accepting every Medusa candidate at T = 1 (no coin) changes the law,
    and the same comparison sees it."""
    import minieagle.generate as generate_module
    from minieagle.verify import Verdict

    def accept_all(tree, target_probs, rng):
        path = [0]
        kids = [i for i in range(1, len(tree)) if tree.parents[i] == path[-1]]
        while kids:
            path.append(kids[0])
            kids = [i for i in range(1, len(tree)) if tree.parents[i] == path[-1]]
        return Verdict(path[1:], int(rng.draw(target_probs[path[-1]])))

    monkeypatch.setitem(generate_module.VERIFIERS, "block", accept_all)
    sampling, prompt = SamplingParams(temperature=1.0), [1, 3]
    law, _ = generation_law(TARGET, CONFIG, prompt, lambda: _drafter("chain:2"), sampling, 2)
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, 2)) > 1e-3


def test_candidates_are_deterministic_top_k_of_each_head():
    drafter = _drafter()
    result_tree = None

    class Spy:
        feature_keys = ("final",)

        def begin(self, *a):
            drafter.begin(*a)

        def propose(self, root, rng, max_nodes):
            nonlocal result_tree
            result_tree = drafter.propose(root, rng, max_nodes)
            return result_tree

        def accept(self, *a):
            drafter.accept(*a)

    _run([1, 3, 4], Spy(), sampling=SamplingParams(temperature=1.0), n=1)
    assert all(q is None for q in result_tree.proposals)
    order = np.argsort(-drafter.draft_logits, axis=-1, kind="stable")  # [K, V]
    for node, path in enumerate(DEFAULT_MEDUSA_TREE, start=1):
        assert result_tree.tokens[node] == order[len(path) - 1, path[-1]]


# ---------------------------------------------------------------------------- τ with agreeing heads


def _repeating_target() -> dict:
    """The tiny target with every write into the residual stream zeroed: its final feature is
    RMSNorm(Embed(x_t)), and with these tied embeddings the argmax after any token is that
    token, so greedy decoding repeats the last token forever."""
    params = {k: v.copy() for k, v in TARGET.items()}
    for name in params:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            params[name][:] = 0.0
    return params


REPEATING = _repeating_target()


def _assert_every_level_accepted(drafter, depth: int) -> None:
    prompt, n = [1, 4, 4], 21  # the feature of the token before the root predicts it too
    result = generate_on(REPEATING, prompt, drafter, n)
    assert result.tokens == [4] * n  # the target repeats; the check is about its drafts
    assert result.tau == pytest.approx(n / len(result.emitted_per_cycle))
    assert all(a == depth for a in result.accepted_per_cycle), result.accepted_per_cycle


def generate_on(params, prompt, drafter, n):
    from minieagle.generate import generate

    return generate(params, CONFIG, prompt, drafter=drafter, max_new_tokens=n, stop_at_eos=False)


def test_heads_that_agree_with_the_target_get_every_level_accepted():
    logits = model.forward(REPEATING, CONFIG, np.arange(V)[:, None])[0][:, -1]  # [V, V]
    assert np.array_equal(np.argmax(logits, axis=-1), np.arange(V))  # the premise
    heads = init_heads(CFG, np.float64, lm_head=model.lm_head_weight(REPEATING))
    drafter = MedusaDrafter(REPEATING, CONFIG, heads, CFG, tree="default")
    _assert_every_level_accepted(drafter, depth=4)
    result = generate_on(REPEATING, [1, 4, 4], drafter, 20)
    assert result.tau == 5.0  # 4 drafts + the bonus token per target forward


def test_the_acceptance_check_catches_a_drafter_that_proposes_nothing():
    with pytest.raises(AssertionError):
        _assert_every_level_accepted(NoDrafter(), depth=4)


# ---------------------------------------------------------------------------- trees and errors


def test_default_tree_shape():
    paths = resolve_medusa_tree("default", 4)
    assert len(paths) + 1 == 22
    assert [sum(len(p) == d for p in paths) for d in (1, 2, 3, 4)] == [5, 8, 5, 3]


def _expected_accepted(paths, accuracy) -> float:
    return sum(float(np.prod([accuracy[d, r] for d, r in enumerate(p)])) for p in paths)


def _assert_best_tree(build, accuracy, size: int) -> None:
    """`build(accuracy, size)` is a valid tree (parents and elder siblings present) with the
    largest expected accepted drafts among all valid trees of that size (brute force)."""
    import itertools

    K, R = accuracy.shape
    every = [p for D in range(1, K + 1) for p in itertools.product(range(R), repeat=D)]
    best = max(
        _expected_accepted(subset, accuracy)
        for subset in itertools.combinations(every, size)
        if all(len(p) == 1 or p[:-1] in subset for p in subset)
        and all(p[-1] == 0 or (*p[:-1], p[-1] - 1) in subset for p in subset)
    )
    paths = build(accuracy, size)
    assert len(paths) == size and resolve_medusa_tree(paths, K) == paths
    assert _expected_accepted(paths, accuracy) == pytest.approx(best, abs=1e-12)


@settings(deadline=None, max_examples=15)
@given(st.integers(0, 2**31), st.integers(1, 5))
def test_trees_from_accuracies_are_the_best_of_their_size(seed, size):
    rng = np.random.default_rng(seed)
    accuracy = -np.sort(-rng.uniform(0, 0.6, size=(2, 3)), axis=1)  # falling with rank
    _assert_best_tree(tree_from_accuracies, accuracy, size)


def test_the_best_tree_check_catches_a_breadth_first_tree():
    """Negative control: the first paths level by level are valid but not the best."""
    accuracy = np.array([[0.9, 0.05, 0.01], [0.9, 0.05, 0.01]])

    def breadth_first(accuracy, size):
        return ((0,), (1,), (2,), (0, 0))[:size]

    with pytest.raises(AssertionError):
        _assert_best_tree(breadth_first, accuracy, 3)


@pytest.mark.parametrize("max_nodes", [2, 3, 7, 22, 40])
def test_trees_are_pruned_to_max_nodes(max_nodes):
    drafter = _drafter()
    _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray([1, 3]), output_hidden=("final",))
    drafter.begin([1, 3, 4], hidden, SamplingParams())
    tree = drafter.propose(4, None, max_nodes)
    assert len(tree) == min(max_nodes, 22)
    assert depths(tree).max() <= 4


def test_a_one_token_prompt_drafts_nothing_first():
    drafter = _drafter()
    drafter.begin([1], {}, SamplingParams())
    assert len(drafter.propose(1, None, 30)) == 1


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ("chain:5", "5 levels deep but there are 4 heads"),
        ("bushy", "unknown tree 'bushy'"),
        ([[0], [2]], r"no elder sibling \[1\]"),
    ],
)
def test_bad_trees_are_refused(tree, message):
    with pytest.raises(ValueError, match=message):
        _drafter(tree)


def test_heads_for_another_target_are_refused():
    """The message names the heads in plural without a verb to agree ("the Medusa heads has"
    was the old wording)."""
    other = MedusaConfig(hidden_size=32, vocab_size=6, num_heads=4)
    with pytest.raises(ValueError, match="^Medusa heads: hidden_size=32 but the target has 16"):
        MedusaDrafter(TARGET, CONFIG, _random_heads(0, cfg=other), other)
    missing = {k: v for k, v in HEADS.items() if k != "medusa_head.1.0.linear.weight"}
    with pytest.raises(ValueError, match="^Medusa heads: no parameter 'medusa_head.1.0.linear"):
        MedusaDrafter(TARGET, CONFIG, missing, CFG)
    bad = dict(HEADS, **{"medusa_head.1.0.linear.weight": np.zeros((16, 8))})
    with pytest.raises(ValueError, match=r"has shape \(16, 8\) but its config says \(16, 16\)"):
        MedusaDrafter(TARGET, CONFIG, bad, CFG)
    with pytest.raises(ValueError, match="--head DIR"):
        build_drafter("medusa", target=(TARGET, CONFIG))


def test_build_drafter_and_cli_flags(tmp_path):
    from minieagle import cli

    save_medusa_heads(tmp_path / "heads", HEADS, CFG, dtype="float64")
    drafter = build_drafter("medusa", target=(TARGET, CONFIG), head=(HEADS, CFG), tree="chain:3")
    assert drafter.paths == ((0,), (0, 0), (0, 0, 0))
    parser = cli.build_parser()
    args = parser.parse_args(["generate", "x", "--method", "medusa", "--depth", "2"])
    with pytest.raises(ValueError, match="--depth 2 applies to medusa only with --tree chain"):
        cli.check_method_flags(args)
    args = parser.parse_args(["generate", "x", "--method", "medusa", "--tree", "auto"])
    with pytest.raises(ValueError, match="medusa takes --tree default or --tree chain"):
        cli.check_method_flags(args)
    args = parser.parse_args(["generate", "x", "--method", "pld", "--head", "h"])
    with pytest.raises(ValueError, match="--head applies to"):
        cli.check_method_flags(args)


# ---------------------------------------------------------------------------- shipped heads

SHIPPED = Path(__file__).parent.parent / "minieagle" / "pretrained" / "small-medusa"


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").exists(), reason="no shipped heads")
def test_shipped_heads_decode_like_vanilla_and_stay_small():
    from minieagle.checkpoint import load_checkpoint

    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 3_000_000  # 2.2 MB in float16
    target_dir = SHIPPED.parent / "small"
    params, config, tokenizer = load_checkpoint(target_dir, dtype=np.float64)
    heads, cfg = load_medusa_heads(SHIPPED, target_dir=target_dir, dtype=np.float64)
    prompt = tokenizer.encode("def read_config(path):\n", add_bos=True)
    result = generate_on_target(params, config, prompt, MedusaDrafter(params, config, heads, cfg))
    assert result.tokens == generate_on_target(params, config, prompt, None).tokens
    assert result.tau > 1.2


def generate_on_target(params, config, prompt, drafter):
    from minieagle.generate import generate

    return generate(params, config, prompt, drafter=drafter, max_new_tokens=24)


# ---------------------------------------------------------------------------- training


def test_training_exports_loadable_heads_and_resumes_only_the_same_run(tmp_path):
    from minieagle.train_eagle import EagleTrainConfig, train_eagle_head

    def config(steps, **change):
        fields = dict(head="medusa", out_dir=str(tmp_path / "run"), steps=steps, batch_size=2,
                      seq_len=16, eval_every=2, eval_batches=1, save_every=1,
                      max_train_chars=20_000, medusa_heads=2, medusa_own_lm_head=False)  # fmt: skip
        return EagleTrainConfig(**(fields | change))

    log = train_eagle_head(config(2), progress=False)
    heads, cfg = load_medusa_heads(log["export_dir"])
    assert cfg.num_heads == 2 and not cfg.own_lm_head
    assert {"val_top1_1_prose", "val_top5_2_code", "val_ce_1_code"} <= log["evals"][-1].keys()
    assert train_eagle_head(config(3), progress=False)["evals"][-1]["step"] == 3  # resumed
    with pytest.raises(ValueError, match="medusa_heads=2, not 3"):
        train_eagle_head(config(4, medusa_heads=3), progress=False)
    with pytest.raises(ValueError, match="medusa_heads=0 must be >= 1"):
        config(1, medusa_heads=0)


def test_a_chain_deeper_than_the_heads_is_refused_before_it_is_built(monkeypatch):
    """Row 9 of issue 22: a chain of 100000 levels is refused by the head count before its
    O(D^2) path list is built (building it fails this test)."""
    from minieagle import static_trees

    def chain_tree(depth):
        raise AssertionError("the chain was built before its depth was checked")

    monkeypatch.setattr(static_trees, "chain_tree", chain_tree)
    with pytest.raises(ValueError, match="100000 levels deep but there are 4 heads"):
        _drafter("chain:100000")
