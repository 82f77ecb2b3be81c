"""Prompt lookup decoding (`minieagle.drafters.prompt_lookup`): the matching rules, losslessness
through the real loop on a 6-token float64 target, and that copying pays on repetitive text.

- Matching: the longest n-gram first, the most recent occurrence, a continuation that runs into
  the end repeats with the match's shift, max_nodes is respected, no match proposes nothing; the
  drafts equal a plain-loop oracle on any context (a first-occurrence lookup is caught). With
  max_matches > 1, distinct continuations become the root's children in match order, shared
  prefixes merged.
- Greedy prompt lookup is greedy vanilla, token for token; the drafter's context is the prompt
  and everything emitted.
- At T > 0 the exact law of the emitted tokens is the target's; a drafter that labels its
  deterministic candidates with a made-up q is caught.
- On a prompt that repeats itself the shipped target's tau is well above 1; a drafter that
  proposes nothing fails that check.
- The "edit this code" prompts (`data/edit_prompts.jsonl`): held-out functions, verbatim, and an
  `expected` answer that is exactly the function with one parameter renamed (an AST oracle; a
  rename that misses a use is caught); the builder reproduces the file; the loader's errors.
"""

from __future__ import annotations

import ast
import functools
import json
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import bench, model
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, main
from minieagle.config import LlamaConfig
from minieagle.data import build_edit_prompts, load_split
from minieagle.drafters import NoDrafter, build_drafter
from minieagle.drafters.prompt_lookup import (
    PromptLookupDrafter,
    find_match,
    lookup_drafts,
    lookup_tree,
)
from minieagle.errors import InvalidInputError
from minieagle.generate import generate
from minieagle.sampling import SamplingParams, SeededRandomness
from minieagle.testing import generation_law, target_law, total_variation
from minieagle.tree import Tree

CONFIG = LlamaConfig(
    vocab_size=6,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=48,
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
V = CONFIG.vocab_size
LAW_TOLERANCE = 1e-12


def _propose(context, max_nodes=64, **sizes) -> Tree:
    drafter = PromptLookupDrafter(**sizes)
    drafter.begin(list(context), {}, SamplingParams())
    return drafter.propose(context[-1], SeededRandomness(0), max_nodes)


# ---------------------------------------------------------------------------- matching rules


def test_the_longest_ngram_wins_over_a_more_recent_shorter_one():
    context = [7, 1, 2, 5, 3, 2, 9, 1, 2]  # (1, 2) at 1-2; the token 2 alone, last at 5
    assert find_match(context, 2) == (2, 2)
    assert lookup_drafts(context, 3, 2) == [5, 3, 2]
    assert find_match(context, 1) == (1, 5)
    assert lookup_drafts(context, 3, 1) == [9, 1, 2]


def test_the_most_recent_occurrence_wins():
    context = [1, 2, 5, 1, 2, 6, 1, 2]  # (1, 2) followed by 5, then by 6
    assert find_match(context, 2) == (2, 4)
    assert lookup_drafts(context, 3, 2) == [6, 1, 2]  # Hugging Face's first match gives 5, ...


def test_a_continuation_that_runs_into_the_end_repeats_with_the_match_shift():
    context = [4, 1, 2, 3, 1, 2, 3, 1]  # (3, 1) last seen ending at 4: period 3
    assert lookup_drafts(context, 10, 2) == [2, 3, 1, 2, 3, 1, 2, 3, 1, 2]
    assert lookup_drafts([5, 5], 4, 2) == [5, 5, 5, 5]  # a run of one token


def test_no_match_proposes_nothing():
    assert find_match([1, 2, 3], 2) is None
    assert find_match([3], 2) is None  # the prompt is the root alone
    assert lookup_drafts([1, 2, 3], 10, 2) == []
    tree = _propose([1, 2, 3])
    assert tree.tokens.tolist() == [3] and tree.parents.tolist() == [-1]


def test_an_ngram_longer_than_the_context_falls_back_to_shorter_ones():
    assert find_match([2, 4, 2], 5) == (1, 0)
    assert lookup_drafts([2, 4, 2], 3, 5) == [4, 2, 4]


@pytest.mark.parametrize("max_nodes", [1, 2, 4, 11, 30])
def test_the_chain_respects_max_nodes_and_the_draft_length(max_nodes):
    context = [1, 3, 4, 5, 3, 4, 5, 3, 4, 5, 3]
    tree = _propose(context, max_nodes=max_nodes, prompt_lookup_num_tokens=10)
    assert len(tree) == min(max_nodes, 11)
    assert tree.parents.tolist() == list(range(-1, len(tree) - 1))  # a chain from the root
    assert tree.proposals == (None,) * len(tree)  # deterministic: the one-hot rule applies
    assert tree.tokens.tolist() == [3, *lookup_drafts(context, len(tree) - 1, 2)]


def test_several_matches_make_a_tree_in_match_order():
    context = [1, 2, 5, 6, 1, 2, 7, 8, 1, 2]  # (1, 2) followed by 7 8 (latest), then by 5 6
    tree = lookup_tree(context, 2, 2, max_matches=2, max_nodes=64)
    assert tree.tokens.tolist() == [2, 7, 8, 5, 6]
    assert tree.parents.tolist() == [-1, 0, 1, 0, 3]  # the most recent match is the first child
    tree = lookup_tree(context, 2, 2, max_matches=2, max_nodes=4)
    assert tree.tokens.tolist() == [2, 7, 8, 5]  # filled branch by branch
    tree = lookup_tree(context, 2, 2, max_matches=1, max_nodes=64)
    assert tree.tokens.tolist() == [2, *lookup_drafts(context, 2, 2)]


def test_continuations_with_a_common_prefix_share_its_nodes():
    context = [1, 2, 9, 5, 1, 2, 9, 6, 1, 2]
    tree = lookup_tree(context, 2, 2, max_matches=3, max_nodes=64)
    assert tree.tokens.tolist() == [2, 9, 6, 5]
    assert tree.parents.tolist() == [-1, 0, 1, 1]
    # the shorter matches (the token 2 alone) end where the longer ones do: nothing new
    assert len(lookup_tree(context, 2, 2, max_matches=9, max_nodes=64)) == 4


def _oracle(context, num_tokens, max_ngram):
    """Plain loops: the longest n, the latest start whose n-gram ends before the root and equals
    the context's last n tokens; then copy token by token with the same shift."""
    seq, length = list(context), len(context)
    for n in range(max_ngram, 0, -1):
        for start in range(length - n - 1, -1, -1):
            if start + n <= length - 1 and seq[start : start + n] == seq[length - n :]:
                for i in range(num_tokens):
                    seq.append(seq[start + n + i])
                return seq[length:]
    return []


def _assert_matches_oracle(lookup, contexts):
    for context, num_tokens, max_ngram in contexts:
        got = lookup(context, num_tokens, max_ngram)
        want = _oracle(context, num_tokens, max_ngram)
        assert got == want, f"{context} (k={num_tokens}, n<={max_ngram}): {got} != {want}"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=20),
    st.integers(1, 6),
    st.integers(1, 4),
)
def test_drafts_equal_the_plain_loop_oracle(context, num_tokens, max_ngram):
    _assert_matches_oracle(lookup_drafts, [(context, num_tokens, max_ngram)])


def test_the_oracle_check_catches_a_first_occurrence_lookup():
    def first_occurrence(context, num_tokens, max_ngram):  # Hugging Face's choice, not ours
        length = len(context)
        for n in range(min(max_ngram, length - 1), 0, -1):
            for start in range(length - n):
                if context[start : start + n] == context[length - n :]:
                    return list(context[start + n : start + n + num_tokens])
        return []

    rng = np.random.default_rng(0)
    cases = [(rng.integers(0, 3, 12).tolist(), 4, 2) for _ in range(20)]
    with pytest.raises(AssertionError):
        _assert_matches_oracle(first_occurrence, cases)


# ---------------------------------------------------------------------------- losslessness

PROMPTS = [[1], [1, 3], [1, 3, 3], [1, 4, 5, 4], [1, 0, 5, 0, 5], [1, 3, 4, 3, 4, 3, 4]]
PROMPTS += [[1, *np.random.default_rng(seed).integers(0, V, 6).tolist()] for seed in range(6)]


@pytest.mark.parametrize("sizes", [(10, 2), (3, 1), (1, 3), (4, 2, 3)], ids=str)
@pytest.mark.parametrize("prompt", PROMPTS, ids=str)
def test_greedy_prompt_lookup_is_greedy_vanilla(prompt, sizes):
    vanilla = generate(TARGET, CONFIG, prompt, max_new_tokens=20, stop_at_eos=False)
    drafter = PromptLookupDrafter(*sizes)
    result = generate(TARGET, CONFIG, prompt, drafter=drafter, max_new_tokens=20, stop_at_eos=False)
    assert result.tokens == vanilla.tokens
    assert drafter.context[: len(prompt) + 20] == [*prompt, *result.tokens]
    assert max(result.accepted_per_cycle) >= 1  # the random target loops, and lookup copies


LAW_CASES = [
    # (sampling, tokens, prompt, max_matches): a chain, then a tree (the token 3 was followed by
    # 4 and by 5, so the first tree has two children)
    (SamplingParams(temperature=1.0, top_k=2), 3, [1, 3, 4, 3], 1),
    (SamplingParams(temperature=0.7, top_k=3, top_p=0.8), 3, [1, 4, 5, 4], 1),
    (SamplingParams(temperature=1.0, top_k=2), 3, [1, 3, 4, 3, 5, 3], 3),
    (SamplingParams(temperature=0.7, top_k=3, top_p=0.8), 3, [1, 3, 4, 3, 5, 3], 3),
]


@pytest.mark.parametrize(("sampling", "n", "prompt", "max_matches"), LAW_CASES, ids=str)
def test_prompt_lookup_output_has_the_target_law(sampling, n, prompt, max_matches):
    make_drafter = functools.partial(PromptLookupDrafter, 4, 2, max_matches)
    first = _propose(prompt, prompt_lookup_num_tokens=4, max_matches=max_matches)
    assert (first.parents == 0).sum() == min(max_matches, 2)
    law, accepted = generation_law(TARGET, CONFIG, prompt, make_drafter, sampling, n)
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances both walked


class _MadeUpProposals(PromptLookupDrafter):
    """Labels its copied (deterministic) drafts as if drawn from the uniform law: the verifier
    then accepts with min(1, p / q) and resamples from max(p - q, 0), which is wrong."""

    def propose(self, root, rng, max_nodes) -> Tree:
        tree = super().propose(root, rng, max_nodes)
        proposals = (None, *[np.full(V, 1.0 / V)] * (len(tree) - 1))
        return Tree(tree.tokens, tree.parents, proposals)


def test_the_law_check_catches_candidates_labelled_with_a_made_up_q():
    sampling, prompt = SamplingParams(temperature=1.0, top_k=2), [1, 3, 4, 3]
    law, _ = generation_law(TARGET, CONFIG, prompt, _MadeUpProposals, sampling, 3)
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, 3)) > 1e-3


# ---------------------------------------------------------------------------- efficiency


def _assert_copying_pays(make_drafter, min_tau=2.0):
    """tau of greedy decoding with the shipped target on a prompt that repeats itself."""
    params, config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    text = "import os\nimport sys\n" * 4 + "import os\n"  # continues: import os, ...
    ids = tokenizer.encode(text, add_bos=True)
    result = generate(params, config, ids, drafter=make_drafter(), max_new_tokens=32)
    assert result.tau >= min_tau, f"tau {result.tau:.2f} < {min_tau} on a repeating prompt"


def test_prompt_lookup_copies_a_prompt_that_repeats_itself():
    _assert_copying_pays(PromptLookupDrafter)


def test_the_efficiency_check_fails_a_drafter_that_proposes_nothing():
    with pytest.raises(AssertionError, match="tau 1.00"):
        _assert_copying_pays(NoDrafter)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10", None])
@pytest.mark.parametrize(
    "name", ["prompt_lookup_num_tokens", "max_matching_ngram_size", "max_matches"]
)
def test_bad_sizes_are_refused_naming_the_value(name, bad):
    with pytest.raises(InvalidInputError, match=rf"{name}={bad!r} is not a whole number >= 1"):
        PromptLookupDrafter(**{name: bad})


def test_build_drafter_makes_pld_with_huggingface_defaults():
    drafter = build_drafter("pld")
    assert (drafter.num_tokens, drafter.max_ngram) == (10, 2)
    drafter = build_drafter("pld", prompt_lookup_num_tokens=4, max_matching_ngram_size=3)
    assert (drafter.num_tokens, drafter.max_ngram) == (4, 3)
    with pytest.raises(InvalidInputError, match="prompt_lookup_num_tokens=0"):
        build_drafter("pld", prompt_lookup_num_tokens=0)


def test_a_root_that_is_not_the_last_token_is_refused():
    drafter = PromptLookupDrafter()
    drafter.begin([1, 3, 4], {}, SamplingParams())
    with pytest.raises(InvalidInputError, match="root 3 is not the last token"):
        drafter.propose(3, SeededRandomness(0), 8)


# ---------------------------------------------------------------------------- command line


def test_generate_with_pld_prints_the_greedy_text_and_tau(capsys):
    prompt = "x = 1\ny = 2\nx = 1\ny = 2\n"
    flags = ["--max-new-tokens", "12", "--stats"]
    assert main(["generate", prompt, *flags]) == 0
    vanilla = capsys.readouterr().out
    pld = ["--method", "pld", "--prompt-lookup-num-tokens", "4", "--max-matching-ngram-size", "3"]
    assert main(["generate", prompt, *flags, *pld]) == 0
    out, err = capsys.readouterr()
    assert out == vanilla
    assert "[pld: 12 tokens, " in err


@pytest.mark.parametrize("flag", ["--prompt-lookup-num-tokens", "--max-matching-ngram-size"])
def test_pld_flags_are_refused_for_other_methods(flag, capsys):
    assert main(["generate", "x", "--method", "vanilla", flag, "3"]) == 2
    assert f"{flag} applies to --method pld, not vanilla" in capsys.readouterr().err
    assert main(["generate", "x", flag, "3"]) == 2  # the default, --method auto, takes none
    assert f"{flag} applies to --method pld; the default" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "nan", "abc", ""])
@pytest.mark.parametrize("flag", ["--prompt-lookup-num-tokens", "--max-matching-ngram-size"])
def test_pld_flags_refuse_values_that_are_not_counts(flag, value, capsys):
    assert main(["generate", "x", "--method", "pld", flag, value]) == 2
    assert f"error: argument {flag}: " in capsys.readouterr().err


def test_a_huge_draft_length_is_capped_by_the_context(capsys):
    flags = ["--method", "pld", "--prompt-lookup-num-tokens", "1000000000", "--max-new-tokens", "8"]
    assert main(["generate", "import os\nimport os\n", *flags]) == 0


# ---------------------------------------------------------------------------- edit prompts

EDIT_FILE = build_edit_prompts._OUT
INSTRUCTION = "\n\n# the same function, with `{}` renamed to `{}`:\n"


@pytest.fixture(scope="module")
def edit_records() -> list[dict]:
    return [json.loads(line) for line in EDIT_FILE.read_text(encoding="utf-8").splitlines()]


def _assert_rename_is_exact(record):
    """The prompt's function with the parameter renamed in the AST (arguments and uses, not
    strings) is the prompt's last line followed by `expected`."""
    old, new = record["change"]["rename"]
    code, first = record["text"].split(INSTRUCTION.format(old, new))

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.Name(new, node.ctx) if node.id == old else node

        def visit_arg(self, node):
            node.arg = new if node.arg == old else node.arg
            return node

    want = ast.unparse(Rename().visit(ast.parse(code)))
    assert ast.unparse(ast.parse(first + record["expected"])) == want, record["source"]


def test_edit_prompts_hold_held_out_functions_verbatim_and_an_exact_rename(edit_records):
    documents = {d.source: d.text for d in load_split("code", "test")}
    assert len(edit_records) == 8 and len({r["source"] for r in edit_records}) == 8
    for record in edit_records:
        assert record["kind"] == "edit" and record["source"] in documents  # the test split
        old, new = record["change"]["rename"]
        code = record["text"].split(INSTRUCTION.format(old, new))[0]
        assert any(textwrap.indent(code, " " * k) in documents[record["source"]] for k in (0, 4))
        _assert_rename_is_exact(record)


def test_the_rename_check_catches_a_use_left_unrenamed(edit_records):
    record = dict(edit_records[0])
    old, new = record["change"]["rename"]
    record["expected"] = record["expected"].replace(new, old, 1)
    with pytest.raises(AssertionError):
        _assert_rename_is_exact(record)


def test_the_edit_prompt_builder_reproduces_the_file():
    records = build_edit_prompts.build_records()
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    assert payload == EDIT_FILE.read_text(encoding="utf-8")


def test_edit_prompts_load_whole_and_fit_the_context():
    _, config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    prompts = bench.edit_prompts(tokenizer)
    assert [kind for kind, _ in prompts] == ["edit"] * 8
    for _, ids in prompts:
        assert ids[0] == config.bos_token_id
        assert "# the same function, with `" in tokenizer.decode(ids)
        assert len(ids) + 64 <= config.max_position_embeddings  # room for a 64-token answer
    assert bench.prompt_set(tokenizer, "edit", per_kind=2) == prompts[:4]
    with pytest.raises(InvalidInputError, match=r"count=9 is outside \[1, 8\]"):
        bench.edit_prompts(tokenizer, count=9)
    with pytest.raises(InvalidInputError, match="no tokenizer"):
        bench.edit_prompts(None)
