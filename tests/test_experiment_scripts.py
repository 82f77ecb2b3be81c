"""The EAGLE-3 experiment scripts (benchmarks/eagle3_ablation.py, benchmarks/eagle3_scaling.py,
benchmarks/eagle3_scaling_corpus.py) run end to end in --smoke mode on the shipped target: they
write the JSON (and the plot) they promise, a second run reuses the trained heads instead of
training again (and the scaling scripts their benchmarks too), changed settings on the same --out
are refused, and --help shows the full-size command."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from minieagle.errors import InvalidInputError

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    """(the ablation module, the scaling module), imported from benchmarks/, and counters of
    the trainer's and the benchmark's calls made through them."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    ablation = importlib.import_module("eagle3_ablation")
    scaling = importlib.import_module("eagle3_scaling_corpus")
    calls = {"train": 0, "bench": 0}
    real_train, real_bench = ablation.train_eagle_head, ablation.compare_methods

    def train(*args, **kwargs):
        calls["train"] += 1
        return real_train(*args, **kwargs)

    def bench(*args, **kwargs):
        calls["bench"] += 1
        return real_bench(*args, **kwargs)

    monkeypatch.setattr(ablation, "train_eagle_head", train)
    monkeypatch.setattr(ablation, "compare_methods", bench)
    return ablation, scaling, calls


def _head_files(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in sorted(out.glob("*/final/model.safetensors"))}


def test_the_ablation_trains_three_heads_once_and_benches_them(scripts, tmp_path, capsys):
    ablation, _, calls = scripts
    argv = ["--smoke", "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "a.json")]
    with pytest.warns(UserWarning, match=r"aux_layers=\(12,\) is one target feature"):
        results = ablation.main(argv)  # the top-feature head cannot be served: it says so
    assert calls == {"train": 3, "bench": 2}  # one comparison per prompt set
    saved = json.loads((tmp_path / "a.json").read_text())
    assert saved == json.loads(json.dumps(results))
    assert set(saved) == {"config", "heads", "summary", "bench"}
    labels = ["eagle2", "eagle3-top", "eagle3"]
    assert list(saved["heads"]) == list(saved["summary"]) == labels
    assert [saved["heads"][k]["head"] for k in labels] == ["eagle1", "eagle3", "eagle3"]
    assert saved["heads"]["eagle3-top"]["aux_layers"] == [12]  # the 12-layer target's top
    assert saved["heads"]["eagle3"]["aux_layers"] is None  # the default fusion
    for label in labels:
        summary = saved["summary"][label]
        assert summary["train_seconds"] > 0
        for setting in ("T=0", "T=1"):
            for name in ("heldout", "ood"):
                assert summary["tau"][setting][name] >= 1
                assert len(summary["alpha"][setting][name]) == saved["config"]["depth"] + 1
    assert set(saved["bench"]) == {"heldout", "ood"}
    assert set(saved["bench"]["ood"]["T=0"]["all"]) == {"vanilla", *labels}
    assert "eagle3-top" in capsys.readouterr().out

    trained = _head_files(tmp_path / "runs")
    assert len(trained) == 3
    again = ablation.main(argv)
    assert calls["train"] == 3 and _head_files(tmp_path / "runs") == trained
    assert all(record["reused"] for record in again["heads"].values())
    with pytest.raises(InvalidInputError, match=r"eagle2 holds a head trained with .*lr=0\.01 "
                       r"\(now 0\.02\).* pass the same flags"):  # fmt: skip
        ablation.main([*argv, "--lr", "0.02"])


def test_the_scaling_script_trains_eight_heads_once_and_plots(scripts, tmp_path):
    _, scaling, calls = scripts
    out = tmp_path / "runs"
    argv = ["--smoke", "--out", str(out), "--json", str(tmp_path / "s.json")]
    argv += ["--plot", str(tmp_path / "plot" / "s.png")]
    scaling.main(argv)
    assert calls == {"train": 8, "bench": 8}  # 4 fractions x 2 heads; 4 fractions x 2 sets
    saved = json.loads((tmp_path / "s.json").read_text())
    assert set(saved) == {"config", "points", "plot"}
    assert (tmp_path / "plot" / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = saved["points"]
    assert [(p["head"], p["fraction"]) for p in points] == [
        (head, fraction) for fraction in (0.125, 0.25, 0.5, 1.0) for head in ("eagle1", "eagle3")
    ]
    for p in points:
        assert {"train_tokens", "tokens_seen", "steps", "train_seconds", "tau", "alpha"} <= set(p)
        assert p["tau"]["T=0"]["heldout"] >= 1 and p["tau"]["T=0"]["ood"] >= 1
        assert p["tokens_seen"] == p["steps"] * 2 * 16  # the smoke batch and window
    tokens = [p["train_tokens"] for p in points if p["head"] == "eagle3"]
    assert tokens == sorted(tokens) and tokens[-1] > 6 * tokens[0]  # the data grows ~8x
    steps = [p["steps"] for p in points if p["head"] == "eagle3"]
    assert steps == sorted(steps) and steps[-1] > steps[0]  # equal passes: steps grow with it

    trained = _head_files(out)
    assert len(trained) == 8
    scaling.main(argv)
    assert calls == {"train": 8, "bench": 8}  # nothing trained or benched again
    assert _head_files(out) == trained

    # the LM-head-init experiment retrains one EAGLE-3 point of that run and benches it
    lm_head_init = importlib.import_module("eagle3_lm_head_init")
    argv = ["--scaling", str(tmp_path / "s.json"), "--points", "1/8"]
    lm_head_init.main(
        [*argv, "--out", str(tmp_path / "lminit"), "--json", str(tmp_path / "l.json")]
    )
    assert calls == {"train": 9, "bench": 10}
    point = json.loads((tmp_path / "l.json").read_text())["points"]["1/8"]
    assert set(point) == {"heldout", "ood"}
    assert set(point["heldout"]["T=0"]) == {"eagle1", "random", "target"}
    recorded = json.loads(
        (tmp_path / "lminit" / "eagle3-data1of8" / "eagle_train_config.json").read_text()
    )
    assert recorded["lm_head_init"] == "target" and recorded["head"] == "eagle3"


def test_the_scaling_script_branches_each_point_off_one_run_and_plots(scripts, tmp_path):
    """benchmarks/eagle3_scaling.py on recorded features: the largest point's run pauses at
    each smaller point's decay, which branches off and decays; every point is benched as it
    finishes, a second run reuses everything."""
    from minieagle.distill import DistillConfig, run_distill

    ablation, _, calls = scripts
    scaling = importlib.import_module("eagle3_scaling")
    trained_calls = {"train": 0}
    real_train = scaling.train_eagle_head

    def train(*args, **kwargs):
        trained_calls["train"] += 1
        return real_train(*args, **kwargs)

    scaling.train_eagle_head = train
    try:
        features = []
        for name, source in (("corpus", "corpus-windows"), ("self", "corpus")):
            run_distill(DistillConfig(
                target=str(BENCHMARKS.parent / "minieagle" / "pretrained" / "small"),
                out_dir=str(tmp_path / name), source=source, shards=2, shard_windows=32,
                window_tokens=17, prompt_tokens=4, keys=(2, 6, 9, "final"),
                max_train_chars=16_000,
            ), progress=False)  # fmt: skip
            features.append(str(tmp_path / name))
        argv = ["--smoke", "--features", *features, "--out", str(tmp_path / "runs")]
        argv += ["--json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png")]
        scaling.main(argv)
        # per head: 3 pauses of the 8x run + 3 branches + the 8x run's end
        assert trained_calls["train"] == 14 and calls["bench"] == 16
        saved = json.loads((tmp_path / "s.json").read_text())
        assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        points = saved["points"]
        assert [(p["head"], p["point"]) for p in points] == [
            (head, point) for head in ("eagle1", "eagle3") for point in (1, 2, 4, 8)
        ]
        for p in points:
            assert p["tau"]["T=0"]["heldout"] >= 1 and p["tau"]["T=0"]["ood"] >= 1
            assert p["tokens"] == p["steps"] * 2 * 17  # the smoke batch and window
            kinds = p["tau_by_kind"]["T=0"]
            assert "heldout/prose" in kinds and "ood/ood-prose" in kinds  # the smoke's prompts
        steps = [p["steps"] for p in points if p["head"] == "eagle3"]
        assert steps == [4, 8, 15, 30]  # one pass over 1, 2, 4, 8 x 128 tokens
        heads = _head_files(tmp_path / "runs")
        assert len(heads) == 8
        written = (tmp_path / "s.json").read_bytes()
        scaling.main(argv)  # everything reused: nothing trained or benched again
        assert trained_calls["train"] == 14 and calls["bench"] == 16
        assert _head_files(tmp_path / "runs") == heads
        assert (tmp_path / "s.json").read_bytes() == written  # the records stand as written
        # --passes 2: each point its own run, over the same data as the one-pass point, twice
        passes = [*argv, "--passes", "2", "--points", "1,2", "--heads", "eagle3"]
        passes += ["--json", str(tmp_path / "p.json"), "--plot", str(tmp_path / "p.png")]
        scaling.main(passes)
        assert trained_calls["train"] == 16 and calls["bench"] == 20
        twice = json.loads((tmp_path / "p.json").read_text())["points"]
        assert [(p["point"], p["passes"], p["steps"]) for p in twice] == [(1, 2, 8), (2, 2, 16)]
        assert [p["tokens"] for p in twice] == [4 * 2 * 17, 8 * 2 * 17]  # one pass's data
        for p in twice:
            config = json.loads((Path(p["run_dir"]) / "eagle_train_config.json").read_text())
            one_pass = json.loads(
                (
                    tmp_path / "runs" / f"eagle3-{p['point']}x" / "eagle_train_config.json"
                ).read_text()
            )  # the one-pass point's run reads the same blocks
            assert Path(p["run_dir"]).name == f"eagle3-{p['point']}x-2p"
            assert config["features"] == one_pass["features"]
        with pytest.raises(InvalidInputError, match="--passes 0"):
            scaling.main([*passes[:-4], "--passes", "0"])
        # on a new machine the long runs come back from a snapshot (their own state only):
        # the measured smaller points are skipped, not branched from states that are gone
        import shutil

        for head in ("eagle1", "eagle3"):
            for point in (1, 2, 4):
                shutil.rmtree(tmp_path / "runs" / f"{head}-{point}x")
            shutil.rmtree(tmp_path / "runs" / f"{head}-8x" / "kept")
        scaling.main(argv)
        assert trained_calls["train"] == 16 and calls["bench"] == 20
        assert len(json.loads((tmp_path / "s.json").read_text())["points"]) == 8
        # --head-intermediate-size: the same point with a wider EAGLE-3 head, in its own runs
        wide = [*argv[:3], "--out", str(tmp_path / "wide"), "--json", str(tmp_path / "w.json"),
                "--plot", str(tmp_path / "w.png"), "--points", "1", "--heads", "eagle3",
                "--head-intermediate-size", "96"]  # fmt: skip
        scaling.main(wide)
        (point,) = json.loads((tmp_path / "w.json").read_text())["points"]
        head = json.loads((Path(point["export_dir"]) / "config.json").read_text())
        target = BENCHMARKS.parent / "minieagle" / "pretrained" / "small" / "config.json"
        assert head["intermediate_size"] == 96
        assert json.loads(target.read_text())["intermediate_size"] != 96
        assert point["head_intermediate_size"] == 96
        both = ["--plot-only", "--json", str(tmp_path / "w.json"), "--with",
                str(tmp_path / "s.json"), "--plot", str(tmp_path / "both.png")]  # fmt: skip
        scaling.main(both)
        assert (tmp_path / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        scaling.train_eagle_head = real_train


@pytest.mark.parametrize(
    ("module", "command"),
    [
        ("eagle3_ablation", "python benchmarks/eagle3_ablation.py --out runs/eagle3-ablation"),
        (
            "eagle3_scaling_corpus",
            "python benchmarks/eagle3_scaling_corpus.py --out runs/eagle3-scaling",
        ),
        ("eagle3_scaling", "python benchmarks/eagle3_scaling.py --model $R/targets/small"),
    ],
)
def test_help_shows_the_full_size_command(scripts, capsys, module, command):
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module).main(["--help"])
    assert exit_info.value.code == 0
    assert f"OPENBLAS_NUM_THREADS=1 {command}" in capsys.readouterr().out


def test_the_heads_at_scale_script_is_valid_bash_and_every_command_parses(scripts, capsys):
    """benchmarks/heads_at_scale.sh starts the long runs of issue 20 in the background, where a
    renamed flag would fail unseen: every `minieagle ...` and `python benchmarks/...` command in
    it must parse."""
    import re
    import shlex
    import subprocess

    from minieagle.cli import build_parser

    script = BENCHMARKS / "heads_at_scale.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    raw = script.read_text()
    # the shell functions that write a run's commands: their text as each call writes it
    functions = re.findall(r"^[a-z_]+\(\) \{\n.*?^\}\n", raw, flags=re.M | re.S)
    assert len(functions) >= 2
    # the calls that build the queue, outside the functions (a writer's own calls of another
    # writer run with its arguments, as its callers call it)
    outside = raw
    for function in functions:
        outside = outside.replace(function, "")
    code = "".join(line for line in outside.splitlines(keepends=True)
                   if not line.lstrip().startswith("#"))  # fmt: skip
    writers = ("heldout_answers|chat_answers|head_from_shipped|head_decayed_longer|"
               "train_chat_head|measure_chat_head|cli_candidates|chat_tau|request_answers|"
               "heldout_requests|passage_answers|calibrate_head|head_round")  # fmt: skip
    # with the environment a call sets for itself (THREADS=1, STEPS=800 TTT=7, ...)
    calls = re.findall(rf"(?<![\w$(])(?:[A-Z_][A-Z0-9_]*=\S+ )*(?:{writers}) [^;|\n]*", code)
    assert len(calls) >= 5
    env = {**os.environ, "S": "/S", "M": "/M"}
    written = subprocess.run(["bash", "-c", "".join(functions) + "\n".join(calls)], check=True,
                             capture_output=True, text=True, env=env).stdout  # fmt: skip
    text = (outside + written).replace("\\\n", " ").replace("\\$", "$")
    text = re.sub(r"--temperature \$t", "--temperature 1", text)  # the loop's 0 and 1
    text = re.sub(r"--worker \$w/", "--worker 1/", text)  # the loop's workers 0 and 1
    text = re.sub(r"--split \$split", "--split ood", text)  # the loop's val and ood
    text = re.sub(r"\$\(\(.*?\)\)|\$R\d*\b", "8", text)  # counts the queue sets as it runs
    text = re.sub(r"\$\{?[A-Za-z_]+\}?", "X", text)
    commands = re.findall(r"minieagle (?:distill|train|calibrate) [^\n&|\">]*", text)  # to >
    assert len(commands) >= 4
    assert any("--steps 200 " in c and "--ttt-steps 7 " in c and "--lr 1e-3 " in c
               for c in commands)  # step 14  # fmt: skip
    assert any("--source requests " in c and "--split val " in c for c in commands)  # step 15
    assert any("--request-batch 2 " in c for c in commands)  # step 18
    assert any("eagle3-u2 " in c and "--lr 1e-3 " in c and "/req5-T0 " in c
               for c in commands)  # step 24  # fmt: skip
    assert any("eagle3-ut7 " in c and "--ttt-steps 7 " in c and "--lr 1e-3 " in c
               and "/chat5-T1 " in c for c in commands)  # step 25  # fmt: skip
    assert any("chat5-T0 " in c and "--seed 10 " in c and "--shards 8 " in c
               and "--batch-size 64 " in c for c in commands)  # step 25's passages  # fmt: skip
    for command in commands:
        argv = shlex.split(command)[1:]
        args = build_parser().parse_args(argv)  # SystemExit on an unknown or bad flag
        assert args.command in ("distill", "train", "calibrate")
    for name in ("eagle3_scaling", "chat_acceptance", "chat_tau"):  # their flags, from --help
        runs = re.findall(rf"python benchmarks/{name}.py [^\n>]*", text)
        assert runs, name
        with pytest.raises(SystemExit):
            importlib.import_module(name).main(["--help"])
        flags = set(re.findall(r"--[a-z-]+", capsys.readouterr().out))
        for command in runs:
            assert set(re.findall(r"--[a-z-]+", command)) <= flags
            if name == "eagle3_scaling":
                assert "--features" in command and "--planned-shards" in command
        if name == "chat_tau":  # step 24: beside step 22's head, at T = 1 a second draw too
            assert any("u2=" in c and "--seed-offset 1000" in c and "--temperatures 1" in c
                       and "--baseline docs/results/smollm2-chat-tau-su-T1-s1000.json:u" in c
                       for c in runs)  # fmt: skip


@pytest.mark.parametrize("second", ["true", "sleep 0.3", "false"])
def test_the_heads_at_scale_queue_waits_for_runs_already_done_and_stops_on_a_failure(second):
    """Two runs side by side (`in_background` ... `both_done`, and `distill_workers`' two
    processes): the queue goes on once both have succeeded, even when both ended before the
    wait (each skipped as done: `wait -n` failed there and stopped the queue, 2026-12-05),
    and stops when either failed."""
    import re
    import subprocess

    raw = (BENCHMARKS / "heads_at_scale.sh").read_text()
    functions = "".join(re.findall(r"^[a-z_]+\(\) \{\n.*?^\}\n", raw, flags=re.M | re.S))
    writer = f"""{functions}
        echo true | in_background
        echo '{second}' | in_background
        echo 'sleep 0.5'
        both_done
        echo 'echo side-by-side done'
        distill_workers '{second}' /dev/null | sed 's/ --worker [^ ]*//'
        echo 'echo workers done'"""  # the queue's text, as start_smollm2_run runs it
    queue = subprocess.run(["bash", "-c", writer], check=True, capture_output=True,
                           text=True).stdout  # fmt: skip
    assert "wait -n" not in queue
    run = subprocess.run(["bash", "-c", queue], capture_output=True, text=True, timeout=60)
    if second == "false":
        assert run.returncode == 1 and "done" not in run.stdout
    else:
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["side-by-side", "done", "workers", "done"]


def test_a_head_round_trains_one_pass_over_the_windows_it_names(tmp_path):
    """`head_round`'s run counts its steps from the shards its data name, when it starts: one
    pass at 4 windows a step over every entry, a whole run or a span of its shards."""
    import re
    import subprocess
    import sys

    from minieagle.distill import DistillConfig, run_distill

    small = BENCHMARKS.parent / "minieagle" / "pretrained" / "small"
    run_distill(DistillConfig(target=str(small), out_dir=str(tmp_path / "a"), shards=3,
                              shard_windows=6, window_tokens=17, prompt_tokens=4,
                              keys=("final",), batch_size=4, max_train_chars=20_000),
                progress=False)  # fmt: skip
    raw = (BENCHMARKS / "heads_at_scale.sh").read_text()
    functions = "".join(re.findall(r"^[a-z_]+\(\) \{\n.*?^\}\n", raw, flags=re.M | re.S))
    env = {**os.environ, "S": str(tmp_path), "M": "/M",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    for data, steps in ((f"{tmp_path}/a", 5), (f"{tmp_path}/a {tmp_path}/a@1:3", 8)):  # 18, 30
        queue = subprocess.run(["bash", "-c", f'{functions}\nhead_round u /start "{data}" 1 ""'],
                               check=True, capture_output=True, text=True, env=env).stdout
        count = queue.splitlines()[0] + '\necho "$R"'  # the line that counts, run as the queue
        run = subprocess.run(["bash", "-c", count], capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == [str(steps)]
        assert "--steps $R " in queue.replace("\\\n", " ") and "--features " + data in queue


def test_the_tree_depth_script_measures_both_heads_at_each_depth(scripts, tmp_path):
    """benchmarks/tree_depth.py on the shipped heads, a tiny budget: one row per depth, τ of
    both heads per prompt set and kind, ratios that are the quotient of the two, every greedy
    output checked equal to vanilla's; a bad --depths is refused naming it."""
    depth = importlib.import_module("tree_depth")
    pretrained = BENCHMARKS.parent / "minieagle" / "pretrained"
    argv = ["--model", str(pretrained / "small"), "--eagle3", str(pretrained / "small-eagle3"),
            "--eagle1", str(pretrained / "small-eagle1"), "--depths", "1,3",
            "--prompts-per-kind", "1", "--new-tokens", "12", "--total-tokens", "8",
            "--top-k", "3", "--json", str(tmp_path / "d.json")]  # fmt: skip
    results = depth.main(argv)
    assert json.loads((tmp_path / "d.json").read_text()) == json.loads(json.dumps(results))
    rows = results["depths"]
    assert [r["depth"] for r in rows] == [1, 3]
    for row in rows:
        for name in ("heldout", "ood"):
            e3, e1 = row["eagle3"][name], row["eagle1"][name]
            assert 1 <= e3["tau"] <= row["levels"] + 1 and 1 <= e1["tau"] <= row["levels"] + 1
            assert row["ratio"][name]["all"] == pytest.approx(e3["tau"] / e1["tau"])
            assert set(e3["tau_by_kind"]) == set(e1["tau_by_kind"]) and e3["tau_by_kind"]
            assert 0 < e3["mean_tree_size"] <= 8
    with pytest.raises(InvalidInputError, match="--depths '5,x'"):
        depth.main([*argv[:6], "--depths", "5,x"])


def test_the_tree_depth_script_ranks_by_the_shipped_scores_when_asked(scripts, tmp_path):
    """--scores shipped drafts with each head's calibration.json (the shipped heads' T = 0
    scores are temperature scores): other trees than raw scores, the same greedy outputs; a
    head directory without one is refused naming the command that writes it."""
    import shutil

    depth = importlib.import_module("tree_depth")
    pretrained = BENCHMARKS.parent / "minieagle" / "pretrained"
    argv = ["--model", str(pretrained / "small"), "--eagle3", str(pretrained / "small-eagle3"),
            "--eagle1", str(pretrained / "small-eagle1"), "--depths", "3",
            "--prompts-per-kind", "1", "--new-tokens", "24"]  # fmt: skip
    raw, shipped = (depth.main([*argv, "--scores", s])["depths"][0] for s in ("raw", "shipped"))
    taus = [(r[k]["heldout"]["tau"], r[k]["ood"]["tau"]) for r in (raw, shipped)
            for k in ("eagle3", "eagle1")]  # fmt: skip
    assert taus[:2] != taus[2:]  # the scores changed some tree
    bare = tmp_path / "bare-eagle1"
    shutil.copytree(pretrained / "small-eagle1", bare)
    (bare / "calibration.json").unlink()
    with pytest.raises(InvalidInputError, match="has no calibration.json .* minieagle calibrate"):
        depth.main([*argv[:4], "--eagle1", str(bare), *argv[6:], "--scores", "shipped"])


def test_the_tree_depth_check_catches_an_output_that_differs_from_vanilla(scripts):
    """The lossless check in benchmarks/tree_depth.py can fail: a reference that is not
    vanilla's output is reported."""
    from minieagle.checkpoint import load_checkpoint

    depth = importlib.import_module("tree_depth")
    params, config, _ = load_checkpoint(BENCHMARKS.parent / "minieagle" / "pretrained" / "small")
    prompts = [("prose", [5, 6, 7, 8])]
    with pytest.raises(AssertionError, match="differs from vanilla"):
        depth.measure(params, config, prompts, lambda: None, 6, [[1, 2, 3, 4, 5, 6]])


def test_the_remeasured_curve_plots_each_point_file_and_refuses_a_nameless_one(scripts, tmp_path):
    """benchmarks/plot_scaling_remeasured.py: one PNG from tree_depth files named by their point;
    a file whose name does not say its point is refused naming it."""
    plot = importlib.import_module("plot_scaling_remeasured")
    row = {"depth": 5, "levels": 6, "ratio": {"heldout": {"all": 1.1}, "ood": {"all": 1.0}}}
    for head in ("eagle3", "eagle1"):
        row[head] = {name: {"tau": 4.0} for name in ("heldout", "ood")}
    files = []
    for k in (1, 2):
        files.append(tmp_path / f"tree-depth-{k}x-24.json")
        files[-1].write_text(json.dumps({"depths": [row]}))
    points = plot.main([*map(str, files), "--plot", str(tmp_path / "c.png")])
    assert list(points) == [1, 2]
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    wide = tmp_path / "tree-depth-1x-wide-24.json"  # a wider head's point, drawn beside
    wide.write_text(json.dumps({"depths": [row]}))
    plot.main([*map(str, files), "--wide", str(wide), "--plot", str(tmp_path / "w.png")])
    assert (tmp_path / "w.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InvalidInputError, match="other.json"):
        plot.main([str(tmp_path / "other.json"), "--plot", str(tmp_path / "d.png")])
    # --ratios: EAGLE-3 at 8 levels over EAGLE-2 at 6, per kind, from --scores shipped files
    kinds = {"heldout": {"prose": 5.0, "code": 6.0}, "ood": {"ood-prose": 4.0, "ood-code": 3.0}}
    rows = []
    for depth, scale in ((5, 1.0), (7, 1.3)):
        rows.append({"depth": depth, "levels": depth + 1, "ratio": row["ratio"]})
        for head in ("eagle3", "eagle1"):
            by_set = {s: {"tau": 4.0, "tau_by_kind": {k: t * (scale if head == "eagle3" else 1)
                                                      for k, t in ks.items()}}
                      for s, ks in kinds.items()}  # fmt: skip
            rows[-1][head] = by_set
    shipped = tmp_path / "tree-depth-8x-wide-shipped-24.json"
    shipped.write_text(json.dumps({"depths": rows}))
    ratios = plot.kind_ratios(rows)
    assert ratios == pytest.approx({label: 1.3 for label in plot.KINDS.values()})
    ratio_args = ["--ratios", str(shipped), "--ratio-shipped", str(shipped),
                  "--ratio-plot", str(tmp_path / "r.png")]  # fmt: skip
    plot.main([*map(str, files), "--plot", str(tmp_path / "e.png"), *ratio_args])
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InvalidInputError, match="go together"):
        plot.main([*map(str, files), "--plot", str(tmp_path / "f.png"), "--ratios", str(shipped)])
    with pytest.raises(InvalidInputError, match="depth"):
        plot.kind_ratios(rows[:1])


@pytest.mark.parametrize("method", ["eagle2", "eagle3"])
def test_the_calibration_study_runs_end_to_end(method, monkeypatch, tmp_path):
    """benchmarks/eagle2_calibration.py at its smallest: every row decodes (the sharpened-score
    row among them: it broke once when the drafter stopped handing `_log_accept` a log q) and
    the results and fitted maps are written."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    study = importlib.import_module("eagle2_calibration")
    out = tmp_path / "study.json"
    argv = ["--method", method, "--fit-prompts", "1", "--fit-tokens", "8", "--prompts-per-kind",
            "1", "--new-tokens", "6", "--depth", "2", "--out", str(out),
            "--calibration-dir", str(tmp_path)]  # fmt: skip
    results = study.main(argv)
    assert json.loads(out.read_text())["settings"]["method"] == method
    assert any(name.endswith(f"logits/{study.SHARPEN}") for name in json.dumps(results).split('"'))
    assert sorted(p.name for p in tmp_path.glob(f"{method}-calibration-*.json"))


def test_sharpened_scores_are_the_log_softmax_of_the_halved_logits(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    study = importlib.import_module("eagle2_calibration")
    import numpy as np

    from minieagle.layers import log_softmax

    drafter = object.__new__(study.SharpenedScores)  # only the scoring is exercised
    logits = np.array([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, -np.inf]])
    tokens = np.array([[0, 3], [2, 1]])
    expected = np.take_along_axis(log_softmax(logits / 0.5), tokens, axis=-1)
    np.testing.assert_allclose(drafter._log_accept(logits, tokens, None), expected)
    with pytest.raises(ValueError, match="sampled_tree=False"):
        drafter._log_accept(None, None, None)


def test_the_tree_size_sweep_runs_with_raw_and_shipped_scores(monkeypatch, tmp_path):
    """benchmarks/eagle2_sweep.py at its smallest, for both methods: a grid point per (depth,
    total), the scores it ranked by recorded, greedy outputs equal to vanilla's; --scores
    shipped on a head without calibration.json is refused naming the command that writes it."""
    import shutil

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sweep = importlib.import_module("eagle2_sweep")
    small = ["--depths", "1", "2", "--totals", "4", "--repeats", "1", "--new-tokens", "8",
             "--prompts-per-corpus", "1"]  # fmt: skip
    for method in ("eagle2", "eagle3"):
        for scores in ("raw", "shipped"):
            out = tmp_path / f"{method}-{scores}.json"
            argv = ["--method", method, *small, "--scores", scores, "--out", str(out)]
            results = sweep.main(argv)
            assert results["settings"]["scores"] == scores and out.is_file()
            assert len(results["grid"]) == 2
    # the scores reach the trees: a deeper tree, where the EAGLE-3 head's shipped T = 0 scores
    # (temperature scores) draft differently from raw ones
    deeper = ["--method", "eagle3", "--depths", "3", "--totals", "26", "--repeats", "1",
              "--new-tokens", "24", "--prompts-per-corpus", "1"]  # fmt: skip
    taus = [sweep.main([*deeper, "--scores", s])["grid"][0]["tau"] for s in ("raw", "shipped")]
    assert taus[0] != taus[1]
    bare = tmp_path / "bare-eagle1"
    shutil.copytree(BENCHMARKS.parent / "minieagle" / "pretrained" / "small-eagle1", bare)
    (bare / "calibration.json").unlink()
    with pytest.raises(SystemExit, match="has no calibration.json .* minieagle calibrate"):
        sweep.main(["--head", str(bare), *small, "--scores", "shipped"])


def test_the_smollm2_methods_script_builds_the_clis_own_drafters(monkeypatch):
    """benchmarks/smollm2_methods.py's `*-cli` rows are what `minieagle generate` builds (its
    parser and factory); checked on the tiny target, whose greedy output they keep."""
    from minieagle import inference
    from minieagle.checkpoint import load_checkpoint
    from minieagle.generate import generate

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    script = importlib.import_module("smollm2_methods")
    pretrained = BENCHMARKS.parent / "minieagle" / "pretrained"
    params, config, tokenizer = load_checkpoint(pretrained / "small", dtype=np.float32)
    target = (inference.prepare(params, config), config)
    ids = tokenizer.encode("def read_config(path):\n", add_bos=True)
    vanilla = generate(*target, ids, max_new_tokens=12).tokens
    fixed = ["--total-tokens", "8", "--depth", "2", "--tree-top-k", "2"]  # no sizing measured
    for method, head in (("eagle2", "small-eagle1"), ("eagle3", "small-eagle3")):
        make = script.cli_drafter(str(pretrained / "small"), method, str(pretrained / head),
                                  fixed, target, tokenizer)  # fmt: skip
        drafter = make()
        assert generate(*target, ids, drafter=drafter, max_new_tokens=12).tokens == vanilla
        assert (drafter.depth, drafter.top_k, drafter.total_tokens) == (2, 2, 8)
        assert drafter.active_calibration is not None  # the head's shipped T = 0 scores


def test_the_smollm2_cli_script_reads_what_minieagle_chat_prints(tmp_path, monkeypatch):
    """benchmarks/smollm2_cli.py runs `minieagle chat --stats` processes and reads their stats
    line; checked on the tiny target with a plain template: vanilla against itself is 1.00x at
    τ 1, prompt lookup keeps the greedy reply, and a reply that differs is counted."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    script = importlib.import_module("smollm2_cli")
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}")
    small = str(BENCHMARKS.parent / "minieagle" / "pretrained" / "small")
    table = {"vanilla": ["--method", "vanilla"], "pld": ["--method", "pld"]}
    runs = {
        (r, 0): {
            name: script.run_chat(small, request, [*flags, "--template", str(template)], 0.0, 8, 0)
            for name, flags in table.items()
        }
        for r, request in enumerate(["def read_config(path):", "The garbage collector"])
    }
    rows = script.summarise(runs, list(table), greedy=True)
    assert rows["vanilla"]["tau"] == 1.0 and rows["vanilla"]["speedup_median"] == 1.0
    assert rows["pld"]["replies_differing_from_vanilla"] == 0 and rows["pld"]["tau"] >= 1.0
    assert rows["pld"]["tokens"] == rows["vanilla"]["tokens"] == 16
    runs[(1, 0)]["pld"]["reply"] += "a different reply"
    assert (
        script.summarise(runs, list(table), greedy=True)["pld"]["replies_differing_from_vanilla"]
        == 1
    )
    with pytest.raises(RuntimeError, match="failed"):
        script.run_chat(small, "hi", ["--method", "vanilla"], 0.0, 4, 0)  # no chat template


def test_fastest_methods_chooses_by_the_whole_range_and_matches_the_shipped_file(monkeypatch):
    """benchmarks/fastest_methods.py: the fastest method whose whole [min..max] speedup is above
    1, else vanilla; the shipped minieagle/pretrained/fastest.json is what it writes from the
    results files each entry names (nobody edited it by hand)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    script = importlib.import_module("fastest_methods")
    rows = {"vanilla": (1.0, 1.0, 1.0, 1.0), "pld": (1.4, 0.9, 1.5, 2.0),
            "eagle3": (1.2, 1.1, 1.3, 3.0), "eagle1-chain3": (1.1, 1.05, 1.2, 2.5)}  # fmt: skip
    chosen = script.choose(rows, "results.json", "T=0")
    assert (chosen["method"], chosen["speedup"], chosen["range"]) == ("eagle3", 1.2, [1.1, 1.3])
    rows["eagle3"] = (1.2, 0.99, 1.3, 3.0)
    assert script.choose(rows, "r", "T=0")["flags"] == {"tree": "chain", "depth": 3}
    rows = {"vanilla": (1.0, 1.0, 1.0, 1.0), "pld": (1.02, 0.97, 1.1, 2.0)}
    assert script.choose(rows, "r", "T=0")["method"] == "vanilla"
    shipped = json.loads((BENCHMARKS.parent / "minieagle/pretrained/fastest.json").read_text())
    for entry in shipped["targets"]:
        for setting, key in script.SETTINGS.items():
            source = entry[setting]["source"]
            results = json.loads((BENCHMARKS.parent / source).read_text())
            assert entry[setting] == script.choose(script.speedups(results, key), source, setting)


def test_fastest_methods_rows_are_the_flags_they_were_measured_with(monkeypatch):
    """Each row fastest_methods.py can choose becomes flags `--method auto` sets on the CLI's
    arguments: they are the parser's own names, and a fixed chain measured by
    benchmarks/smollm2_cli.py gets exactly the flags that script ran it with."""
    from minieagle.cli import build_parser

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    script = importlib.import_module("fastest_methods")
    cli = importlib.import_module("smollm2_cli")
    parser = build_parser()
    defaults = vars(parser.parse_args(["chat", "--prompt", "x"]))
    for row, (method, flags) in script.ROWS.items():
        assert set(flags) <= set(defaults), row
        named = parser.parse_args(["chat", "--prompt", "x", "--method", method])
        assert named.method == method, row
    measured = cli.methods("E1", "E3")
    for row in ("eagle3-chain1", "eagle3-chain2"):
        ran = vars(parser.parse_args(["chat", "--prompt", "x", *measured[row]]))
        method, flags = script.ROWS[row]
        assert ran["method"] == method
        assert {name: ran[name] for name in flags} == flags
        changed = {k for k, v in ran.items() if v != defaults[k]} - {"method", "head"}
        assert changed == set(flags), row  # no flag the run used is left out


def test_a_candidate_head_runs_beside_the_shipped_one_and_is_never_auto_chosen(monkeypatch):
    """benchmarks/smollm2_cli.py --candidate LABEL=DIR: rows LABEL:eagle3 and
    LABEL:eagle3-chain1 with the shipped rows' flags but for --head; a malformed value is
    refused; fastest_methods.py does not pick a candidate's row however fast it measured."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    cli = importlib.import_module("smollm2_cli")
    fastest = importlib.import_module("fastest_methods")
    shipped = cli.methods("E1", "E3")
    rows = cli.candidate_methods(["d960=/runs/d960/final"])
    assert list(rows) == ["d960:eagle3", "d960:eagle3-chain1"]
    for name, flags in rows.items():
        want = shipped[name.split(":")[1]]
        head = flags.index("--head")
        assert flags[head + 1] == "/runs/d960/final" and want[head + 1] == "E3"
        assert flags[:head + 1] + flags[head + 2:] == want[:head + 1] + want[head + 2:]
    for bad in ("d960", "=/x", "d960=", "a:b=/x"):
        with pytest.raises(SystemExit, match="LABEL=DIR"):
            cli.candidate_methods([bad])
    measured = {"vanilla": (1.0, 1.0, 1.0, 1.0), "eagle3-chain1": (1.2, 1.05, 1.3, 1.5),
                "d960:eagle3-chain1": (1.5, 1.3, 1.6, 1.6)}  # fmt: skip
    assert fastest.choose(measured, "r", "T=0")["row"] == "eagle3-chain1"


def test_the_sampled_tree_shape_script_measures_tau_and_speed(scripts, tmp_path):
    """benchmarks/sampled_tree_shape.py at its smallest: a τ row per (method, depth, top_k) on
    validation prompts, each within [1, levels + 1] and the mean of its kinds' runs; --speed
    benches vanilla and each (method, depth) side by side at T = 0 and T = 1."""
    shape = importlib.import_module("sampled_tree_shape")
    common = ["--prompts-per-kind", "1", "--new-tokens", "6", "--total-tokens", "6",
              "--methods", "eagle2,eagle3", "--depths", "1,2", "--top-ks", "2"]  # fmt: skip
    assert shape.main([*common, "--out", str(tmp_path / "tau.json")]) == 0
    tau = json.loads((tmp_path / "tau.json").read_text())
    assert tau["settings"]["prompt_split"] == "validation" and tau["settings"]["prompts"] == 2
    for method in ("eagle2", "eagle3"):
        assert list(tau[method]) == ["depth 1, top_k 2", "depth 2, top_k 2"]
        for row in tau[method].values():
            assert 1 <= row["tau"] <= row["depth"] + 2
            assert set(row["by_kind"]) == {"prose", "code"} and len(row["tau_per_prompt"]) == 2
    speed_argv = [*common, "--speed", "--repeats", "1", "--out", str(tmp_path / "s.json")]
    assert shape.main(speed_argv) == 0
    speed = json.loads((tmp_path / "s.json").read_text())
    for setting in ("T=0", "T=1"):
        assert set(speed[setting]["all"]) == {"vanilla", "eagle2 depth 1", "eagle2 depth 2",
                                              "eagle3 depth 1", "eagle3 depth 2"}  # fmt: skip
        assert speed[setting]["all"]["vanilla"]["tau"] == 1.0
    assert speed["T=0"]["all"]["eagle2 depth 2"]["differs_from_vanilla"] == 0


def test_the_block_verification_script_measures_both_verifications(scripts, tmp_path):
    """benchmarks/block_verification.py at its smallest: for each drafter, τ of token-by-token
    and block verification on the same validation prompts and their ratio; --speed times both."""
    block = importlib.import_module("block_verification")
    common = ["--prompts-per-kind", "1", "--seeds", "1", "--new-tokens", "6",
              "--temperatures", "1", "--only", "EAGLE-1 chain:3,EAGLE-3 sampled chain of 3"]
    results = block.main([*common, "--out", str(tmp_path / "b.json")])
    assert json.loads((tmp_path / "b.json").read_text()) == json.loads(json.dumps(results))
    assert results["settings"]["prompts"] == 2 and results["settings"]["split"] == "val"
    for row in results["T=1"].values():
        assert 1 <= row["token"]["tau"] <= 4 and 1 <= row["block"]["tau"] <= 4
        assert row["block / token"] == pytest.approx(row["block"]["tau"] / row["token"]["tau"])
    speed = block.main([*common, "--speed", "--repeats", "1"])
    for setting in ("T=0", "T=1"):
        assert set(speed[setting]["all"]) == {
            "vanilla", "EAGLE-1 chain:3, token", "EAGLE-1 chain:3, block",
            "EAGLE-3 sampled chain of 3, token", "EAGLE-3 sampled chain of 3, block"}
    greedy = speed["T=0"]["all"]  # at T = 0 both ways give the greedy verdicts
    assert greedy["EAGLE-1 chain:3, block"]["tau"] == greedy["EAGLE-1 chain:3, token"]["tau"]
    assert greedy["EAGLE-1 chain:3, block"]["differs_from_vanilla"] == 0
    trees = block.main(["--random-trees", "2", "--tree-nodes", "6", "--samples", "50"])
    assert len(trees["trees"]) == 2 and trees["settings"]["samples"] == 50
    for row in trees["trees"]:
        assert row["block - token"] == pytest.approx(row["block"]["mean"] - row["token"]["mean"])


def test_the_chain_cut_script_reads_both_chains_under_both_verifications(scripts, tmp_path):
    """benchmarks/sizing_chain_cut.py at its smallest: a row per verification and chain length,
    P(accepted >= j) per cycle for j up to the short chain, falling with j, with its standard
    errors; the JSON holds the command."""
    cut = importlib.import_module("sizing_chain_cut")
    out = tmp_path / "cut.json"
    assert cut.main(["--prompts-per-kind", "1", "--seeds", "1", "--new-tokens", "8",
                     "--short", "2", "--long", "3", "--out", str(out)]) == 0  # fmt: skip
    data = json.loads(out.read_text())
    assert data["command"]["short"] == 2
    assert set(data["rows"]) == {f"{v}, chain of {n}" for v in ("block", "token") for n in (2, 3)}
    for row in data["rows"].values():
        p = row["p_accepted_at_least"]
        assert len(p) == 2 == len(row["standard_errors"]) and row["cycles"] > 0
        assert 1 >= p[0] >= p[1] >= 0


def test_the_sizing_forwards_script_times_each_part_of_a_chains_cycle(scripts, tmp_path):
    """benchmarks/sizing_forwards.py at its smallest: per chain its τ, its speed against vanilla
    and its cycle's parts (the forward at the chain's own size, propose, loop); per tree size the
    curve, the sizing's scaled curve and the forwards seen in decoding."""
    forwards = importlib.import_module("sizing_forwards")
    out = tmp_path / "f.json"
    results = forwards.main(["--chains", "1,2", "--cycles", "2", "--repeats", "1",
                             "--speed-tokens", "6", "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    assert set(results["chains"]) == {"chain of 1", "chain of 2"}
    for drafts, row in ((1, results["chains"]["chain of 1"]), (2, results["chains"]["chain of 2"])):
        assert 1 <= row["tau"] <= drafts + 1
        assert row["speedup_min"] <= row["speedup_median"] <= row["speedup_max"]
        assert drafts + 1 in row["forward_ms_by_nodes"] and row["propose_ms"] > 0
    for n in (2, 3, 26):
        row = results["by_nodes"][n]
        assert row["forwards"] > 0 and row["curve_ms"] > 0
        assert row["scaled_curve_ms"] == pytest.approx(row["curve_ms"] * results["scale"])


def test_the_head_speed_script_benches_heads_side_by_side(scripts, tmp_path):
    """benchmarks/head_speed.py at its smallest: vanilla and, per head, its default tree and a
    fixed chain, side by side at T = 0 and T = 1; greedy outputs equal vanilla's; a chain's τ
    within its levels; bad labels and chain lengths are refused, naming the flag."""
    speed = importlib.import_module("head_speed")
    out = tmp_path / "speed.json"
    argv = ["--eagle3", "a=small-eagle3", "small-eagle3", "--chain", "2", "--prompts", "heldout",
            "--prompts-per-kind", "1", "--new-tokens", "6", "--repeats", "1", "--out", str(out)]
    assert speed.main(argv) == 0
    results = json.loads(out.read_text())
    assert results["settings"]["heads"] == {"a": "small-eagle3", "small-eagle3": "small-eagle3"}
    for setting in ("T=0", "T=1"):
        rows = results[setting]["all"]
        assert set(rows) == {"vanilla", "a tree", "a chain:2", "small-eagle3 tree",
                             "small-eagle3 chain:2"}  # fmt: skip
        assert 1.0 <= rows["a chain:2"]["tau"] <= 3.0
        assert rows["a chain:2"]["mean_tree_size"] <= 3
    for name in ("a tree", "a chain:2"):
        assert results["T=0"]["all"][name]["differs_from_vanilla"] == 0
    # the same head under two labels drafts the same tokens: equal τ at T = 0
    greedy = results["T=0"]["all"]
    assert greedy["a tree"]["tau"] == greedy["small-eagle3 tree"]["tau"]
    with pytest.raises(InvalidInputError, match="given twice"):
        speed.main(["--eagle3", "a=small-eagle3", "a=small-eagle3"])
    with pytest.raises(InvalidInputError, match="LABEL=DIR"):
        speed.main(["--eagle3", "=small-eagle3"])
    with pytest.raises(InvalidInputError, match="--chain -1"):
        speed.main(["--eagle3", "small-eagle3", "--chain", "-1"])


def test_chat_acceptance_scores_what_the_training_metric_scores(scripts, tmp_path):
    """benchmarks/chat_acceptance.py's forward-only scores over a held-out set equal
    `eagle3.ttt_loss`'s top1 and accept under the same mask, at every TTT step; the mean's
    error bar is over windows."""
    from minieagle import model
    from minieagle.checkpoint import load_checkpoint
    from minieagle.distill import DistillConfig, open_shards, run_distill
    from minieagle.heads import eagle1, eagle3
    from minieagle.heads.eagle1 import eagle1_metrics, load_head
    from minieagle.heads.eagle3_io import load_eagle3_head

    acceptance = importlib.import_module("chat_acceptance")
    pretrained = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained"
    run = tmp_path / "heldout"
    run_distill(DistillConfig(target=str(pretrained / "small"), out_dir=str(run), split="val",
                              shards=1, shard_windows=5, window_tokens=33, prompt_tokens=8,
                              temperature=0.0, keys=(2, 6, 9, "final"), batch_size=5,
                              max_train_chars=20_000), progress=False)  # fmt: skip
    params, config, _ = load_checkpoint(pretrained / "small")
    head, cfg, vocab = load_eagle3_head(pretrained / "small-eagle3", target_config=config)

    def spans(windows):  # answers of several lengths, from each window's own tokens
        return np.full(len(windows), 8), 12 + windows[:, 1] % 22

    e1_head, e1_cfg = load_head(pretrained / "small-eagle1")
    both = acceptance.evaluate(params, {"h": ("eagle3", head, cfg, vocab),
                                        "e1": ("eagle1", e1_head, e1_cfg, None)}, run, spans,
                               steps=3, batch_size=2)  # fmt: skip
    got = both["h"]
    shard = open_shards([str(run)])[0]
    windows = np.asarray(shard.windows[:], dtype=np.int64)
    hidden = {k: np.asarray(shard.hidden[k][:], dtype=np.float32) for k in shard.keys}
    label = np.arange(32)[None, :] + 2
    mask = (label >= 8) & (label < spans(windows)[1][:, None])
    fused = eagle3.fuse_features(hidden, cfg.aux_layers)[:, :-1]
    target_logits = hidden["final"][:, 1:] @ model.lm_head_weight(params).T
    _, parts, _ = eagle3.ttt_loss(head, cfg, params, vocab, windows, fused, target_logits, mask,
                                  steps=3)  # fmt: skip
    assert [m for m, _ in got["top1"]] == pytest.approx(parts["top1"], abs=1e-9)
    assert [m for m, _ in got["accept"]] == pytest.approx(parts["accept"], abs=1e-6)
    assert got["positions"] == int(mask.sum()) and got["windows"] == 5
    # an EAGLE-1 head: step 0 as its training metric scores it under the same mask ...
    f = hidden["final"]
    e1 = eagle1_metrics(e1_head, e1_cfg, params, windows[:, 1:], f[:, :-1], f[:, 1:], mask)
    assert len(both["e1"]["top1"]) == 3 and both["e1"]["covered"][0] == 1.0
    assert both["e1"]["covered_mass"][0] == pytest.approx(1.0)
    # Σ min(p, q) can take no more than the target's mass on the draft vocabulary
    assert got["accept"][0][0] <= got["covered_mass"][0] < 1.0
    assert both["e1"]["top1"][0][0] == pytest.approx(e1["top1"], abs=1e-9)
    assert both["e1"]["accept"][0][0] == pytest.approx(e1["accept"], abs=1e-6)
    # ... and its later steps as a chain drafted one token at a time through its KV cache: the
    # true prefix up to the root, then each step its own feature and the next true token
    unrolled = acceptance.eagle1_unrolled(e1_head, e1_cfg, params, windows[:1], f[:1, :-1], 3)
    for root in (0, 6, 20):
        cache = eagle1.new_head_cache(e1_cfg, e1_head, capacity=64)
        g, logits, _ = eagle1.head_forward(e1_head, e1_cfg, params, windows[:1, 1 : root + 2],
                                           f[:1, : root + 1], cache=cache)  # fmt: skip
        by_hand = [logits[0, root]]
        g = g[:, root:]
        for s in (1, 2):
            token = windows[:1, root + 1 + s : root + 2 + s]
            g, logits, _ = eagle1.head_forward(e1_head, e1_cfg, params, token, g, cache=cache)
            by_hand.append(logits[0, 0])
        for s in range(3):
            np.testing.assert_allclose(unrolled[s][0, root], by_hand[s], rtol=1e-4, atol=1e-4)
    assert acceptance.load_any_head(pretrained / "small-eagle1", config)[0] == "eagle1"
    assert acceptance.load_any_head(pretrained / "small-eagle3", config)[0] == "eagle3"
    assert all(0 < e < 0.5 for _, e in got["top1"])
    assert 0.9 < got["covered"][0] <= 1.0
    assert acceptance.paired_difference(got, got, "top1") == (0.0, 0.0)
    other = {"per_window": {"n": [[10, 10]], "top1": [[4, 6]]}}
    base = {"per_window": {"n": [[10, 10]], "top1": [[3, 4]]}}
    assert acceptance.paired_difference(other, base, "top1") == pytest.approx((0.15, 0.05))
    # the plot, drawn again from a report: heads of one kind on a line, its last step extended
    report = {"tokens": {"a": 1e5, "b": 1e6, "c": 2e6}, "provenance": {"set": {"temperature": 0.0}},
              "sets": {"set": {label: {"top1": [(y, 0.01)], "accept": [(y, 0.01)]}
                               for label, y in [("a", 0.3), ("b", 0.5), ("c", 0.6)]}}}  # fmt: skip
    saved, png = tmp_path / "report.json", tmp_path / "trend.png"
    saved.write_text(json.dumps(report))
    steps_png = tmp_path / "steps.png"
    argv = ["--replot", str(saved), "--plot", str(png), "--line", "a,b", "--goal", "0.8=goal",
            "--extrapolate", "--plot-steps", str(steps_png)]  # fmt: skip
    assert acceptance.main(argv) == 0 and png.stat().st_size > 10_000
    assert steps_png.stat().st_size > 10_000


def test_train_curves_reads_finished_and_running_runs_and_lays_them_end_to_end(scripts, tmp_path):
    """benchmarks/train_curves.py: a train_log.json, a finished run directory and a running one
    (its last saved state's log); --concat offsets each log by the steps before it; the keys
    are picked by pattern; a pattern that matches nothing names some keys."""
    curves = importlib.import_module("train_curves")

    def log(values):
        return {"evals": [{"step": 100 * i, "val_top1_0_prose": v, "val_loss_prose": 9.0}
                          for i, v in enumerate(values)]}  # fmt: skip

    (tmp_path / "a.json").write_text(json.dumps(log([0.1, 0.2, 0.3])))
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "train_log.json").write_text(json.dumps(log([0.3, 0.35])))
    (tmp_path / "running" / "state").mkdir(parents=True)
    (tmp_path / "running" / "state" / "state.json").write_text(
        json.dumps({"step": 150, "rng": {}, "log": log([0.35, 0.4])}))  # fmt: skip
    logs = {label: curves.read_log(tmp_path / name)
            for label, name in (("a", "a.json"), ("b", "done"), ("c", "running"))}  # fmt: skip
    got = curves.series(logs, ["val_top1_0_*"], concat=True)
    assert list(got) == ["val_top1_0_prose"]
    assert got["val_top1_0_prose"]["b"] == ([200, 300], [0.3, 0.35])
    assert got["val_top1_0_prose"]["c"] == ([300, 400], [0.35, 0.4])
    apart = curves.series(logs, ["val_top1_0_*"], concat=False)["val_top1_0_prose"]
    assert apart["c"][0] == [0, 100]  # without --concat each log starts at its own step 0
    with pytest.raises(InvalidInputError, match="val_loss_prose"):
        curves.series(logs, ["top5*"], concat=False)
    with pytest.raises(InvalidInputError, match="no train_log.json"):
        curves.read_log(tmp_path)
    png = tmp_path / "c.png"
    argv = ["--log", f"a={tmp_path / 'a.json'}", "--log", f"b={tmp_path / 'done'}", "--concat",
            "--decay-steps", "50", "--out", str(png)]  # fmt: skip
    assert curves.main(argv) == 0 and png.stat().st_size > 10_000
    with pytest.raises(InvalidInputError, match="given twice"):
        curves.main(["--log", f"a={tmp_path / 'a.json'}", "--log", f"a={tmp_path / 'done'}"])
    assert curves.decay_counts("50", 3) == [50, 50, 50]
    assert curves.decay_counts("50,20", 2) == [50, 20]  # one for each log, in order
    for bad in ("50,20", "-1", "x"):
        with pytest.raises(InvalidInputError, match="one for each --log"):
            curves.decay_counts(bad, 3)
    argv[argv.index("50")] = "50,20"
    assert curves.main(argv) == 0


def test_the_threshold_script_predicts_from_one_long_chain(scripts, tmp_path):
    """benchmarks/expand_threshold.py at its smallest, on the tiny target: its rule for how many
    drafts a threshold keeps is the drafter's own (a chain drafted under the threshold holds as
    many drafts as the rule says, cycle by cycle, and emits the same tokens at T = 0), and its
    report holds every threshold and fixed chain."""
    from minieagle import inference
    from minieagle.checkpoint import load_checkpoint
    from minieagle.drafters import build_drafter
    from minieagle.generate import generate
    from minieagle.shipped import DEFAULT_MODEL

    script = importlib.import_module("expand_threshold")
    assert script.drafts_kept([0.9, 0.5, 0.2], 0.4) == 3
    assert script.drafts_kept([0.3, 0.9], 0.4) == 1
    assert script.drafts_kept([0.9, 0.3, 0.9], 0.4) == 2 and script.drafts_kept([0.1], 1.0) == 1
    tau, ms = script.predicted([([0.9, 0.1], 2), ([0.2, 0.1], 0)], {1: 10.0, 2: 14.0}, 0.5)
    assert tau == (3 + 1) / 2 and ms == (14.0 + 10.0) / 4
    params, config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    target = inference.prepare(params, config)
    ids = tokenizer.encode("def add(a, b):\n    return", add_bos=True)
    long = script._Recorder(build_drafter("eagle3", target=(target, config), head="small-eagle3",
                                          depth=3, top_k=1, total_tokens=5))  # fmt: skip
    longest = generate(target, config, ids, drafter=long, max_new_tokens=24)
    cut = build_drafter("eagle3", target=(target, config), head="small-eagle3", depth=3, top_k=1,
                        total_tokens=5, expand_threshold=0.5)  # fmt: skip
    recorder = script._Recorder(cut)
    result = generate(target, config, ids, drafter=recorder, max_new_tokens=24)
    assert result.tokens == longest.tokens
    kept = [len(values) for values in recorder.values]
    assert result.tree_sizes == [k + 1 for k in kept]
    assert all(  # each cut chain stops where the rule stops (or at its 4 drafts)
        len(v) == min(script.drafts_kept(v + [0.0] * 4, 0.5), 4) for v in recorder.values
    )
    assert 1 in kept and max(kept) > 1  # the threshold did cut, and did not always
    out = tmp_path / "t.json"
    argv = ["--model", str(DEFAULT_MODEL), "--head", "small-eagle3", "--drafts", "2",
            "--prompts", "1", "--new-tokens", "8", "--repeats", "1", "--out", str(out)]  # fmt: skip
    assert script.main(argv) == 0
    report = json.loads(out.read_text())
    assert set(report["thresholds"]) == {str(t) for t in script.THRESHOLDS}
    assert set(report["fixed_chains"]) == {"1", "2"} and report["cycles"] > 0
    assert report["thresholds"]["1.0"]["tau"] == report["fixed_chains"]["1"]["tau"]
    assert report["thresholds"]["0.0"]["tau"] == report["fixed_chains"]["2"]["tau"]


def test_the_sampled_chain_script_times_both_drafters_on_the_same_tokens(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    script = importlib.import_module("sampled_chain_cost")
    out = tmp_path / "cost.json"
    result = script.main(["--prompts", "1", "--prompt-tokens", "4", "--new-tokens", "8",
                          "--repeats", "2", "--drafts", "2", "--out", str(out)])  # fmt: skip
    assert result["same_tokens"]  # the same chain, the same seeds: the same tokens
    ratio = result["dynamic_over_eagle1"]
    assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
    assert json.loads(out.read_text())["drafts"] == 2


def test_the_distill_cores_script_times_every_layout_of_both_sides(scripts, tmp_path):
    """benchmarks/distill_cores.py at its smallest, two cores: one process at one and at two
    BLAS threads and two processes, for each side; every process's sampled tokens counted; the
    ratios are of the best layouts' medians; a worker that fails is named, not read as a
    result; an unknown layout is refused."""
    cores = importlib.import_module("distill_cores")
    out = tmp_path / "cores.json"
    argv = ["--cores", "2", "--batch-size", "3", "--serial-prompts", "2", "--prompt-tokens", "4",
            "--new-tokens", "5", "--repeats", "1", "--keys", "2,final", "--json", str(out)]
    results = cores.main(argv)
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    names = {f"{side}-{layout}" for side in ("serial", "batched") for layout in ("1t", "2t", "2p")}
    assert set(results["tokens_per_s"]) == names
    tokens = {name: runs[0]["tokens"] for name, runs in results["runs"].items()}
    assert tokens == {"serial-1t": 10, "serial-2t": 10, "serial-2p": 20,
                      "batched-1t": 15, "batched-2t": 15, "batched-2p": 30}  # fmt: skip
    assert len(results["runs"]["batched-2p"][0]["per_process_s"]) == 2
    best = results["best"]
    medians = {n: s["median"] for n, s in results["tokens_per_s"].items()}
    assert medians[best["serial"]] == max(medians[n] for n in names if n.startswith("serial"))
    best_ratio = medians[best["batched"]] / medians[best["serial"]]
    assert results["ratio_best"] == pytest.approx(best_ratio)
    assert results["ratio_one_core"] == pytest.approx(medians["batched-1t"] / medians["serial-1t"])
    with pytest.raises(RuntimeError, match="batched worker stopped before answering"):
        # the small target has 12 layers: its worker cannot record layer 99
        cores.main(["--cores", "1", "--layouts", "batched-1t", "--batch-size", "2",
                    "--new-tokens", "2", "--prompt-tokens", "2", "--repeats", "1",
                    "--keys", "99"])  # fmt: skip
    with pytest.raises(SystemExit):
        cores.main(["--layouts", "batched-9p"])


def test_the_devices_plot_reads_two_methods_files_and_names_each_ones_fastest(
    scripts, tmp_path, capsys
):
    """benchmarks/plot_devices.py on the committed CPU and GPU methods files: a PNG, and per run
    and setting the row of highest median speedup (on the H200 not the CPU's: why --method auto
    reads the device); a spec without LABEL= is refused."""
    plot = importlib.import_module("plot_devices")
    root = BENCHMARKS.parent / "docs" / "results"
    cpu, gpu = root / "bench-defaults-methods.json", root / "gpu" / "gpu-bench-methods.json"
    out = tmp_path / "devices.png"
    assert plot.main(["--run", f"cpu={cpu}", "--run", f"gpu={gpu}", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    runs = plot.read_runs([f"cpu={cpu}", f"gpu={gpu}"])
    for label, path in (("cpu", cpu), ("gpu", gpu)):
        rows = json.loads(path.read_text())["T=0"]["all"]
        best = max(runs[label]["T=0"], key=lambda row: runs[label]["T=0"][row][0])
        assert runs[label]["T=0"][best][0] == max(
            rows[row]["speedup"]["median"] for row in rows if row != "vanilla")  # fmt: skip
        assert f"{label} T=0: fastest {best} " in printed
    best_on = {label: max(run["T=0"], key=lambda row: run["T=0"][row][0])
               for label, run in runs.items()}  # fmt: skip
    assert best_on["cpu"] != best_on["gpu"]
    with pytest.raises(SystemExit, match="LABEL=FILE"):
        plot.read_runs([str(cpu)])


CHATML = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>{% endif %}")  # fmt: skip


def test_the_chat_tau_script_pools_tau_per_kind_with_intervals(scripts, tmp_path):
    """benchmarks/chat_tau.py on the tiny target with a plain template: every head at every
    tree and temperature, τ per kind and over all with a bootstrap interval around it, the
    records it pools, the figure; bad heads and trees refused naming them."""
    tau = importlib.import_module("chat_tau")
    pretrained = BENCHMARKS.parent / "minieagle" / "pretrained"
    template = tmp_path / "chat.jinja"
    template.write_text(CHATML)
    argv = ["--model", str(pretrained / "small"), "--template", str(template),
            "--eagle3", f"e3={pretrained / 'small-eagle3'}",
            "--eagle1", f"e1={pretrained / 'small-eagle1'}", "--trees", "8:3:2",
            "--per-kind", "2", "--new-tokens", "10", "--out", str(tmp_path / "t.json"),
            "--plot", str(tmp_path / "t.png")]  # fmt: skip
    results = tau.main(argv)
    assert json.loads((tmp_path / "t.json").read_text()) == json.loads(json.dumps(results))
    assert (tmp_path / "t.png").stat().st_size > 0
    assert [p["kind"] for p in results["prompts"]] == [k for k in tau.KINDS for _ in range(2)]
    for setting in ("T=0", "T=1"):
        assert set(results[setting]) == {"e3 eagle3 8:3:2", "e1 eagle2 8:3:2"}
        for row in results[setting].values():
            records = row["per_prompt"]
            assert len(records) == 6 and all(1 <= r["forwards"] <= r["emitted"] for r in records)
            for r in records:  # one count per cycle; each cycle emits its accepted drafts + 1
                assert sum(r["accepted"]) == r["forwards"] and len(r["accepted"]) <= 5
                drafts = sum(a * n for a, n in enumerate(r["accepted"]))
                assert drafts + r["forwards"] >= r["emitted"]  # the last cycle may be cut
            shares = row["tau"]["all"]["accepted_at_least"]
            cycles = sum(r["forwards"] for r in records)
            reached = sum(sum(r["accepted"][1:]) for r in records)
            assert shares[0] == pytest.approx(reached / cycles)
            assert shares == sorted(shares, reverse=True)  # a deeper level is rarer
            for kind, s in row["tau"].items():
                mine = [r for r in records if kind in ("all", r["kind"])]
                pooled = sum(r["emitted"] for r in mine) / sum(r["forwards"] for r in mine)
                assert s["tau"] == pytest.approx(pooled) and 1 <= pooled <= 5  # 4 levels + 1
                assert s["low"] <= s["tau"] <= s["high"]
    assert results["greedy_outputs_equal_to_vanilla"]
    for setting in ("T=0", "T=1"):  # the second head against the first, prompt by prompt
        first, second = (results[setting][n] for n in ("e3 eagle3 8:3:2", "e1 eagle2 8:3:2"))
        paired = second["against_first"]
        assert paired["row"] == "e3 eagle3 8:3:2" and "against_first" not in first
        assert paired["difference"] == pytest.approx(second["tau"]["all"]["tau"]
                                                     - first["tau"]["all"]["tau"])  # fmt: skip
        assert paired["low"] <= paired["difference"] <= paired["high"]
        assert paired["first_higher"] + paired["second_higher"] <= 6
    same = tau.paired_difference(first["per_prompt"], first["per_prompt"])
    assert (same["difference"], same["low"], same["high"], same["first_higher"]) == (0, 0, 0, 0)
    assert same["p_sign_flip"] == 1.0  # rows that do not differ: every relabelling as far
    with pytest.raises(InvalidInputError, match="same prompts in the same order"):
        tau.paired_difference(first["per_prompt"], first["per_prompt"][::-1])
    # the same comparison with the first head's rows read from an earlier run, not decoded again
    alone = [*argv[:4], *argv[4:6], *argv[8:-4], "--out", str(tmp_path / "e3.json")]
    tau.main(alone)
    earlier = f"{tmp_path / 'e3.json'}:e3"
    later = tau.main([*argv[:4], *argv[6:8], *argv[8:-4], "--baseline", earlier])
    for setting in ("T=0", "T=1"):
        for name in ("e3 eagle3 8:3:2", "e1 eagle2 8:3:2"):
            assert later[setting][name]["per_prompt"] == results[setting][name]["per_prompt"]
        assert (later[setting]["e1 eagle2 8:3:2"]["against_first"]
                == results[setting]["e1 eagle2 8:3:2"]["against_first"])  # fmt: skip
    with pytest.raises(InvalidInputError, match="new_tokens differ"):
        tau.main([*argv[:4], *argv[6:8], *argv[8:-6], "--new-tokens", "9",
                  "--baseline", earlier])  # fmt: skip
    with pytest.raises(InvalidInputError, match="seed_offset differ"):
        tau.main([*argv[:4], *argv[6:8], *argv[8:-4], "--seed-offset", "1000",
                  "--baseline", earlier])  # fmt: skip
    with pytest.raises(InvalidInputError, match="lacks head 'e9'"):
        tau.main([*argv[:4], *argv[6:8], *argv[8:-4], "--baseline", f"{tmp_path / 'e3.json'}:e9"])
    with pytest.raises(InvalidInputError, match="labelled 'e3' too"):
        tau.main([*alone[:-2], "--baseline", earlier])
    sampled = tau.main([*argv[:4], *argv[6:8], *argv[8:-4], "--temperatures", "1",
                        "--baseline", earlier])  # fmt: skip
    assert "T=0" not in sampled and sampled["greedy_outputs_equal_to_vanilla"] is None
    redrawn = tau.main([*alone[:-2], "--temperatures", "1", "--seed-offset", "1000"])
    assert redrawn["seed_offset"] == 1000  # another draw of every sampled decoding
    outcomes = [[(r["emitted"], r["forwards"]) for r in run["T=1"]["e3 eagle3 8:3:2"]["per_prompt"]]
                for run in (redrawn, results)]  # fmt: skip
    assert outcomes[0] != outcomes[1]
    # two earlier runs paired without decoding: the same figures as one run's comparison
    later_file = tmp_path / "e1.json"
    later_file.write_text(json.dumps(later))
    paired = tau.main(["--pair", earlier, f"{later_file}:e1", "--out", str(tmp_path / "p.json")])
    for setting in ("T=0", "T=1"):
        one_run = results[setting]["e1 eagle2 8:3:2"]["against_first"]
        by_kind = paired[setting]["8:3:2"].pop("by_kind")
        assert paired[setting]["8:3:2"] == {
            "first": results[setting]["e3 eagle3 8:3:2"]["tau"]["all"],
            "second": results[setting]["e1 eagle2 8:3:2"]["tau"]["all"],
            **{k: v for k, v in one_run.items() if k != "row"}}  # fmt: skip
        assert list(by_kind) == list(tau.KINDS)
        for kind, k in by_kind.items():
            rows = [results[setting][n]["tau"][kind]["tau"] for n in
                    ("e3 eagle3 8:3:2", "e1 eagle2 8:3:2")]  # fmt: skip
            assert k["difference"] == pytest.approx(rows[1] - rows[0])
            assert k["first_higher"] + k["second_higher"] <= 2
    with pytest.raises(InvalidInputError, match="no temperature and tree holds both"):
        tau.main(["--pair", earlier, f"{later_file}:e9"])
    # two draws of the first head pooled prompt by prompt (T = 1 only: the second draw has no T = 0)
    redrawn_file = tmp_path / "e3-1000.json"
    redrawn_file.write_text(json.dumps(redrawn))
    pooled = tau.main(["--pair", f"{tmp_path / 'e3.json'}+{redrawn_file}:e3", f"{later_file}:e1"])
    assert list(k for k in pooled if k.startswith("T=")) == ["T=1"]
    assert pooled["seed_offsets"][f"{tmp_path / 'e3.json'}+{redrawn_file}:e3"] == [0, 1000]
    draws = [run["T=1"]["e3 eagle3 8:3:2"]["per_prompt"] for run in (results, redrawn)]
    both = sum(r["emitted"] for d in draws for r in d) / sum(r["forwards"] for d in draws
                                                             for r in d)  # fmt: skip
    assert pooled["T=1"]["8:3:2"]["first"]["tau"] == pytest.approx(both)
    cycles = [r["accepted"] for d in draws for r in d]  # both draws' cycles, counted together
    reached = sum(sum(c[1:]) for c in cycles) / sum(sum(c) for c in cycles)
    assert pooled["T=1"]["8:3:2"]["first"]["accepted_at_least"][0] == pytest.approx(reached)
    assert pooled["T=1"]["8:3:2"]["difference"] == pytest.approx(
        results["T=1"]["e1 eagle2 8:3:2"]["tau"]["all"]["tau"] - both)
    with pytest.raises(InvalidInputError, match=r"seed offsets \[0, 0\] repeat"):
        tau.main(["--pair", f"{tmp_path / 'e3.json'}+{tmp_path / 'e3.json'}:e3", earlier])
    from minieagle.distill import CHAT_REQUESTS

    assert set(tau.CHAT_REQUESTS.values()) <= set(CHAT_REQUESTS)  # requests the heads met
    with pytest.raises(InvalidInputError, match="--eagle3 'x=/nowhere'"):
        tau.main([*argv[:4], "--eagle3", "x=/nowhere"])
    with pytest.raises(InvalidInputError, match="--trees '8:3'"):
        tau.main([*argv, "--trees", "8:3"])


def test_the_chat_tau_check_catches_an_output_that_differs_from_vanilla(scripts):
    """The lossless check in benchmarks/chat_tau.py can fail: a reference that is not the
    drafter's output is reported, naming the row and the prompt."""
    from minieagle import inference
    from minieagle.checkpoint import load_checkpoint
    from minieagle.drafters import build_drafter

    tau = importlib.import_module("chat_tau")
    pretrained = BENCHMARKS.parent / "minieagle" / "pretrained"
    params, config, _ = load_checkpoint(pretrained / "small", dtype=np.float32)
    target = (inference.prepare(params, config), config)
    rows = {"e3": lambda: build_drafter("eagle3", target=target, head="small-eagle3",
                                        total_tokens=8, depth=3, top_k=2)}  # fmt: skip
    prompts = [("questions", [5, 6, 7, 8])]
    with pytest.raises(AssertionError, match="e3: the greedy output of prompt 0 .questions."):
        tau.measure(target, prompts, rows, 0.0, 6, [], vanilla_tokens=[[1, 2, 3, 4, 5, 6]])


def test_the_chat_tau_interval_is_a_bootstrap_of_the_pooled_tau(scripts):
    """Equal prompts give a zero-width interval at their τ; a kind resampled within itself
    keeps its share (one prompt of each kind: no spread at all), and the interval lies between
    the extreme resamples around the pooled τ."""
    tau = importlib.import_module("chat_tau")
    assert tau.bootstrap_interval([6, 6, 6], [2, 2, 2], ["a", "a", "a"]) == (3.0, 3.0)
    low, high = tau.bootstrap_interval([4, 2], [2, 1], ["a", "b"])  # one prompt per kind
    assert low == high == pytest.approx(2.0)
    low, high = tau.bootstrap_interval([2, 8, 3, 3], [2, 2, 1, 1], ["a", "a", "b", "b"])
    assert 10 / 6 <= low < 16 / 6 < high <= 22 / 6  # the kinds' extremes: a's worst, a's best


def test_draft_vocab_coverage_counts_the_argmax_tokens_a_vocabulary_holds(scripts, tmp_path):
    """benchmarks/draft_vocab_coverage.py: the share of a held-out set's recorded argmax tokens
    inside a head's draft vocabulary (computed here by hand), and inside the vocabularies
    `eagle3.grow_draft_vocab` makes from the --counts-from run's tokens: never lower, and 1 at
    the target's whole vocabulary; a bad --grow is refused naming it."""
    from minieagle.checkpoint import load_checkpoint
    from minieagle.distill import DistillConfig, open_shards, run_distill
    from minieagle.heads.eagle3_io import load_eagle3_head

    coverage = importlib.import_module("draft_vocab_coverage")
    pretrained = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained"
    runs = {}
    for split in ("val", "ood"):
        runs[split] = tmp_path / split
        run_distill(DistillConfig(target=str(pretrained / "small"), out_dir=str(runs[split]),
                                  split=split, shards=1, shard_windows=6, window_tokens=33,
                                  prompt_tokens=8, temperature=1.0, keys=("final",),
                                  batch_size=6, max_train_chars=20_000),
                    progress=False)  # fmt: skip
    _, config, _ = load_checkpoint(pretrained / "small")
    _, _, vocab = load_eagle3_head(pretrained / "small-eagle3", target_config=config)
    V = config.vocab_size
    argv = ["--model", str(pretrained / "small"), "--head", f"h={pretrained / 'small-eagle3'}",
            "--grow", f"{vocab.size + 5},{V}", "--counts-from", str(runs["val"]),
            "--data", str(runs["ood"]), "--out", str(tmp_path / "c.json")]  # fmt: skip
    report = coverage.main(argv)
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(json.dumps(report))
    shard = open_shards([str(runs["ood"])])[0]
    top = np.asarray(shard.stats["target-top"][:], dtype=np.int64)[:, :-1]
    row = report["sets"]["ood"]["covered"]
    assert report["sets"]["ood"]["positions"] == top.size
    assert row["h"][0] == pytest.approx(np.asarray(vocab.t2d)[top].mean())
    assert row["h"][0] < 1.0  # the set reaches outside the head's vocabulary
    assert row["h"][0] <= row[f"h+{vocab.size + 5}"][0] <= row[f"h+{V}"][0] == 1.0
    assert report["sizes"] == {"h": vocab.size, f"h+{vocab.size + 5}": vocab.size + 5, f"h+{V}": V}
    with pytest.raises(InvalidInputError, match="--grow '5,x'"):
        coverage.main([*argv[:4], "--grow", "5,x", "--data", str(runs["ood"])])
    with pytest.raises(InvalidInputError, match="--grow needs --counts-from"):
        coverage.main([*argv[:4], "--grow", "400", "--data", str(runs["ood"])])


def test_every_benchmark_help_opens_with_its_docstrings_whole_first_paragraph():
    """A script's --help opens with the first paragraph of its docstring; cut at its first line,
    it stopped mid-sentence ("... with 95 % intervals: the")."""
    import ast
    import re

    checked = 0
    for path in sorted(BENCHMARKS.glob("*.py")):
        source = path.read_text()
        for use in re.findall(r"ArgumentParser\(description=(__doc__[^,)]*\)?[^,)]*)", source):
            checked += 1
            assert use == '__doc__.split("\\n\\n")[0]', (path.name, use)
            first = ast.get_docstring(ast.parse(source), clean=False).split("\n\n")[0]
            assert first.rstrip().endswith((".", ":", "?", ")", "`", '"')), (path.name, first)
    assert checked >= 10


def test_chat_tau_paired_sign_flip_test_tells_a_shift_from_noise(scripts):
    """`paired_difference`'s p_sign_flip: rows that differ by a shift on every prompt are told
    apart (p near 0), and two draws of the same law are below 0.05 about 5 % of the time, with
    p-values spread evenly, as a valid test's are."""
    tau = importlib.import_module("chat_tau")
    rng = np.random.default_rng(3)
    kinds = ["a"] * 18 + ["b"] * 18

    def draw():
        forwards = rng.integers(30, 50, size=36)
        emitted = np.round(forwards * (2.3 + rng.normal(0, 0.35, size=36)))
        return [{"kind": k, "emitted": int(e), "forwards": int(f)}
                for k, e, f in zip(kinds, emitted, forwards, strict=True)]  # fmt: skip

    base = draw()
    shifted = [{**r, "emitted": r["emitted"] + r["forwards"] // 2} for r in base]  # +0.5 each
    result = tau.paired_difference(base, shifted, resamples=2000)
    assert result["difference"] > 0.4 and result["p_sign_flip"] < 0.01
    assert result["second_higher"] == 36
    null = [tau.paired_difference(draw(), draw(), resamples=400, seed=i)["p_sign_flip"]
            for i in range(200)]  # fmt: skip
    rate = np.mean(np.array(null) < 0.05)
    assert 0.01 <= rate <= 0.11, rate  # 5 % expected: 10 of 200, sd 3; the band about 4 sd
    assert 0.3 < np.median(null) < 0.7  # uniform under the null
