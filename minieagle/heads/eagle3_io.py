"""Save and load an EAGLE-3 draft head in the layout SpecForge writes and SGLang and vLLM serve.

A head directory holds two files (docs/formats/eagle3-layout.md is the spec):

- `config.json`: a one-layer Llama config with `architectures: ["LlamaForCausalLMEagle3"]`,
  `draft_vocab_size` (N), `vocab_size` (the target's V), `target_hidden_size`, and
  `eagle_config.eagle_aux_hidden_state_layer_ids`; plus our own `minieagle_*` keys.
- `model.safetensors`: the head's tensors (`fc`, `midlayer.*`, `norm`, `lm_head`, `[out, in]`)
  and the draft vocabulary's buffers `d2t` (int64 [N]) and `t2d` (bool [V]).

Aux-layer numbering. minieagle's `aux_layers` name the target layers whose INPUT is fused (HF
`hidden_states[i]`). SpecForge and SGLang number the same tensors by the layer whose OUTPUT they
are, one less: aux layers (2, 6, 9) of a 12-layer target are written as ids [1, 5, 8], and SGLang
adds the 1 back before capturing. A file without our keys (SpecForge's) is read the same way.

One-feature heads (the ablation head of `Eagle3Config`, e.g. aux_layers = (L,), fc [d, d]) are
saved with our keys only: `minieagle_aux_layers` holds the one layer and there is no
`eagle_config`, because serving engines fuse exactly three layers. A UserWarning says so; minieagle
loads such a head, SGLang and vLLM cannot serve it (their fc is [d, 3d]).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from minieagle.backend import to_host
from minieagle.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    check_trained_for,
    config_from_hf_dict,
    config_to_hf_dict,
    config_value,
    read_config_json,
    read_tensors,
    storage_dtype,
    target_record,
    value_problem,
    write_directory_atomically,
    write_tensors,
)
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.heads.eagle3 import (
    DraftVocab,
    Eagle3Config,
    check_draft_vocab,
    default_aux_layers,
    head_param_shapes,
)

ARCHITECTURE = "LlamaForCausalLMEagle3"
AUX_KEY = "minieagle_aux_layers"  # input-of-layer numbering, as Eagle3Config.aux_layers
SERVING_AUX_KEY = "eagle_aux_hidden_state_layer_ids"  # inside eagle_config; output-of-layer
TIE_KEY = "minieagle_target_tie_word_embeddings"  # the target's; the head's own file says false
EMBED = "embed_tokens.weight"  # optional: SpecForge may store the target's embedding
_FIX_MISSING = "save the head with save_eagle3_head, or copy the head's files there"


def _serving_ids(aux_layers) -> list[int]:
    """SpecForge/SGLang's ids for minieagle's aux layers: the layers whose output is fused."""
    return [int(i) - 1 for i in aux_layers]


# ---------------------------------------------------------------------------- save


def _tensor_problems(tensors: dict, expected: dict[str, tuple[int, ...]]) -> list[str]:
    """What keeps `tensors` from being exactly the `expected` weights: missing or unexpected
    names, wrong shapes, non-floating dtypes, NaN/inf values."""
    problems = [
        f"missing tensor {n!r} of shape {s}" for n, s in expected.items() if n not in tensors
    ]
    for name, value in tensors.items():
        shape = tuple(np.shape(value))
        if name not in expected:
            problems.append(f"unexpected tensor {name!r} of shape {shape}")
        elif shape != expected[name]:
            problems.append(f"tensor {name!r} has shape {shape}, expected {expected[name]}")
        elif (problem := value_problem(name, value)) is not None:
            problems.append(problem)
    return problems


def _check_vocab_fits(vocab, cfg: Eagle3Config) -> None:
    if not isinstance(vocab, DraftVocab):
        raise InvalidInputError(
            f"vocab is a {type(vocab).__name__}; pass the DraftVocab the head was trained with "
            f"(DraftVocab.full({cfg.layer.vocab_size}) for the whole vocabulary)"
        )
    N, V = cfg.draft_vocab_size, cfg.layer.vocab_size
    if (vocab.size, vocab.target_vocab_size) != (N, V):
        raise InvalidInputError(
            f"the draft vocabulary maps {vocab.size} ids into {vocab.target_vocab_size}, but the "
            f"head has draft_vocab_size={N} over vocab_size={V}; pass the DraftVocab the head "
            "was trained with"
        )


def _hf_config(cfg: Eagle3Config, dtype: str) -> dict:
    """config.json: the head's layer in HF spelling plus what SpecForge/SGLang/vLLM read (no
    eagle_config for a one-feature head, which they cannot serve)."""
    layer = cfg.layer
    config = config_to_hf_dict(layer, dtype)
    eagle_config = {"use_aux_hidden_state": True}
    if cfg.num_features == 1:
        eagle_config = None
        warnings.warn(
            f"aux_layers={cfg.aux_layers} is one target feature; serving engines (SGLang, vLLM) "
            "fuse exactly three layers, so the head is saved with minieagle's keys only (no "
            "eagle_config): minieagle loads it, no serving engine can serve it",
            UserWarning,
            stacklevel=3,
        )
    elif cfg.aux_layers[0] >= 1:
        eagle_config[SERVING_AUX_KEY] = _serving_ids(cfg.aux_layers)
    else:
        warnings.warn(
            f"aux_layers={cfg.aux_layers} fuse the embeddings (the input of layer 0), which "
            f"SpecForge/SGLang ids cannot name (id -1); {SERVING_AUX_KEY} is left out, so a "
            "serving engine would capture its default layers instead: train with aux layers "
            ">= 1 to serve this head",
            UserWarning,
            stacklevel=3,
        )
    config.update(
        architectures=[ARCHITECTURE],
        num_hidden_layers=1,
        # The head's lm_head is its own [N, d] tensor; SGLang ties it to embed_tokens when true.
        tie_word_embeddings=False,
        draft_vocab_size=cfg.draft_vocab_size,
        target_hidden_size=layer.hidden_size,
        eagle_config=eagle_config,
        minieagle_head="eagle3",
        **{AUX_KEY: list(cfg.aux_layers), TIE_KEY: layer.tie_word_embeddings},
    )
    if eagle_config is None:
        del config["eagle_config"]
    return config


def save_eagle3_head(
    directory,
    head: dict,
    cfg: Eagle3Config,
    vocab: DraftVocab,
    *,
    target_dir=None,
    dtype: str = "float32",
) -> Path:
    """Write the head as `config.json` and `model.safetensors` (docs/formats/eagle3-layout.md),
    replacing `directory` atomically. Returns the absolute directory.

    head: the tensors of `head_param_shapes(cfg)`. vocab: the draft vocabulary (size N over the
    target's V), written as d2t and t2d. target_dir: the target it was trained for; its path and,
    when its weights exist, its `target_fingerprint` are recorded, so `load_eagle3_head(...,
    target_dir=)` can warn about a head used with another target. dtype: storage precision of
    the weights, one of float32/float16/float64.

    A one-feature head (cfg.num_features == 1, the paper's ablation head) is written with
    minieagle's keys only (no eagle_config), and a UserWarning says that serving engines, which
    fuse exactly three layers, cannot serve it."""
    dtype = storage_dtype(dtype)
    _check_vocab_fits(vocab, cfg)
    problems = _tensor_problems({k: to_host(v) for k, v in head.items()}, head_param_shapes(cfg))
    if problems:
        raise InvalidInputError(
            f"the head does not match its config: {'; '.join(problems)}; pass the tensors of "
            "head_param_shapes(cfg), as init_head(cfg) makes them"
        )
    config = _hf_config(cfg, dtype)
    if target_dir is not None:
        config.update(target_record(target_dir))
    tensors = _stored_tensors(head, vocab)

    def write(new: Path) -> None:
        (new / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        write_tensors(new / WEIGHTS_FILE, tensors, dtype)

    return write_directory_atomically(
        directory, write, own_files=(CONFIG_FILE, WEIGHTS_FILE), kind="EAGLE-3 head"
    )


# ---------------------------------------------------------------------------- load


def _int_list(key: str, value) -> list[int]:
    if not isinstance(value, list):
        raise InvalidInputError(
            f"{key}={value!r} must be a JSON array of three layer numbers, e.g. [1, 5, 8]"
        )
    return [config_value(f"{key}[{i}]", v, "integer") for i, v in enumerate(value)]


def _example_ids(L: int | None) -> str:
    """Ids to suggest in an error: the default layers of an L-layer target, in SpecForge's
    numbering, where that default exists (L >= 7)."""
    if L is None:
        return "[1, L//2 - 1, L - 4] for a target of L layers"
    if L < 7:
        return f"three increasing ids below {L - 1}"
    return str(_serving_ids(default_aux_layers(L)))


def _aux_layers(d: dict, target_config: LlamaConfig | None) -> tuple[int, ...]:
    """The fused layers (input-of-layer numbering) a config.json records: minieagle_aux_layers
    (three, or one for a one-feature head), else eagle_config's ids + 1, else the default
    (2, L//2, L-3) of target_config."""
    eagle_config = d.get("eagle_config")
    if eagle_config is not None and not isinstance(eagle_config, dict):
        raise InvalidInputError(
            f"eagle_config={eagle_config!r} must be a JSON object such as "
            f'{{"{SERVING_AUX_KEY}": [1, 5, 8]}}'
        )
    ids = (eagle_config or {}).get(SERVING_AUX_KEY)
    ids = None if ids is None else _int_list(f"eagle_config.{SERVING_AUX_KEY}", ids)
    ours = None if d.get(AUX_KEY) is None else _int_list(AUX_KEY, d[AUX_KEY])
    L = None if target_config is None else target_config.num_hidden_layers
    if ours is not None:
        if ids is not None and ids != _serving_ids(ours):
            raise InvalidInputError(
                f"{AUX_KEY}={ours} (inputs of layers) and eagle_config.{SERVING_AUX_KEY}={ids} "
                f"(outputs of layers) disagree: the ids should be {_serving_ids(ours)}; re-save "
                "the head with save_eagle3_head, or delete one of the two keys"
            )
        aux, key, source = ours, AUX_KEY, f"{AUX_KEY}={ours}"
    elif ids is not None:
        aux, key = [i + 1 for i in ids], f"eagle_config.{SERVING_AUX_KEY}"
        source = f"eagle_config.{SERVING_AUX_KEY}={ids} (outputs of layers, i.e. inputs of {aux})"
    elif L is not None:
        return default_aux_layers(L)
    else:
        raise InvalidInputError(
            f"the config records no aux layers (neither eagle_config.{SERVING_AUX_KEY} nor "
            f"{AUX_KEY}); pass target_config= so they default to (2, L//2, L-3) of its "
            "num_hidden_layers, as SGLang and vLLM do"
        )
    if key == AUX_KEY and len(aux) == 1:  # a one-feature head: any stream, the top one included
        if aux[0] < 0 or (L is not None and aux[0] > L):
            raise InvalidInputError(
                f"{source} names no stream of the target (0 to num_hidden_layers"
                f"{'' if L is None else f'={L}'}); fix {key}, or train an EAGLE-3 head for this "
                "target"
            )
        return tuple(aux)
    if len(aux) != 3 or aux[0] < 0 or not aux[0] < aux[1] < aux[2]:
        example = _example_ids(L) if key != AUX_KEY else "[2, L//2, L - 3] for L target layers"
        raise InvalidInputError(
            f"{source} must name three distinct target layers in increasing order (low, mid, "
            f"high); fix {key}, e.g. {example}"
        )
    if L is not None and aux[2] >= L:
        raise InvalidInputError(
            f"{source} reaches target layer {aux[2]}, but the target has num_hidden_layers={L}; "
            "this head was trained for a deeper target: train an EAGLE-3 head for this target"
        )
    return tuple(aux)


def _check_same_target(layer: LlamaConfig, target_config: LlamaConfig) -> None:
    """The head embeds tokens with the target's embedding and fuses its features: the widths
    and vocabularies must agree."""
    head = (layer.hidden_size, layer.vocab_size)
    target = (target_config.hidden_size, target_config.vocab_size)
    if head != target:
        raise InvalidInputError(
            f"this head is for another target: it reads features of hidden_size={head[0]} and "
            f"tokens of vocab_size={head[1]} (fc.weight [{head[0]}, {3 * head[0]}]), but the "
            f"target has hidden_size={target[0]} and vocab_size={target[1]} (fused features "
            f"[.., {3 * target[0]}]); train an EAGLE-3 head for this target"
        )


def _config_from_dict(d: dict, target_config: LlamaConfig | None) -> Eagle3Config:
    architectures = d.get("architectures")
    if not (isinstance(architectures, list) and ARCHITECTURE in architectures):
        raise InvalidInputError(
            f"architectures={architectures!r} is not an EAGLE-3 draft head; expected "
            f'["{ARCHITECTURE}"] (an EAGLE-1 head loads with minieagle.heads.eagle1.load_head)'
        )
    if d.get("minieagle_head", "eagle3") != "eagle3":
        raise InvalidInputError(
            f"minieagle_head={d['minieagle_head']!r} contradicts architectures="
            f'["{ARCHITECTURE}"]; a head saved by save_eagle3_head says "eagle3"'
        )
    layer = config_from_hf_dict(d)
    if layer.num_hidden_layers != 1:
        raise InvalidInputError(
            f"num_hidden_layers={layer.num_hidden_layers}; minieagle's EAGLE-3 head is one "
            "decoder layer (the `midlayer`), so it cannot load heads with additional layers"
        )
    if d.get("target_hidden_size") is not None:
        width = config_value("target_hidden_size", d["target_hidden_size"], "integer")
        if width != layer.hidden_size:
            raise InvalidInputError(
                f"target_hidden_size={width} differs from hidden_size={layer.hidden_size}; "
                "minieagle's EAGLE-3 head has its target's width, so it cannot load a head "
                "narrower or wider than its target"
            )
    V = layer.vocab_size
    N = d.get("draft_vocab_size")
    N = V if N is None else config_value("draft_vocab_size", N, "integer")
    tie = d.get(TIE_KEY)
    if tie is not None:
        tie = config_value(TIE_KEY, tie, "boolean")
    elif target_config is not None:
        tie = target_config.tie_word_embeddings
    else:
        tie = False
    if target_config is not None:
        _check_same_target(layer, target_config)
    aux = _aux_layers(d, target_config)
    return Eagle3Config(layer.replace(tie_word_embeddings=tie), aux, N)


def _head_and_vocab(stored: dict, cfg: Eagle3Config) -> tuple[dict, DraftVocab]:
    """Split the stored tensors into the head's weights (checked) and its DraftVocab."""
    N, V, d = cfg.draft_vocab_size, cfg.layer.vocab_size, cfg.layer.hidden_size
    weights = dict(stored)
    embed = weights.pop(EMBED, None)
    if embed is not None and embed.shape != (V, d):
        raise InvalidInputError(
            f"tensor {EMBED!r} has shape {embed.shape}, expected {(V, d)} (the target's "
            f"embedding); delete it (minieagle embeds with the target's own)"
        )
    buffers = {name: weights.pop(name) for name in ("d2t", "t2d") if name in weights}
    problems = _tensor_problems(weights, head_param_shapes(cfg))
    if problems:
        raise InvalidInputError(
            f"{'; '.join(problems)} (tensor names and [out, in] shapes: "
            "docs/formats/eagle3-layout.md)"
        )
    if not buffers:
        if N == V:
            return weights, DraftVocab.full(V)
        raise InvalidInputError(
            f"there is no d2t or t2d, but draft_vocab_size={N} is below vocab_size={V}: without "
            f"them lm_head's {N} rows cannot be mapped to target ids; copy d2t (int64 [{N}]) and "
            f"t2d (bool [{V}]) from the training run into the file, or re-save the head with "
            "save_eagle3_head(..., vocab)"
        )
    if len(buffers) == 1:
        (present,) = buffers
        missing = "t2d" if present == "d2t" else "d2t"
        raise InvalidInputError(
            f"there is {present} but no {missing}; a reduced vocabulary needs both (d2t int64 "
            f"[{N}], t2d bool [{V}]): re-save the head with save_eagle3_head(..., vocab)"
        )
    d2t, t2d = buffers["d2t"], buffers["t2d"]
    for name, tensor, want, shape in (("d2t", d2t, np.int64, (N,)), ("t2d", t2d, np.bool_, (V,))):
        if tensor.dtype != want or tensor.shape != shape:
            raise InvalidInputError(
                f"{name} is {tensor.dtype} {tensor.shape}; expected {np.dtype(want)} {shape} "
                f"(draft_vocab_size={N}, vocab_size={V}); re-save the head with "
                "save_eagle3_head(..., vocab)"
            )
    check_draft_vocab(d2t, t2d, V)
    return weights, DraftVocab.from_buffers(d2t, t2d)


def _stored_tensors(head: dict, vocab: DraftVocab) -> dict:
    """What model.safetensors holds: the head's weights (cast to the storage dtype when written)
    and the vocabulary buffers as the serving loaders read them, d2t int64 [N] and t2d bool [V]."""
    d2t = np.asarray(to_host(vocab.d2t), dtype=np.int64)
    return {**head, "d2t": d2t, "t2d": np.asarray(to_host(vocab.t2d), dtype=np.bool_)}


def load_eagle3_head(
    directory,
    *,
    dtype=np.float32,
    target_config: LlamaConfig | None = None,
    target_dir=None,
) -> tuple[dict[str, np.ndarray], Eagle3Config, DraftVocab]:
    """Read a head written by `save_eagle3_head` or by SpecForge: (head, cfg, vocab).

    head: the tensors of `head_param_shapes(cfg)` cast to `dtype` (None keeps the stored dtype);
    an `embed_tokens.weight` in the file is dropped (the head embeds with the target's). Aux
    layers come from `minieagle_aux_layers`, else `eagle_config.eagle_aux_hidden_state_layer_ids`
    + 1, else the default of `target_config`. target_config: the target's LlamaConfig; checks
    that hidden_size and vocab_size match and the aux layers exist. target_dir: the target's
    directory; warns (UserWarning) when the head records another target's fingerprint.

    Raises MissingFileError for a missing file and InvalidInputError naming the file, the value
    and the fix for anything else (architecture, types, tensor names/shapes/dtypes, NaN/inf,
    d2t/t2d that disagree or are missing for a reduced vocabulary, a head for another target)."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    d = read_config_json(config_path, fix_missing=_FIX_MISSING)
    try:
        cfg = _config_from_dict(d, target_config)
    except ValueError as e:
        raise InvalidInputError(f"{config_path}: {e}") from e
    stored = read_tensors(weights_path, fix_missing=_FIX_MISSING)
    try:
        head, vocab = _head_and_vocab(stored, cfg)
    except ValueError as e:
        raise InvalidInputError(f"{weights_path} does not match {config_path}: {e}") from e
    if target_dir is not None:
        check_trained_for(d, target_dir, kind="head")
    if dtype is not None:
        head = {name: value.astype(dtype, copy=False) for name, value in head.items()}
    return head, cfg, vocab


def export_official(head_dir, target_dir, out_dir, *, dtype: str = "float16") -> Path:
    """The head at `head_dir` in the form the official EAGLE code (SafeAILab/EAGLE, branch
    `main`, `EaModel.from_pretrained(use_eagle3=True, ...)`) loads correctly: the same
    config.json and tensors plus `embed_tokens.weight`, the target's embedding [V, d].
    Returns the absolute `out_dir`.

    That loader fetches the target's embedding only when config.json has no
    `target_hidden_size`, which SGLang and vLLM need and every head here carries; it then
    loads the head's file with strict=False, so a head without `embed_tokens.weight` drafts
    with a randomly initialised embedding, silently. In this form the file's embedding fills
    it (docs/formats/eagle3-layout.md, "Which form serves which engine"). `load_eagle3_head`
    reads the export too (it checks and drops the embedding).

    Refused, naming what to change: a head the official code cannot run as trained (one
    feature, or aux layers other than its fixed (2, L//2, L-3), or head_dim != hidden_size /
    num_attention_heads, which it derives), or a target other than the head's (width,
    vocabulary)."""
    from minieagle.checkpoint import target_embedding

    config = read_config_json(Path(head_dir) / CONFIG_FILE, fix_missing=_FIX_MISSING)
    hidden = config_value("hidden_size", config.get("hidden_size"), "integer")
    embedding, target_config = target_embedding(target_dir, hidden, head_dir)
    head, cfg, vocab = load_eagle3_head(
        head_dir, dtype=np.float32, target_config=target_config, target_dir=target_dir
    )
    fixed = default_aux_layers(target_config.num_hidden_layers)
    if tuple(cfg.aux_layers) != fixed:
        raise InvalidInputError(
            f"the head in {head_dir} fuses the inputs of target layers {list(cfg.aux_layers)}, "
            f"but the official EAGLE code always fuses {list(fixed)} (2, L//2, L-3 for this "
            f"{target_config.num_hidden_layers}-layer target): it would feed this head other "
            "features. Serve it with SGLang or vLLM, or train a head on the default layers"
        )
    layer = cfg.layer
    if layer.num_attention_heads * layer.head_dim != layer.hidden_size:
        raise InvalidInputError(
            f"the head has head_dim={layer.head_dim} x {layer.num_attention_heads} heads != "
            f"hidden_size={layer.hidden_size}; the official EAGLE code derives head_dim as "
            "hidden_size / num_attention_heads, so it cannot run this head: serve it with "
            "SGLang or vLLM"
        )
    dtype = storage_dtype(dtype)
    tensors = {**_stored_tensors(head, vocab), EMBED: embedding}

    def write(new: Path) -> None:
        exported = {**config, "dtype": dtype, "torch_dtype": dtype}
        (new / CONFIG_FILE).write_text(json.dumps(exported, indent=2) + "\n")
        write_tensors(new / WEIGHTS_FILE, tensors, dtype)

    return write_directory_atomically(
        out_dir, write, own_files=(CONFIG_FILE, WEIGHTS_FILE), kind="EAGLE-3 head"
    )
