"""Hardware-aware tree sizing: the dynamic tree's depth, top_k and total_tokens (and the EAGLE-1
chain length) that maximise the expected tokens per second on this machine, for this target and
head.

A speculative cycle drafts a tree, verifies it in one target forward and emits, on average,
τ tokens. Its speed, relative to vanilla decoding (one forward of one token per token), is

    speedup(k, d, N) = τ̂ * step / (verify(N) + loop + row · τ̂ + rows(k, N, τ̂)
                                   + draft(k, min(d, N - 2))),   τ̂ = τ̂(k, d, N)

- step: one vanilla decoding step (ms per token of `generate` without a drafter), timed
  after each calibration prompt below, so that it sees the machine as the cycles do;
- verify(N): one target forward over N tree tokens, its logits left lazy as verification
  leaves them, measured (the cost curve; on a CPU it grows with N, on a GPU it is nearly flat,
  so the best N differs by machine, EAGLE-2 §5.3), then scaled to the forwards the calibration
  runs ran (timed back to back, a forward finds its weights in the cache, which between the
  drafter's work it does not);
- loop + row · τ̂: the speculative loop's own work per cycle (the verdict, cache surgery, the
  drafter's accept), timed in the calibration runs as each cycle's wall time less its
  propose, its forward and its LM-head rows (for EAGLE-1's chain, in that drafter's own
  cycles), and fitted as a fixed part plus a part per token the cycle keeps (`fit_loop`), for
  each top_k on its own runs (a verdict at T > 0 reads every node of positive weight, many
  more in a deep tree than in a chain, so one pooled fit overcharged chains);
- rows(k, N, τ̂): the LM-head rows the verdict reads (`RowCosts`; SmolLM2's 49,152-row head
  makes one row about a fifth of a decoding step). A chain's rows are computed in one
  product at its first read (`inference.LazyLogits`), which costs a + b · N, fitted on every
  product timed in the calibration runs; a tree's are read along its accepted path, a
  product each, so they cost their measured ms per kept token (per top_k) times τ̂;
- the chains of 1-4 drafts (`WHOLE_CHAINS`), the trees that pay where a forward's cost grows
  with N, are also timed whole, each in a short decoding of its own, and that median cycle
  replaces the sum of the parts above for them (`cycle_ms`);
- draft(k, d): drafting with top_k = k and depth = d (the catch-up forward, d expansion
  levels of k nodes each, tree building), timed at depth 1 and at the deepest depth, straight
  in between, and one level less at depth 0; a tree of N nodes is charged the levels its
  drafter runs, min(d, N - 2) (a chain of one draft runs none);
- τ̂(k, d, N) = 1 + the expected number of accepted drafts of the tree EAGLE-2 would build:
  the N - 1 best candidates (by the drafter's own ranking, the value V = Π q along the path) of
  the pool cut to depth d + 1, each counted with g(V, depth), the observed chance that a node
  of value V at that depth lies on the accepted path (`PathAcceptance`: isotonic fits,
  `minieagle.calibration.fit_calibration`, of every verified node's (V, on the accepted path)
  in the same top_k's runs, one per depth with enough records). Fitting g on whole paths
  rather than multiplying per-token acceptance rates keeps the correlation along a path: at
  T = 0 a stretch the head predicts well is accepted token after token, and a product of
  independent per-token rates underestimated deep chains; one map per top_k, because a node's
  chance depends on its siblings' ranks as well as its value.

One calibration run per candidate top_k (`CANDIDATE_TOP_K`) at the deepest depth records every
cycle's pool; smaller depths and tree sizes are read from those pools, so the search costs a
few generations, not one per configuration. top_k = 1 makes the tree a chain of the head's
top-1 tokens (with the `sampled_tree` option at T > 0: EAGLE-1's sampled chain): its best
length is EAGLE-1's chain length (`Sizing.chain`). Drafting nothing (vanilla, speedup 1) is
always a candidate, so sized automatically a drafter is never expected to be slower.

`auto_size` caches the result per machine, package version, target, head and sampling setting
(~/.cache/minieagle/sizing/, override with MINIEAGLE_CACHE): the measurements take about 20 s
per head and setting for the tiny model, 45-65 s for SmolLM2 on a 2-core CPU, once; then the
sizes load instantly.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import os
import platform
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from minieagle import __version__, inference
from minieagle.backend import synchronize
from minieagle.cache import cache_root
from minieagle.calibration import TemperatureScores, fit_calibration
from minieagle.config import LlamaConfig
from minieagle.costs import measure_verify_cost
from minieagle.dynamic_tree import Pool, pool_depths, rerank
from minieagle.errors import InvalidInputError
from minieagle.sampling import SamplingParams, setting_name
from minieagle.tree import children, depths

SIZING_VERSION = 24  # bump when the code's costs change: cached sizes are then measured again
CANDIDATE_TOP_K = (1, 2, 4, 8)
MAX_DEPTH = 7  # expansion steps of the calibration runs: trees up to 8 drafts deep
WHOLE_CHAINS = (1, 2, 3, 4)  # chains of these many drafts are also timed whole (`cycle_ms`)
TOTAL_TOKENS = (2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 26, 32, 40, 48, 64)
VERIFY_SIZES = (1, 2, 4, 8, 16, 32, 64)  # verify(N) measured here, interpolated in between
CALIBRATION_NODES = 26  # the calibration runs' trees (a chain: depth + 1 nodes)
SIZING_SECONDS = 30.0  # auto_size's time budget for measuring (docs/speed.md)
MIN_CYCLES = 4  # drafting cycles a calibration run records, even past its time share
# ... and the chain's run (top_k = 1): its τ̂ decides whether any draft pays on a CPU, and 4
# cycles left it off by 0.6 (SmolLM2, EAGLE-1 head, T = 1: τ̂ 2.27 for a chain of two drafts
# that decoded at 1.61, and the drafter ran 6 % slower than vanilla; docs/speed.md)
MIN_CHAIN_CYCLES = 48
SIZING_PROMPTS = 4  # calibration prompts per kind (prose, code): twice the records of 2


@dataclass
class Sizing:
    """The chosen sizes and what the model expects of them. depth, top_k, total_tokens: the
    dynamic tree (`Eagle2Drafter`), total_tokens = 1 (depth = top_k = 0) meaning no tree pays
    here: draft nothing; chain: the best EAGLE-1 chain length (drafts; 0: none); expected_tau
    and expected_speedup: the model's τ̂ and speedup at the chosen sizes; chain_tau,
    chain_speedup: the same for the chain. setting: the sampling setting it was sized for.
    costs: the measured times in ms (verify by N, the vanilla step, the loop, draft by "k,d"),
    so a reader can redo the choice."""

    depth: int
    top_k: int
    total_tokens: int
    chain: int
    expected_tau: float
    expected_speedup: float
    chain_tau: float
    chain_speedup: float
    setting: str
    costs: dict = field(default_factory=dict)
    sampled_tree: bool = False
    calibrated: bool = False
    alternative: dict = field(default_factory=dict)
    cycles: dict = field(default_factory=dict)  # {top_k: cycles its τ̂ was measured over}

    def _over(self, top_k: int) -> str:
        """ " from C cycles" for the τ̂ of top_k's run, so that a reader sees what a
        prediction rests on ("" where unknown)."""
        count = self.cycles.get(top_k)
        return f" from {count} cycles" if count else ""

    def describe(self) -> str:
        kind = "sampled tree" if self.sampled_tree else "top-k tree"
        kind += ", calibrated scores" if self.calibrated else ""
        tree = (
            f"{kind}: depth {self.depth}, top_k {self.top_k}, total_tokens {self.total_tokens}"
            if self.total_tokens > 1
            else "no tree (none is predicted to beat vanilla decoding)"
        )
        chain = f"chain:{self.chain}" if self.chain else "no chain"
        other = ""
        if self.alternative:
            rival = "sampled tree" if self.alternative["sampled_tree"] else "top-k tree"
            other = f"; the {rival}'s best: {self.alternative['describe']}"
        tree_over = self._over(self.top_k) if self.total_tokens > 1 else ""
        chain_over = self._over(1) if self.chain else ""
        return (
            f"auto sizing ({self.setting}): {tree} (expected tau {self.expected_tau:.2f}"
            f"{tree_over}, speedup {self.expected_speedup:.2f}x); EAGLE-1 {chain} (expected tau "
            f"{self.chain_tau:.2f}{chain_over}, {self.chain_speedup:.2f}x){other}"
        )


# ---------------------------------------------------------------------------- measurements


def measure_verify_ms(target, config: LlamaConfig, prompt, sizes, *, repeats: int = 5,
                      lazy_logits: bool = False) -> dict:  # fmt: skip
    """{N: median ms} of one fast-path verification forward over N tokens after `prompt`
    (`costs.measure_verify_cost`, which the cost curves of the docs come from); lazy_logits:
    no LM-head row computed, as verification's forward leaves them."""
    measured = measure_verify_cost(target, config, prompt, sizes=sizes, repeats=repeats, fast=True,
                                   lazy_logits=lazy_logits)  # fmt: skip
    return {int(n): spread["median"] for n, spread in measured["ms"].items()}


def lower_envelope(verify_ms: dict) -> dict:
    """{N: ms} made non-decreasing in N from below: each N gets the least time measured at N or
    any larger size. A forward over more tokens never costs less, so a time above a larger
    size's was disturbed (on a shared CPU, other jobs' bursts; seen: verify(1) measured at 3.6
    times verify(2), which made every tree look several times faster than vanilla)."""
    envelope, least = {}, float("inf")
    for n in sorted(verify_ms, reverse=True):
        least = min(least, verify_ms[n])
        envelope[n] = least
    return {n: envelope[n] for n in sorted(envelope)}


class _TimedTarget:
    """A prepared target whose forwards are timed: `forward_ms` adds up every call's ms (the
    device synchronised first, so a GPU's forward is counted where it runs), `rows_ms` the ms
    of the LM-head products its lazy logits run when the verdict reads them, and `products`
    holds each product's (rows, ms). Everything else is the target's own; `generate` takes it
    as the prepared view it is."""

    def __init__(self, target):
        self.target, self.forward_ms = target, 0.0
        self.rows_ms, self.products = 0.0, []

    def view(self):
        timed = copy.copy(self.target)  # the same arrays; only its forward is wrapped
        inner = self.target.forward

        def forward(*args, **kwargs):
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            synchronize(self.target.embed)
            self.forward_ms += 1e3 * (time.perf_counter() - start)
            logits, hidden = out
            if isinstance(logits, inference.LazyLogits):
                out = (_TimedRows(logits, self), hidden)
            return out

        timed.forward = forward
        return timed


class _TimedRows:
    """Lazy logits whose products are timed into a `_TimedTarget` (`rows_ms`, `products`)."""

    def __init__(self, logits: inference.LazyLogits, clock: _TimedTarget):
        self.logits, self.clock = logits, clock

    def __len__(self) -> int:
        return len(self.logits)

    def __getitem__(self, i: int):
        computed = len(self.logits.rows)
        start = time.perf_counter()
        row = self.logits[i]
        if len(self.logits.rows) > computed:
            synchronize(row)
            ms = 1e3 * (time.perf_counter() - start)
            self.clock.rows_ms += ms
            self.clock.products.append((len(self.logits.rows) - computed, ms))
        return row


class _Stopwatch:
    """Wraps any drafter, without changing what it drafts, and times its cycles: each propose
    and, with the `_TimedTarget` it decodes against, the loop's own work (`loops`)."""

    def __init__(self, drafter, timed_target: _TimedTarget | None = None):
        self.inner = drafter
        self.feature_keys = drafter.feature_keys
        self.timed_target = timed_target
        self.propose_ms: list[float] = []
        self.propose_starts: list[tuple[float, float, float]] = []  # (clock, forward ms and
        # LM-head rows ms so far)
        self.tree_sizes: list[int] = []  # nodes verified per cycle, root included
        self.kept: list[int] = []  # tokens kept per cycle (the accepted path, root included)

    def begin(self, prompt_ids, features, sampling) -> None:
        self.inner.begin(prompt_ids, features, sampling)

    def propose(self, root, rng, max_nodes):
        start = time.perf_counter()
        clock = self.timed_target
        forwarded, rows = (clock.forward_ms, clock.rows_ms) if clock is not None else (0.0, 0.0)
        tree = self.inner.propose(root, rng, max_nodes)
        self.propose_ms.append(1e3 * (time.perf_counter() - start))
        self.propose_starts.append((start, forwarded, rows))
        self.tree_sizes.append(len(tree))
        return tree

    def _cycles(self) -> list[tuple[float, float, float]]:
        """(wall, forward, rows) ms of every cycle but the last (it has no end): from one
        propose's start to the next, and what the timed target spent between them in its
        forwards and in LM-head rows."""
        return [
            (1e3 * (after - start), forwarded_after - forwarded, rows_after - rows)
            for (start, forwarded, rows), (after, forwarded_after, rows_after)
            in zip(self.propose_starts, self.propose_starts[1:], strict=False)
        ]  # fmt: skip

    def forwards(self) -> list[tuple[float, int]]:
        """(ms, nodes) of the target's forward in every cycle but the last, with its tree's
        size. Empty without a timed target."""
        if self.timed_target is None:
            return []
        cycles = zip(self._cycles(), self.tree_sizes, strict=False)
        return [(forward, n) for (_, forward, _), n in cycles]

    def loops(self) -> list[tuple[float, int]]:
        """(ms, tokens kept) of the loop's own work in every cycle but the last (the verdict,
        cache surgery, the drafter's accept): the wall time from one propose to the next, less
        the propose, the target's forward and the LM-head rows between them, with the accepted
        path's length (root included). Empty without a timed target."""
        if self.timed_target is None:
            return []
        cycles = zip(self._cycles(), self.propose_ms, self.kept, strict=False)
        return [(wall - ms - forward - rows, kept) for (wall, forward, rows), ms, kept in cycles]

    def walls(self) -> list[float]:
        """The wall ms of every cycle but the last, from one propose to the next: all of it,
        drafting, forward, rows and loop."""
        return [wall for wall, _, _ in self._cycles()]

    def rows(self) -> list[tuple[float, int]]:
        """(ms, tokens kept) of the LM-head rows the verdict read in every cycle but the last.
        Empty without a timed target."""
        if self.timed_target is None:
            return []
        return [(rows, kept) for (_, _, rows), kept in zip(self._cycles(), self.kept, strict=False)]

    def accept(self, tokens, features, next_token) -> None:
        self.kept.append(len(tokens))
        self.inner.accept(tokens, features, next_token)


class _TimedDrafter(_Stopwatch):
    """Wraps an `Eagle2Drafter` for a calibration run: keeps each cycle's pool and times its
    propose (whole), its expansion levels (head forward + children) and its cycles, without
    changing what it drafts."""

    def __init__(self, drafter, timed_target: _TimedTarget | None = None):
        super().__init__(drafter, timed_target)
        self.pools: list[Pool] = []
        self.path_records: list[tuple[float, bool]] = []  # (value V, on the accepted path)
        self.path_depths: list[int] = []  # the depth of each record's node
        self._last = None  # (tree, values [N]) of the last proposal
        self.level_ms: list[float] = []
        feed, add = drafter._feed_level, drafter._add_level
        self._level_start = None

        def timed_feed(*args, **kwargs):
            self._level_start = time.perf_counter()
            return feed(*args, **kwargs)

        def timed_add(*args, **kwargs):
            out = add(*args, **kwargs)
            if self._level_start is not None:  # the root's children are not a level
                self.level_ms.append(1e3 * (time.perf_counter() - self._level_start))
                self._level_start = None
            return out

        drafter._feed_level, drafter._add_level = timed_feed, timed_add

    def propose(self, root, rng, max_nodes):
        tree = super().propose(root, rng, max_nodes)
        self._last = None
        if len(tree) > 1 and self.inner.pool is not None:
            pool = self.inner.pool
            self.pools.append(pool)
            self._last = (tree, np.exp(pool.scores[self.inner.selected]))
        return tree

    def accept(self, tokens, features, next_token) -> None:
        if self._last is not None:
            tree, values = self._last
            kids = children(tree)
            on_path, node = set(), 0
            for token in tokens[1:]:  # siblings hold distinct tokens
                node = next(c for c in kids[node] if int(tree.tokens[c]) == int(token))
                on_path.add(node)
            self.path_records += [(float(v), i + 1 in on_path) for i, v in enumerate(values)]
            self.path_depths += depths(tree)[1:].tolist()
        super().accept(tokens, features, next_token)


def calibration_run(
    target,
    config,
    head,
    head_cfg,
    vocab,
    prompts,
    sampling: SamplingParams,
    top_k: int,
    *,
    depth: int = MAX_DEPTH,
    new_tokens: int = 48,
    seed: int = 0,
    sampled_tree: bool = False,
    calibration=None,
    deadline: float | None = None,
    on_cycle=None,
    time_vanilla: bool = True,
):
    """Decode `prompts` ((kind, ids) pairs) with an `Eagle2Drafter` of this top_k at `depth`,
    a tree large enough never to cut the expansion (sampled_tree: its option, which at T > 0
    with top_k = 1 is EAGLE-1's sampled chain; calibration: the map the drafter ranks by).
    Returns a `CalibrationRun`: the pools, the `PathAcceptance` fitted on every verified
    node, the median propose and level ms, and each cycle's loop ms. deadline: a
    `time.perf_counter()` time after which decoding stops, once MIN_CYCLES cycles are
    recorded (MIN_CHAIN_CYCLES for top_k = 1, whose run spreads its time and cycles equally
    over the prompts); on_cycle: called after every cycle (a progress bar); time_vanilla: also
    time a vanilla step after each prompt (`_vanilla_ms`; not needed where the step is known;
    a spread run times it after its first two prompts)."""
    from minieagle.generate import generate

    pools, records, node_depths, propose, level, loops, forwards = [], [], [], [], [], [], []
    vanilla, rows = [], []
    make = tree_drafter(target, config, head, head_cfg, vocab, top_k, depth, sampled_tree,
                        calibration)  # fmt: skip
    timed = _TimedTarget(inference.prepare(target, config))
    least = MIN_CHAIN_CYCLES if top_k == 1 else MIN_CYCLES
    # The chain's run, bounded, gives every prompt an equal share of its time and of its least
    # cycles: decoded one after another to new_tokens, its 48 cycles had read only the first
    # one or two prompts (SmolLM2: τ̂ 1.32 where 134 cycles over four prompts read 1.43). The
    # other top_k keep their prompts in turn: a prompt's prefill (~0.4 s on SmolLM2) would
    # take most of their share.
    spread = deadline is not None and top_k == 1
    for i, (_, ids) in enumerate(prompts):
        drafter, earlier = _TimedDrafter(make(), timed), len(pools)
        stop, floor = deadline, least
        if spread:
            now, left = time.perf_counter(), len(prompts) - i
            stop = now + max(0.0, deadline - now) / left
            floor = earlier + -(-max(0, least - earlier) // left)  # ceil: the rest, shared

        def cycle_done(_tokens, drafter=drafter, earlier=earlier, stop=stop, floor=floor):
            if on_cycle is not None:
                on_cycle()
            enough = earlier + len(drafter.pools) >= floor and len(drafter.propose_ms) > 1
            if stop is not None and enough and time.perf_counter() > stop:
                raise _OutOfTime

        try:
            generate(timed.view(), config, ids, drafter=drafter, max_new_tokens=new_tokens,
                     sampling=sampling, seed=seed + i, stop_at_eos=False,
                     on_tokens=cycle_done)  # fmt: skip
            out_of_time = False
        except _OutOfTime:  # the cycles decoded so far are complete records
            out_of_time = True
        pools += drafter.pools
        records += drafter.path_records
        node_depths += drafter.path_depths
        propose += drafter.propose_ms[1:]  # the first cycle's catch-up reads the whole prompt
        level += drafter.level_ms
        loops += drafter.loops()
        rows += drafter.rows()
        forwards += drafter.forwards()
        if time_vanilla and not (spread and len(vanilla) >= 2):  # a spread run: two suffice
            vanilla.append(_vanilla_ms(target, config, ids, sampling, seed + i))
        if out_of_time and not spread:
            break
    on_path = PathAcceptance(
        records, node_depths, setting_name(sampling, sampled_tree=sampled_tree)
    )
    return CalibrationRun(pools, on_path, statistics.median(propose), statistics.median(level),
                          loops, forwards, vanilla, rows, timed.products)  # fmt: skip


VANILLA_TOKENS = 16  # tokens of the vanilla decoding after each calibration prompt


def _vanilla_ms(target, config, ids, sampling, seed: int) -> float:
    """ms per token of vanilla decoding of `ids` (VANILLA_TOKENS tokens): one step, timed
    between the speculative decodings so that both see the machine in the same state."""
    from minieagle.generate import generate

    result = generate(target, config, ids, max_new_tokens=VANILLA_TOKENS, sampling=sampling,
                      seed=seed, stop_at_eos=False)  # fmt: skip
    return 1e3 * result.decode_seconds / max(1, len(result.tokens))


@dataclass
class CalibrationRun:
    """What one calibration run measured: every cycle's candidate pool, g(V, depth) fitted on
    its verified nodes, the median ms of a propose and of one expansion level, and the loop's
    own ms in each cycle but each prompt's last (`_Stopwatch.loops`), the target's forward
    in those cycles, (ms, nodes) (`_Stopwatch.forwards`), a vanilla step's ms after each
    prompt (`_vanilla_ms`), the LM-head rows' (ms, tokens kept) in those cycles
    (`_Stopwatch.rows`) and every LM-head product's (rows, ms) (`_TimedTarget.products`)."""

    pools: list
    on_path: PathAcceptance
    propose_ms: float
    level_ms: float
    loops: list
    forwards: list
    vanilla_ms: list
    rows: list = field(default_factory=list)
    products: list = field(default_factory=list)


class _OutOfTime(Exception):
    """A measurement's share of the time budget is spent (raised between two cycles)."""


# ---------------------------------------------------------------------------- the model


class PathAcceptance:
    """g(V, depth): the observed chance that a verified node of value V at this depth lies on
    the accepted path, from (V, on the path) records and the nodes' depths. One isotonic map
    (`calibration.fit_calibration`) per depth with at least MIN_RECORDS records, and one over
    all depths for the rest. The depth matters where the value says little: in a sampled tree
    every first draw scores 1, yet a deep one is accepted far less often than a shallow one."""

    MIN_RECORDS = 30
    PRIOR_WEIGHT = 0.05  # nearly none: unlike a draft's q, a value is no acceptance estimate

    def __init__(self, records, node_depths, setting: str):
        self.records = len(records)
        fit = functools.partial(fit_calibration, setting=setting, prior_weight=self.PRIOR_WEIGHT)
        self.pooled = fit(records)
        by_depth: dict = {}
        for record, depth in zip(records, node_depths, strict=True):
            by_depth.setdefault(int(depth), []).append(record)
        self.by_depth = {
            depth: fit(rows) for depth, rows in by_depth.items() if len(rows) >= self.MIN_RECORDS
        }

    def __call__(self, values, node_depths) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        out = self.pooled(values)
        for depth, fitted in self.by_depth.items():
            at = np.asarray(node_depths) == depth
            out[at] = fitted(values[at])
        return out


def tree_drafter(target, config, head, head_cfg, vocab, top_k: int, depth: int,
                 sampled_tree: bool, calibration=None, total_tokens=None):  # fmt: skip
    """A maker of the `Eagle2Drafter` the sizing measures at (top_k, depth): a tree large
    enough (26 nodes, at least) never to cut the expansion, or of total_tokens nodes when
    given, ranking by `calibration` (a `Calibration` for the sizing's setting, or None) as the
    sized drafter will."""
    from minieagle.drafters.eagle2 import Eagle2Drafter

    total = total_tokens or max(top_k + 1, depth + 2, CALIBRATION_NODES)
    return lambda: Eagle2Drafter(
        target, config, head, head_cfg, vocab, depth=depth, top_k=top_k, total_tokens=total,
        sampled_tree=sampled_tree, calibration=calibration,
    )  # fmt: skip


def _propose_ms(target, config, prompts, sampling, make_drafter, new_tokens: int = 12,
                cycles: int = 4) -> float:  # fmt: skip
    """Median ms of one drafter's propose over a short decoding of the first prompts (at most
    `cycles` proposals after the first of each prompt, whose catch-up reads the whole
    prompt)."""
    return statistics.median(
        _timed_cycles(target, config, prompts, sampling, make_drafter, new_tokens, cycles,
                      with_vanilla=False)[0]
    )


def _timed_cycles(target, config, prompts, sampling, make_drafter, new_tokens: int = 12,
                  cycles: int = 4, prompts_used: int = 2, with_vanilla: bool = True
                  ) -> tuple[list, list, list, list, list, list]:  # fmt: skip
    """`_propose_ms`'s decoding of the first `prompts_used` prompts: (the propose ms after each
    prompt's first, the loop's own ms of each cycle, its forward's (ms, nodes):
    `_Stopwatch.loops` and `forwards`, a vanilla step's ms after each prompt if with_vanilla,
    the LM-head products' (rows, ms): `_TimedTarget.products`, and each cycle's whole wall ms
    after each prompt's first: `_Stopwatch.walls`)."""
    from minieagle.generate import generate

    times, loops, forwards, vanilla, walls = [], [], [], [], []
    clock = _TimedTarget(inference.prepare(target, config))
    for i, (_, ids) in enumerate(prompts[:prompts_used]):
        timed = _Stopwatch(make_drafter(), clock)

        def enough(_tokens, timed=timed):
            if len(timed.propose_ms) > cycles:
                raise _OutOfTime

        with contextlib.suppress(_OutOfTime):
            generate(clock.view(), config, ids, drafter=timed, max_new_tokens=new_tokens,
                     sampling=sampling, seed=i, stop_at_eos=False, on_tokens=enough)  # fmt: skip
        times += timed.propose_ms[1:]
        walls += timed.walls()[1:]  # the first cycle's catch-up reads the whole prompt
        loops += timed.loops()
        forwards += timed.forwards()
        if with_vanilla:
            vanilla.append(_vanilla_ms(target, config, ids, sampling, i))
        if len(times) >= cycles:
            break
    return times, loops, forwards, vanilla, clock.products, walls


def expected_accepted(pool: Pool, on_path, depth: int, drafts: int) -> float:
    """Expected accepted drafts of the tree the drafter builds from `pool` with `depth`
    expansion steps and `drafts` = total_tokens - 1: its ranking (the pool's scores) picks the
    candidates no deeper than depth + 1; each counts on_path(V), the chance that a node of
    value V = exp(score) is on the accepted path (a fitted `Calibration`, or a
    `PathAcceptance`, which reads the nodes' depths too)."""
    depths = pool_depths(pool.parents)
    n = int(np.count_nonzero(depths <= depth + 1))  # a prefix: the pool grows level by level
    if n == 0:
        return 0.0
    chosen = rerank(pool.scores[:n], pool.parents[:n], drafts)
    values = np.exp(pool.scores[chosen])
    if isinstance(on_path, PathAcceptance):
        return float(on_path(values, depths[chosen]).sum())
    return float(on_path(values).sum())


def fit_loop(records) -> tuple[float, float]:
    """(ms a cycle, ms per token kept) of the loop's own work from (ms, tokens kept) records,
    one per cycle: the per-token part the least-squares slope (0 when the records keep one
    length only, or when it comes out negative), the fixed part the median of what the slope
    leaves (at least 0). The verdict reads an LM-head row for each token on the accepted path,
    so the loop grows with τ; a single median charged a short chain the rows of the deep trees
    the calibration decodes with."""
    if not records:
        return 0.0, 0.0
    ms = np.array([m for m, _ in records], dtype=np.float64)
    kept = np.array([k for _, k in records], dtype=np.float64)
    spread = float(np.var(kept))
    slope = float(np.mean((kept - kept.mean()) * (ms - ms.mean())) / spread) if spread else 0.0
    slope = max(0.0, slope)
    return max(0.0, float(np.median(ms - slope * kept))), slope


def fit_rows(products) -> tuple[float, float]:
    """(ms a product, ms per row) of the LM-head products from their (rows, ms) records: a
    line through each row count's median ms (least squares over the row counts, the slope at
    least 0; with one row count, all of it the fixed part)."""
    by_rows: dict = {}
    for rows, ms in products:
        by_rows.setdefault(int(rows), []).append(float(ms))
    if not by_rows:
        return 0.0, 0.0
    counts = np.array(sorted(by_rows), dtype=np.float64)
    ms = np.array([statistics.median(by_rows[int(r)]) for r in counts])
    slope = 0.0
    if len(counts) > 1:
        slope = max(0.0, float(np.polyfit(counts, ms, 1)[0]))
    return max(0.0, float(np.median(ms - slope * counts))), slope


@dataclass(frozen=True)
class RowCosts:
    """The LM-head rows a cycle's verdict reads, in ms. A chain (top_k = 1) has its N rows
    computed in one product at the first read (`inference.LazyLogits`): product_ms + row_ms ·
    N. A tree reads its accepted path's rows a product each: per_token_ms[top_k] (measured in
    that top_k's calibration run; product_ms + row_ms where none was) per token kept."""

    product_ms: float = 0.0
    row_ms: float = 0.0
    per_token_ms: dict = field(default_factory=dict)

    def per_cycle(self, top_k: int, total_tokens: int, tau: float) -> float:
        if top_k == 1:
            return self.product_ms + self.row_ms * total_tokens
        return self.per_token_ms.get(top_k, self.product_ms + self.row_ms) * tau


def predicted_cycle_ms(verify_ms: dict, loop_ms: float, draft_ms: dict, k: int, d: int, n: int,
                       tau: float, *, loop_ms_per_token: float = 0.0,
                       rows: RowCosts | None = None, loop_by_top_k: dict | None = None,
                       cycle_ms: dict | None = None) -> float:  # fmt: skip
    """The model's ms for one cycle of the tree (k, d, N) that emits tau tokens (`choose`'s
    arguments): the cycle timed whole where it was (cycle_ms[k, N]), else verify(N) + the
    loop (its top_k's own fit where given) + the LM-head rows + the drafting of the
    min(d, N - 2) levels the drafter runs."""
    if (k, n) in (cycle_ms or {}):
        return cycle_ms[k, n]
    read = 0.0 if rows is None else rows.per_cycle(k, n, tau)
    drafting = draft_ms.get((k, min(d, n - 2)), draft_ms[k, d])  # the levels it runs
    fixed_ms, per_token_ms = (loop_by_top_k or {}).get(k, (loop_ms, loop_ms_per_token))
    return verify_ms[n] + fixed_ms + per_token_ms * tau + read + drafting


def measured_cycle_ms(measured: dict, k: int, d: int, n: int) -> float:
    """`predicted_cycle_ms` of (k, d, N) from `measure_sizing`'s measurements, with its τ̂."""
    return predicted_cycle_ms(
        measured["verify_ms"], measured["loop_ms"], measured["draft_ms"], k, d, n,
        measured["tau"][k, d, n], loop_ms_per_token=measured["loop_ms_per_token"],
        rows=measured.get("rows"), loop_by_top_k=measured.get("loop_by_top_k"),
        cycle_ms=measured.get("cycle_ms"),
    )  # fmt: skip


def choose(verify_ms: dict, loop_ms: float, draft_ms: dict, tau: dict, *, step_ms: float,
           loop_ms_per_token: float = 0.0, rows: RowCosts | None = None,
           loop_by_top_k: dict | None = None, cycle_ms: dict | None = None, top_k=None,
           depth=None, total_tokens=None):  # fmt: skip
    """The (top_k, depth, total_tokens) of the highest predicted speedup τ̂ · step_ms /
    (verify_ms[N] + loop_ms + loop_ms_per_token · τ̂ + rows + draft_ms[k, d]). verify_ms
    {N: ms}; loop_ms, loop_ms_per_token: the loop's own work per cycle, fixed and per token
    kept (`fit_loop`), pooled over every top_k; loop_by_top_k {k: (fixed, per token)}: each
    top_k's own fit, used where given (a verdict at T > 0 reads every node of positive weight,
    many more in a 26-node tree than in a chain, so the pooled loop overcharged chains);
    rows: the LM-head rows' `RowCosts` (None: none); cycle_ms {(k, N): ms}: a tree's whole
    cycle timed as it decodes (the chain of one, (1, 2)), which replaces the sum of the parts;
    draft_ms {(k, d): ms}, charged at depth min(d, N - 2), the expansion levels the drafter
    runs for N - 1 drafts (a chain of one runs none: the root's children are its drafts),
    or at d where that depth has no cost given; tau {(k, d, N): τ̂}; step_ms: one vanilla step;
    fixed top_k / depth / total_tokens restrict the search. Returns (k, d, N, τ̂, speedup).
    With nothing fixed, drafting nothing (k = d = 0, N = 1: vanilla decoding, speedup 1) is a
    candidate too, chosen when no tree is predicted to pay: sized automatically, a drafter is
    never expected to be slower than vanilla."""
    free = top_k is None and depth is None and total_tokens is None
    best = (0, 0, 1, 1.0, 1.0) if free else None
    for (k, d, n), t in tau.items():
        if any(want is not None and want != got
               for want, got in ((top_k, k), (depth, d), (total_tokens, n))):  # fmt: skip
            continue
        cycle = predicted_cycle_ms(
            verify_ms, loop_ms, draft_ms, k, d, n, t, loop_ms_per_token=loop_ms_per_token,
            rows=rows, loop_by_top_k=loop_by_top_k, cycle_ms=cycle_ms,
        )  # fmt: skip
        speed = t * step_ms / cycle
        if best is None or speed > best[-1] + 1e-12:
            best = (k, d, n, t, speed)
    if best is None:
        raise InvalidInputError(
            f"no candidate size matches top_k={top_k}, depth={depth}, total_tokens="
            f"{total_tokens}; let auto sizing choose them (pass none of them)"
        )
    return best


def measure_sizing(
    target,
    config,
    head,
    head_cfg,
    vocab,
    prompts,
    sampling: SamplingParams,
    *,
    candidate_top_k=CANDIDATE_TOP_K,
    max_depth: int = MAX_DEPTH,
    sizes=TOTAL_TOKENS,
    new_tokens: int = 48,
    progress: bool = False,
    sampled_tree: bool = False,
    calibration=None,
    budget_s: float | None = None,
    costs: tuple | None = None,
    chain_drafter=None,
) -> dict:
    """Every measurement the choice needs, as plain JSON-ready data: verify ms by N (measured
    at VERIFY_SIZES, interpolated between), the loop overhead, draft ms by (k, d), and τ̂ by
    (k, d, N) from one calibration run per top_k. budget_s: stop the calibration runs when
    about that many seconds have passed (each keeps MIN_CYCLES cycles, the chain's
    MIN_CHAIN_CYCLES); None: decode every
    prompt to new_tokens. progress: announce the measuring on stderr at once (one line), then
    a progress bar in seconds of the budget where stderr is a terminal. calibration: the map
    the drafter ranks by (a `Calibration` for this setting, or None). costs: (verify_ms,
    step_ms) measured already for this target and setting (another tree's sizing), reused.
    chain_drafter: for candidate_top_k (1,), a maker of the drafter that will draft the chain
    (`chain_drafter(D)`: EAGLE-1's chain of D drafts), whose cycles are timed for the draft and
    loop costs instead of the calibration drafter's (which still gives τ̂: its top_k = 1 tree
    is the same chain, sampled at T > 0 as EAGLE-1 samples it)."""
    if chain_drafter is not None and tuple(candidate_top_k) != (1,):
        raise InvalidInputError(
            f"chain_drafter times a chain, but candidate_top_k={tuple(candidate_top_k)}; "
            "pass candidate_top_k=(1,)"
        )
    clock = _Clock(budget_s, progress, steps=2 + len(candidate_top_k))
    target = inference.prepare(target, config)
    sizes = sorted({1, *sizes})
    if costs is None:
        # with the calibration trees' own sizes, so that the curve is scaled to their
        # forwards where it was measured, not interpolated (SmolLM2's 26 rows cost 9 % more
        # than between 16 and 32)
        calibrated = {CALIBRATION_NODES, max_depth + 1}
        measured_sizes = sorted({n for n in (*VERIFY_SIZES, *calibrated) if n < sizes[-1]}
                                | {sizes[-1]})  # fmt: skip
        verify = lower_envelope(
            measure_verify_ms(target, config, prompts[0][1], measured_sizes, repeats=3,
                              lazy_logits=True)  # fmt: skip
        )
        verify_ms = {n: verify.get(n, _interpolate(verify, n)) for n in sizes}
        step_ms = None  # timed between the calibration runs' decodings, below
        clock.step()
        clock.step()
    else:
        verify_ms, step_ms = dict(costs[0]), costs[1]
        clock.step()
        clock.step()
    runs = {}
    for i, k in enumerate(candidate_top_k):
        runs[k] = calibration_run(target, config, head, head_cfg, vocab, prompts, sampling, k,
                                  depth=max_depth, new_tokens=new_tokens,
                                  sampled_tree=sampled_tree, calibration=calibration,
                                  deadline=clock.deadline(len(candidate_top_k) - i),
                                  on_cycle=clock.tick, time_vanilla=step_ms is None)  # fmt: skip
        clock.step()
    clock.close()
    # The loop's own work per cycle (the verdict, cache surgery, the drafter's accept), timed
    # in every cycle of the calibration runs (or of the chain's own drafter) as the cycle's
    # wall time less its propose and its target forward; the median over the cycles.
    timed = [ms for run in runs.values() for ms in run.loops]
    forwards = [cycle for run in runs.values() for cycle in run.forwards]
    vanilla = [ms for run in runs.values() for ms in run.vanilla_ms]
    products = [product for run in runs.values() for product in run.products]
    per_token = {  # a tree's rows: one product per node on the accepted path
        k: sum(ms for ms, _ in run.rows) / sum(kept for _, kept in run.rows)
        for k, run in runs.items() if k != 1 and run.rows
    }  # fmt: skip
    draft_ms, tau, chain_ms, chain_walls = {}, {}, {}, {}
    if chain_drafter is not None:  # the chain's own drafter, at its shortest and longest
        timed = []  # its loop too: EAGLE-1's accept does less than the dynamic tree's
        for drafts in (2, max_depth + 1):
            proposes, loops, chain_forwards, chain_vanilla, chain_products, walls = (
                _timed_cycles(target, config, prompts, sampling,
                              lambda drafts=drafts: chain_drafter(drafts), cycles=16,
                              prompts_used=4, with_vanilla=step_ms is None)
            )  # fmt: skip
            chain_ms[drafts], chain_walls[drafts] = statistics.median(proposes), walls
            timed += loops
            forwards += chain_forwards
            vanilla += chain_vanilla
            products += chain_products
    cycle_ms = {}
    for drafts in WHOLE_CHAINS if 1 in candidate_top_k else ():
        # The short chains, the trees that pay where a forward's cost grows with N (a CPU),
        # timed whole: their short cycles are where the model's parts, timed in the deep
        # calibration trees, err most (docs/speed.md)
        n = drafts + 1
        if n not in sizes or drafts > max_depth + 1:
            continue
        make = (lambda d=drafts: chain_drafter(d)) if chain_drafter is not None else tree_drafter(
            target, config, head, head_cfg, vocab, 1, max(1, n - 2), sampled_tree, calibration,
            total_tokens=n)  # fmt: skip
        walls = chain_walls.get(drafts) or _timed_cycles(  # timed above already, or now
            target, config, prompts, sampling, make, cycles=12, prompts_used=3,
            with_vanilla=False)[5]  # fmt: skip
        if walls:
            cycle_ms[1, n] = statistics.median(walls)
    loop_ms, row_ms = fit_loop(timed)
    loop_by_top_k = {k: fit_loop(run.loops) for k, run in runs.items() if run.loops}
    if chain_drafter is not None and timed:  # the chain's own cycles
        loop_by_top_k = {1: fit_loop(timed)}
    rows = RowCosts(*fit_rows(products), per_token)
    if step_ms is None:  # one vanilla step, timed after every calibration prompt
        step_ms = statistics.median(vanilla)
    # The cost curve's shape, scaled to the forwards the loop ran: the curve times forwards
    # back to back after one short context, the loop's run between the drafter's work at
    # every context length of the runs (both with lazy logits: the rows are in the loop).
    if forwards and costs is None:
        scale = statistics.median(ms / _interpolate(verify_ms, n) for ms, n in forwards)
        verify_ms = {n: ms * scale for n, ms in verify_ms.items()}
    for k, run in runs.items():
        pools, on_path, deepest_ms = run.pools, run.on_path, run.propose_ms
        # One map per top_k: how a node's value maps to its chance of being on the accepted
        # path depends on its siblings' ranks (a head's top-1 token is accepted more often
        # than its q says, a lower-ranked one less), so each tree shape keeps its own.
        # Drafting cost: timed at depth 1 and (in the calibration run) at the deepest depth,
        # straight in between (each level one head forward of k nodes), and one level less
        # than depth 1 for depth 0: the root's children alone, all a tree of N <= 2 drafts
        # (a chain of one) runs (`choose`).
        if chain_ms:
            shallow_ms, deepest_ms = chain_ms[2], chain_ms[max_depth + 1]
        else:
            make = tree_drafter(target, config, head, head_cfg, vocab, k, 1, sampled_tree,
                                calibration)  # fmt: skip
            shallow_ms = _propose_ms(target, config, prompts, sampling, make)
        for d in range(1, max_depth + 1):
            share = (d - 1) / max(1, max_depth - 1)
            draft_ms[k, d] = shallow_ms + share * (deepest_ms - shallow_ms)
        level_ms = (deepest_ms - shallow_ms) / (max_depth - 1) if max_depth > 1 else 0.0
        draft_ms[k, 0] = max(0.0, shallow_ms - max(0.0, level_ms))
        for _, d, n in _tau_keys((k,), max_depth, sizes):
            accepted = [expected_accepted(pool, on_path, d, n - 1) for pool in pools]
            tau[k, d, n] = 1.0 + float(np.mean(accepted))
    return {
        "verify_ms": verify_ms,
        "step_ms": step_ms,
        "loop_ms": loop_ms,
        "loop_ms_per_token": row_ms,
        "loop_by_top_k": loop_by_top_k,
        "rows": rows,
        "cycle_ms": cycle_ms,
        "draft_ms": draft_ms,
        "tau": tau,
        "calibration_records": sum(run.on_path.records for run in runs.values()),
        "cycles": {k: len(run.pools) for k, run in runs.items()},
    }


def _interpolate(verify_ms: dict, n: int) -> float:
    """verify(n) between the measured sizes (linear), or at the largest beyond them."""
    sizes = sorted(verify_ms)
    return float(np.interp(n, sizes, [verify_ms[m] for m in sizes]))


def sizing_from(measured: dict, setting: str, **fixed) -> Sizing:
    """The `Sizing` the measurements pick (fixed: top_k / depth / total_tokens the user set)."""
    verify_ms, loop_ms, step_ms = measured["verify_ms"], measured["loop_ms"], measured["step_ms"]
    row_ms, rows = measured["loop_ms_per_token"], measured.get("rows")
    by_k, whole = measured.get("loop_by_top_k"), measured.get("cycle_ms")
    k, d, n, t, speed = choose(verify_ms, loop_ms, measured["draft_ms"], measured["tau"],
                               step_ms=step_ms, loop_ms_per_token=row_ms, rows=rows,
                               loop_by_top_k=by_k, cycle_ms=whole, **fixed)  # fmt: skip
    # EAGLE-1's chain of D drafts is the top_k = 1 tree of N = D + 1 nodes (at any depth, for
    # k = 1 its pool is one chain, whose N - 1 best are its first N - 1: the chain of one too)
    chain_tau = {key: v for key, v in measured["tau"].items() if key[0] == 1}
    ck, _, cn, ct, cs = choose(verify_ms, loop_ms, measured["draft_ms"], chain_tau,
                               step_ms=step_ms, loop_ms_per_token=row_ms, rows=rows,
                               loop_by_top_k=by_k, cycle_ms=whole)  # fmt: skip
    costs = {
        "verify_ms": {str(n): v for n, v in verify_ms.items()},
        "step_ms": step_ms,
        "loop_ms": loop_ms,
        "loop_ms_per_token": row_ms,
        "loop_by_top_k": {str(k): list(v) for k, v in (by_k or {}).items()},
        "cycle_ms": {f"{k},{n}": v for (k, n), v in (whole or {}).items()},
        "rows": _rows_to_json(rows or RowCosts()),
        "draft_ms": {f"{k},{d}": v for (k, d), v in measured["draft_ms"].items()},
    }
    chain = cn - 1 if ck else 0  # 0: no chain pays, draft nothing
    return Sizing(d, k, n, chain, t, speed, ct, cs, setting, costs,
                  cycles=dict(measured.get("cycles") or {}))  # fmt: skip


# ---------------------------------------------------------------------------- the cache


def cache_dir() -> Path:
    """Where measured sizes are kept: `sizing/` in the cache (`minieagle.cache.cache_root`)."""
    return cache_root() / "sizing"


def _cache_file(key: str) -> Path | None:
    """The cache file for `key`, or None (with a warning) when there is no cache directory:
    the cache is optional, the sizes are then measured for this run only."""
    try:
        return cache_dir() / f"{key}.json"
    except InvalidInputError as error:
        warnings.warn(f"{error}; measured sizes are not kept", stacklevel=3)
        return None


def _read_cache(path: Path, setting: str, expected: dict, calibration: str) -> dict | None:
    """The measurements cached at `path`, validated (`_measured_from_json`), or None when there
    are none; an unreadable or invalid file is reported with a warning (it is measured again
    and overwritten)."""
    try:
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return _measured_from_json(data, setting, expected, calibration)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
        warnings.warn(
            f"the sizing cache file {path} is not valid ({error}); measuring this machine "
            "again, then replacing it",
            stacklevel=3,
        )
        return None


def _write_cache(path: Path, data: dict) -> None:
    """Write `data` to `path` atomically; a cache that cannot be written (read-only, a file
    where its directory should be, a full disk) is reported with a warning, never raised."""
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        partial.replace(path)
    except OSError as error:
        warnings.warn(
            f"cannot write the sizing cache {path} ({error.strerror or error}); the sizes "
            "measured now serve this run only (point MINIEAGLE_CACHE at a writable directory "
            "to keep them)",
            stacklevel=3,
        )
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def machine_key(like) -> str:
    """What the measured costs depend on besides the model: the processor, the array module
    of `like` (a target weight) and its device, NumPy's version and the BLAS thread setting."""
    from minieagle.backend import array_module

    xp = array_module(like)
    parts = [
        platform.machine(),
        platform.processor() or _cpu_name(),
        xp.__name__,
        np.__version__,
        os.environ.get("OPENBLAS_NUM_THREADS", ""),
        str(os.cpu_count()),
    ]
    if xp.__name__ == "cupy":
        parts.append(xp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    return "|".join(parts)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown-cpu"


def check_fixed_sizes(*, top_k=None, depth=None, total_tokens=None) -> None:
    """Refuse, before anything is measured, sizes fixed by the user that no candidate of the
    search can use: a top_k above the drafts of the largest tree considered (`TOTAL_TOKENS`,
    or the fixed total_tokens), a depth beyond the deepest such a tree reaches (a tree of N
    nodes is at most N - 1 drafts deep: depth + 1 <= N - 1). The depth bound also bounds the
    measuring, whose calibration runs draft at the deepest depth considered."""
    largest = total_tokens or max(TOTAL_TOKENS)
    if top_k is not None and top_k > largest - 1:
        raise InvalidInputError(
            f"top_k={top_k} exceeds total_tokens - 1 = {largest - 1}, the largest tree auto "
            "sizing considers; pass a smaller top_k or a fixed total_tokens"
        )
    if depth is not None and depth > largest - 2:
        raise InvalidInputError(
            f"depth={depth} exceeds {largest - 2}, the deepest expansion a tree of "
            f"total_tokens={largest} (the largest auto sizing considers) can use; pass depth "
            f"<= {largest - 2} or a fixed total_tokens"
        )


def auto_size(target, config, head, head_cfg, vocab, sampling: SamplingParams, prompts, *,
              identity: str, progress: bool = True, sampled_tree: bool | None = False,
              calibration=None, chain_only: bool = False,
              budget_s: float | None = SIZING_SECONDS, **fixed) -> Sizing:  # fmt: skip
    """The `Sizing` for this machine, target + head (`identity`: e.g. their fingerprints) and
    sampling setting, from the cache or measured now (and cached, written atomically).
    prompts: (kind, ids) calibration prompts, never the ones a benchmark reports on.
    sampled_tree: size the drafter that uses that option (True) or not (False); None at T > 0:
    size both trees, sharing the budget and the measured verify costs, and keep the one of
    higher expected speedup (`Sizing.sampled_tree`, the other in `Sizing.alternative`).
    calibration: the drafter's scores, a `Calibration` or a head's maps (`for_setting`); each
    tree is measured ranking by its setting's map. chain_only: measure top_k = 1 only, for an
    EAGLE-1 chain (with sampled_tree at T > 0: EAGLE-1 draws its chain's tokens)."""
    check_fixed_sizes(**fixed)
    target = inference.prepare(target, config)
    if sampled_tree is None:
        trees = (False,) if sampling.greedy or chain_only else (False, True)
    else:
        trees = (bool(sampled_tree) and not sampling.greedy,)
    candidates = tuple(sorted({*CANDIDATE_TOP_K, fixed.get("top_k") or CANDIDATE_TOP_K[0]}))
    if chain_only:
        candidates = (1,)
    max_depth = max(MAX_DEPTH, fixed.get("depth") or 0)  # a user's deeper depth is measured too
    expected = _expected_keys(candidates, max_depth, TOTAL_TOKENS)
    start, costs, options = time.perf_counter(), None, []
    chain_drafter = None
    if chain_only:  # EAGLE-1's own chain drafter is timed (its drafting costs less)
        from minieagle.drafters.eagle1 import Eagle1Drafter

        def chain_drafter(drafts: int):
            return Eagle1Drafter(target, config, head, head_cfg, choices=f"chain:{drafts}")

    for i, tree in enumerate(trees):
        setting = setting_name(sampling, sampled_tree=tree)
        scores = _map_for(calibration, setting)
        scored = calibration_id(scores)
        key = hashlib.sha256(
            f"{SIZING_VERSION}|{__version__}|{machine_key(target.embed)}|{identity}|{setting}|"
            f"{scored}|{candidates}|{max_depth}".encode()
        ).hexdigest()[:20]
        path = _cache_file(key)
        measured = None if path is None else _read_cache(path, setting, expected, scored)
        if measured is None:
            share = None
            if budget_s is not None:  # what is left of the budget, shared by the trees left,
                # and never less than an equal share: the first tree's runs can overrun theirs
                # (each keeps its least cycles), which once left the second 4 cycles a top_k
                left = max(0.0, budget_s - (time.perf_counter() - start)) / (len(trees) - i)
                share = max(left, budget_s / len(trees))
            measured = measure_sizing(target, config, head, head_cfg, vocab, prompts, sampling,
                                      candidate_top_k=candidates, max_depth=max_depth,
                                      progress=progress, sampled_tree=tree,
                                      calibration=scores, budget_s=share, costs=costs,
                                      chain_drafter=chain_drafter)  # fmt: skip
            if path is not None:
                _write_cache(path, _measured_to_json(measured, setting, scored))
        costs = (measured["verify_ms"], measured["step_ms"])
        sized = sizing_from(measured, setting, **fixed)
        sized.sampled_tree, sized.calibrated = tree, scores is not None
        options.append(sized)
    best = _faster(options)
    for other in options:
        if other is not best:
            best.alternative = {
                "sampled_tree": other.sampled_tree,
                "setting": other.setting,
                "depth": other.depth,
                "top_k": other.top_k,
                "total_tokens": other.total_tokens,
                "expected_tau": other.expected_tau,
                "expected_speedup": other.expected_speedup,
                "describe": f"depth {other.depth}, top_k {other.top_k}, total_tokens "
                f"{other.total_tokens} (expected tau {other.expected_tau:.2f}"
                f"{other._over(other.top_k) if other.total_tokens > 1 else ''}, speedup "
                f"{other.expected_speedup:.2f}x)",
            }
    return best


def _faster(options: list[Sizing]) -> Sizing:
    """The option of highest expected speedup (the first on a tie: the top-k tree)."""
    return max(options, key=lambda option: option.expected_speedup)


def _map_for(calibration, setting: str):
    """The `Calibration` a drafter ranks by under `setting`: a head's maps give theirs (None
    where unused), a single map applies to its own setting only."""
    if calibration is None:
        return None
    if callable(getattr(calibration, "for_setting", None)):
        return calibration.for_setting(setting)
    return calibration if calibration.setting == setting else None


def calibration_id(calibration) -> str:
    """A short digest of a map's knots and setting ("none" for raw scores): sizes measured
    with one map are never read for another."""
    if calibration is None:
        return "none"
    if isinstance(calibration, TemperatureScores):  # its one parameter
        knots = np.float64(calibration.temperature).tobytes()
    else:
        knots = np.concatenate([calibration.confidence, calibration.acceptance]).tobytes()
    return hashlib.sha256(calibration.setting.encode() + knots).hexdigest()[:16]


def make_sizer(target, config, head, tokenizer, *, identity: str, chain_only: bool = False,
               sampled_tree: bool | None = None, calibration=None, progress: bool = True,
               **fixed):  # fmt: skip
    """A sizer for a drafter (`Eagle2Drafter(sizer=)`, `Eagle1Drafter(choices="auto")`):
    sampling -> `Sizing`, from `auto_size` once per sampling setting (memoised; measured once
    per machine, then cached). head: (params, config[, vocab]); tokenizer: the target's, for
    the calibration prompts (SIZING_PROMPTS prose and as many code windows of the corpora's
    train split, taken in turn, as chat requests for a target with a chat template:
    `calibration.tuning_prompts`);
    identity: the target's and head's fingerprints. chain_only: EAGLE-1's chain (its sampled
    chain at T > 0). sampled_tree, calibration: the drafter's options (`build_drafter`'s
    `tree_options`); fixed: the sizes the user set (depth, top_k), constraining the search."""
    from minieagle.calibration import tuning_prompts, tuning_template

    check_fixed_sizes(**fixed)
    if tuning_template(tokenizer) is not None:  # sized on chat requests: cached apart
        identity = f"{identity}|chat"
    params, cfg, vocab = (*head, None)[:3]
    chosen = {}

    def size(sampling: SamplingParams) -> Sizing:
        setting = setting_name(sampling)
        if setting not in chosen:
            prompts = tuning_prompts(tokenizer, "train", SIZING_PROMPTS, seeds=(0, 0))
            half = len(prompts) // 2  # prose and code taken in turn: a budget cut keeps both
            prompts = [p for pair in zip(prompts[:half], prompts[half:], strict=True) for p in pair]
            chosen[setting] = auto_size(
                target, config, params, cfg, vocab, sampling, prompts, identity=identity,
                progress=progress, chain_only=chain_only,
                sampled_tree=True if chain_only else sampled_tree,
                calibration=None if chain_only else calibration, **fixed,
            )  # fmt: skip
        return chosen[setting]

    return size


def _rows_to_json(rows: RowCosts) -> dict:
    return {"product_ms": rows.product_ms, "row_ms": rows.row_ms,
            "per_token_ms": {str(k): v for k, v in rows.per_token_ms.items()}}  # fmt: skip


def _rows_from_json(data) -> RowCosts:
    if not isinstance(data, dict) or set(data) != {"product_ms", "row_ms", "per_token_ms"}:
        raise ValueError(f"rows={data!r} is not product_ms, row_ms and per_token_ms")
    return RowCosts(
        _ms(data["product_ms"], "rows.product_ms", least=0.0),
        _ms(data["row_ms"], "rows.row_ms", least=0.0),
        {int(k): _ms(v, f"rows.per_token_ms[{k}]", least=0.0)
         for k, v in dict(data["per_token_ms"]).items()},
    )  # fmt: skip


def _loops_from_json(data) -> dict:
    if not isinstance(data, dict):
        raise ValueError(f"loop_by_top_k={data!r} is not a dict of top_k: [fixed, per token]")
    loops = {}
    for k, value in data.items():
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"loop_by_top_k[{k}]={value!r} is not [fixed ms, ms per token]")
        loops[int(k)] = tuple(_ms(v, f"loop_by_top_k[{k}]", least=0.0) for v in value)
    return loops


def _measured_to_json(measured: dict, setting: str, calibration: str = "none") -> dict:
    return {
        "version": SIZING_VERSION,
        "setting": setting,
        "calibration": calibration,
        "verify_ms": {str(n): v for n, v in measured["verify_ms"].items()},
        "step_ms": measured["step_ms"],
        "loop_ms": measured["loop_ms"],
        "loop_ms_per_token": measured["loop_ms_per_token"],
        "loop_by_top_k": {str(k): list(v) for k, v in measured["loop_by_top_k"].items()},
        "cycle_ms": {f"{k},{n}": v for (k, n), v in measured["cycle_ms"].items()},
        "rows": _rows_to_json(measured["rows"]),
        "draft_ms": {f"{k},{d}": v for (k, d), v in measured["draft_ms"].items()},
        "tau": {f"{k},{d},{n}": v for (k, d, n), v in measured["tau"].items()},
        "calibration_records": measured["calibration_records"],
        "cycles": {str(k): v for k, v in measured["cycles"].items()},
    }


MAX_MS = 60_000.0  # a cached time above a minute per forward or cycle is no measurement


def _expected_keys(candidate_top_k, max_depth: int, sizes) -> dict:
    """The keys a complete measurement holds: verify_ms by N, draft_ms by (k, d), tau by
    (k, d, N) (`_tau_keys`), cycles by k."""
    sizes = sorted({1, *sizes})
    depths = range(1, max_depth + 1)
    return {
        "verify_ms": set(sizes),
        "draft_ms": {(k, d) for k in candidate_top_k for d in (0, *depths)},
        "tau": set(_tau_keys(candidate_top_k, max_depth, sizes)),
        "cycles": set(candidate_top_k),
    }


def _tau_keys(candidate_top_k, max_depth: int, sizes) -> list[tuple[int, int, int]]:
    """The (k, d, N) whose τ̂ the measurements predict: a tree of N >= 2 nodes holding the k
    root children (k <= N - 1) within the pool of d expansion levels (N - 1 <= k + d k^2)."""
    return [
        (k, d, n)
        for k in candidate_top_k
        for d in range(1, max_depth + 1)
        for n in sorted(sizes)
        if n >= 2 and k <= n - 1 and n - 1 <= k + d * k * k
    ]


def _measured_from_json(data: dict, setting: str, expected: dict, calibration: str = "none"
                        ) -> dict:  # fmt: skip
    """The measurements of a cache file's JSON, or ValueError naming what is wrong: another
    version, setting or calibration (`calibration_id`), a missing or extra key, a time that
    is not a positive finite number of ms below MAX_MS (verify(N) at least half of verify(1):
    no forward is cheaper), a τ̂ outside [1, N]."""
    if not isinstance(data, dict):
        raise ValueError(f"the file holds a {type(data).__name__}, not a measurement")
    if data.get("version") != SIZING_VERSION:
        raise ValueError(f"version {data.get('version')!r}, not {SIZING_VERSION}")
    if data.get("setting") != setting:
        raise ValueError(f"setting {data.get('setting')!r}, not {setting!r}")
    if data.get("calibration") != calibration:
        raise ValueError(f"calibration {data.get('calibration')!r}, not {calibration!r}")
    fields = {"version", "setting", "calibration", "verify_ms", "step_ms", "loop_ms",
              "loop_ms_per_token", "loop_by_top_k", "cycle_ms", "rows", "draft_ms", "tau",
              "calibration_records", "cycles"}  # fmt: skip
    if set(data) != fields:
        raise ValueError(f"keys {sorted(data)}, expected {sorted(fields)}")

    def ints(key: str) -> tuple:
        return tuple(int(x) for x in key.split(","))

    measured = {
        "verify_ms": {int(n): _ms(v, f"verify_ms[{n}]") for n, v in data["verify_ms"].items()},
        "step_ms": _ms(data["step_ms"], "step_ms"),
        "loop_ms": _ms(data["loop_ms"], "loop_ms", least=0.0),
        "loop_ms_per_token": _ms(data["loop_ms_per_token"], "loop_ms_per_token", least=0.0),
        "loop_by_top_k": _loops_from_json(data["loop_by_top_k"]),
        "cycle_ms": {
            ints(key): _ms(v, f"cycle_ms[{key}]") for key, v in dict(data["cycle_ms"]).items()
        },
        "rows": _rows_from_json(data["rows"]),
        "draft_ms": {
            ints(key): _ms(v, f"draft_ms[{key}]", least=0.0) for key, v in data["draft_ms"].items()
        },
        "tau": {ints(key): float(v) for key, v in data["tau"].items()},
        "calibration_records": _count(data["calibration_records"], "calibration_records"),
        "cycles": {int(k): _count(v, f"cycles[{k}]") for k, v in data["cycles"].items()},
    }
    for name, keys in expected.items():
        got = set(measured[name])
        if got != keys:
            missing, extra = sorted(keys - got), sorted(got - keys)
            raise ValueError(f"{name} lacks {missing[:3]} and has extra {extra[:3]}")
    one = measured["verify_ms"][1]
    for n, ms in measured["verify_ms"].items():
        if ms < one / 2:
            raise ValueError(f"verify_ms[{n}]={ms} is below half of verify_ms[1]={one}")
    for (k, d, n), tau in measured["tau"].items():
        if not 1.0 <= tau <= n:  # also refuses NaN
            raise ValueError(f"tau[{k},{d},{n}]={tau} is outside [1, {n}]")
    return measured


def _ms(value, name: str, least: float | None = None) -> float:
    """A cached time in ms: finite, in (0, MAX_MS] (or [least, MAX_MS])."""
    ms = float(value)
    low_ok = ms > 0 if least is None else ms >= least
    if not (low_ok and ms <= MAX_MS):  # also refuses NaN and inf
        raise ValueError(f"{name}={ms} is not a time in ms within (0, {MAX_MS:g}]")
    return ms


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}={value!r} is not a count")
    return value


class _Clock:
    """The measuring's time budget and its display: one line on stderr at once, then (where
    stderr is a terminal) a tqdm bar of the budget's seconds, or of the measuring steps when
    there is no budget."""

    def __init__(self, budget_s: float | None, progress: bool, steps: int):
        self.start, self.budget_s = time.perf_counter(), budget_s
        self.bar = None
        if not progress:
            return
        from tqdm import tqdm

        about = (f"about {budget_s:.0f} s, more on a large model (its least cycles run past "
                 "the budget)") if budget_s else "a few generations"  # fmt: skip
        print(
            f"[sizing the draft tree for this machine: measuring for {about}, once (the sizes "
            "are cached); fixed sizes skip it: --total-tokens N --depth D --tree-top-k K]",
            file=sys.stderr,
            flush=True,
        )
        total, unit = (round(budget_s), "s") if budget_s else (steps, "step")
        self.bar = tqdm(total=total, desc="sizing", unit=unit, disable=None, file=sys.stderr)

    def deadline(self, runs_left: int) -> float | None:
        """When the next of `runs_left` calibration runs should stop: an equal share of what
        is left of the budget (None: no budget)."""
        if self.budget_s is None:
            return None
        now = time.perf_counter()
        left = self.start + self.budget_s - now
        return now + max(0.0, left) / runs_left

    def tick(self) -> None:
        """Show the seconds spent (with a budget)."""
        if self.bar is not None and self.budget_s:
            spent = min(self.bar.total, int(time.perf_counter() - self.start))
            self.bar.update(spent - self.bar.n)

    def step(self) -> None:
        """One measuring step done."""
        if self.bar is not None and not self.budget_s:
            self.bar.update(1)
        self.tick()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def sizing_json(sizing: Sizing) -> dict:
    return asdict(sizing)
