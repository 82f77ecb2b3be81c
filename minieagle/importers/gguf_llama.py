"""Read a llama.cpp GGUF Llama into minieagle's parameters: HF names, linear weights `[out, in]`,
float32.

A GGUF file holds key/value metadata (the hyperparameters, the tokenizer) and tensors, each in its
own type: float (F32, F16, BF16) or quantized in blocks (Q8_0, Q4_1, the K-quants, ...). We read it
with the `gguf` package, llama.cpp's own NumPy reader, dequantize every tensor to float32, rename it
to its Hugging Face name and undo the one reordering llama.cpp's converter makes: the rows of the
query and key projections (`unpermute_rope_rows`). See docs/real_models.md.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from minieagle.checkpoint import value_problem
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.importers.base import ImportedLlama
from minieagle.model import layer_prefix, param_shapes

ARCHITECTURE = "llama"
# The tensor types `gguf.quants.dequantize` turns into float32 (all it handles, as of gguf 0.19);
# names the installed gguf lacks are skipped by `supported_types`.
SUPPORTED_TYPE_NAMES = (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS",
)  # fmt: skip
TOKENIZER_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.chat_template",
)
# GGUF tensor name -> HF name: the model-wide tensors, then those of decoder layer i (`blk.i.`).
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_RECONVERT = "re-download it, or re-convert the HF model with llama.cpp's convert_hf_to_gguf.py"


def supported_types() -> tuple[str, ...]:
    """The names of the GGUF tensor types this importer reads (those of SUPPORTED_TYPE_NAMES that
    the installed `gguf` package knows)."""
    from gguf import GGMLQuantizationType

    known = GGMLQuantizationType.__members__
    return tuple(name for name in SUPPORTED_TYPE_NAMES if name in known)


def hf_tensor_name(gguf_name: str) -> str | None:
    """The HF `LlamaForCausalLM` name of GGUF tensor `gguf_name` ("blk.3.attn_q.weight" ->
    "model.layers.3.self_attn.q_proj.weight"), or None for a tensor minieagle's Llama lacks."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    blk, index, rest = (gguf_name.split(".", 2) + ["", ""])[:3]
    if blk == "blk" and index.isdigit() and rest in _LAYER_NAMES:
        return layer_prefix(int(index)) + _LAYER_NAMES[rest]
    return None


def unpermute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's reordering of the rows of a query or key projection.

    weight: [n_heads * head_dim, d] as stored in the GGUF; n_heads: the query heads for `attn_q`,
    the key/value heads for `attn_k`. Returns the HF `q_proj`/`k_proj` weight, same shape.

    Why: RoPE rotates each head's query and key in pairs of dimensions. HF Llama pairs dimension
    i with i + head_dim/2 ("rotate half"); llama.cpp's kernel pairs 2i with 2i + 1. So that
    llama.cpp computes the same attention, its converter moves row j * head_dim/2 + i of each
    head (j in {0, 1}) to row 2i + j. Scores q·k are unchanged by the same reordering of q and
    k, so the file gives no sign of it: read without undoing it, the model runs and writes
    fluent-looking nonsense. Undo it per head: [n_heads, head_dim/2, 2, d] (GGUF row 2i + j at
    [h, i, j]) -> swap the two middle axes -> [n_heads, 2, head_dim/2, d] (HF row j * head_dim/2
    + i), then back to [n_heads * head_dim, d].
    """
    rows, d = weight.shape
    if rows % (2 * n_heads):
        raise InvalidInputError(
            f"a projection with {rows} rows cannot hold {n_heads} heads of even size; "
            "check llama.attention.head_count(_kv) in the file"
        )
    head_dim = rows // n_heads
    pairs = weight.reshape(n_heads, head_dim // 2, 2, d)  # [rows, d] -> [H, hd/2, 2, d]
    return pairs.swapaxes(1, 2).reshape(rows, d)  # -> [H, 2, hd/2, d] -> [rows, d]


def read_gguf_llama(path, *, progress: bool = True) -> ImportedLlama:
    """The Llama in the GGUF file `path`: float32 params (HF names, `[out, in]`, q/k rows in HF
    order), its LlamaConfig, its tokenizer metadata (`tokenizer_fields`) and, when
    minieagle can convert it, the HF tokenizer files. progress: a bar over the tensors.

    Raises MissingFileError when `path` is absent and InvalidInputError naming the file for a
    truncated or corrupt file, another architecture, an unsupported tensor type, missing or
    unknown tensors, shapes that disagree with the metadata, or NaN or infinite weights."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from tqdm import tqdm

    path = Path(path)
    if progress:  # the reader parses every token string first: seconds for a real vocabulary
        print(f"reading the metadata of {path}", file=sys.stderr)
    reader = _open(path, GGUFReader)
    metadata = {name: field.contents() for name, field in reader.fields.items()}
    arch = metadata.get("general.architecture")
    if arch != ARCHITECTURE:
        raise InvalidInputError(
            f"{path} holds a {arch!r} model (general.architecture); minieagle imports only "
            f"{ARCHITECTURE!r} (Llama-architecture) GGUF files: pick a Llama model such as SmolLM2"
        )
    tensors = {t.name: t for t in reader.tensors}
    config = config_from_gguf(metadata, tensors, path)
    pad = metadata.get("tokenizer.ggml.padding_token_id")  # checked against the vocab when saved
    pad_token_id = None if pad is None else int(pad)
    _check_tensors(path, tensors, config)

    params, types, shapes = {}, Counter(), param_shapes(config)
    heads = {"q_proj": config.num_attention_heads, "k_proj": config.num_key_value_heads}
    bar = tqdm(tensors.values(), desc=f"reading {path.name}", unit="tensor", disable=not progress)
    for t in bar:
        types[t.tensor_type.name] += 1
        try:
            weight = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        except (ValueError, NotImplementedError) as e:
            raise InvalidInputError(
                f"{path}: tensor {t.name!r} of type {t.tensor_type.name} cannot be read ({e}); "
                f"{_RECONVERT}"
            ) from e
        if np.may_share_memory(weight, reader.data):
            weight = weight.copy()  # F32 comes back as a view of the memory-mapped file
        name = hf_tensor_name(t.name)
        projection = name.split(".")[-2]
        if projection in heads:
            weight = unpermute_rope_rows(weight, heads[projection])
        if (problem := value_problem(t.name, weight)) is not None:
            raise InvalidInputError(f"{path}: {problem}; the file is corrupt: {_RECONVERT}")
        params[name] = weight.reshape(shapes[name])
    quantized = sorted(kind for kind in types if kind not in ("F32", "F16", "BF16"))
    notes = [f"read {path.name}: " + ", ".join(f"{n} x {k}" for k, n in sorted(types.items()))]
    if quantized:
        notes.append(
            f"dequantized {', '.join(quantized)} to float32: the model equals the quantized file, "
            "not the original float weights"
        )
    fields = tokenizer_fields(metadata)
    return ImportedLlama(
        params=params,
        config=config,
        source=path,
        files=_tokenizer_files(fields, notes),
        tokenizer_fields=fields,
        notes=notes,
        pad_token_id=pad_token_id,
    )


def _open(path: Path, reader_class):
    """GGUFReader(path), with every failure named: missing, unreadable, truncated or corrupt."""
    if not path.exists():
        raise MissingFileError(f"{path} does not exist; pass the path of a .gguf file")
    if not path.is_file():
        raise InvalidInputError(f"{path} is not a file; pass the path of a .gguf file")
    try:
        reader = reader_class(path)
    except PermissionError as e:
        raise InvalidInputError(
            f"cannot read {path}: permission denied; fix its permissions"
        ) from e
    except Exception as e:  # the reader reports a short or corrupt file in many ways
        raise InvalidInputError(
            f"{path} is not a readable GGUF file ({type(e).__name__}: {e}); it is truncated, "
            f"corrupt or another format: {_RECONVERT}"
        ) from e
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise InvalidInputError(
                f"{path} is truncated: tensor {t.name!r} ends at byte {t.data_offset + t.n_bytes} "
                f"but the file has {size} bytes; {_RECONVERT}"
            )
    return reader


def _scalar(metadata: dict, key: str, path: Path, default=None):
    """metadata[key] as one value. A per-layer list is accepted when all its entries agree
    (minieagle's layers are all alike); a missing key is an error unless a default is given."""
    value = metadata.get(key, default)
    if value is None:
        raise InvalidInputError(
            f"{path} has no {key!r} metadata, so it is not a complete Llama GGUF; {_RECONVERT}"
        )
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise InvalidInputError(
                f"{path}: {key} varies across layers ({value}); minieagle's Llama has identical "
                "layers, so it cannot run this model"
            )
        value = value[0]
    return value


def _float32_value(value) -> float:
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.9999997e-06)."""
    return float(str(np.float32(value)))  # NumPy prints the shortest decimal that round-trips


def config_from_gguf(metadata: dict, tensors: dict, path) -> LlamaConfig:
    """The LlamaConfig described by a Llama GGUF's metadata (plain values, `field.contents()`)
    and its tensors (name -> reader tensor: `output.weight` present means an untied LM head)."""
    path = Path(path)
    p = f"{ARCHITECTURE}."
    if metadata.get(p + "expert_count"):
        raise InvalidInputError(
            f"{path} is a mixture-of-experts model ({p}expert_count="
            f"{metadata[p + 'expert_count']}); minieagle runs dense Llamas only"
        )
    scaling = metadata.get(p + "rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in tensors:
        what = f"rope.scaling.type={scaling!r}" if scaling != "none" else "a rope_freqs tensor"
        raise InvalidInputError(
            f"{path} uses RoPE scaling ({what}); minieagle implements only plain RoPE: pick a "
            "model without it (e.g. Llama 2, SmolLM2; not Llama 3.1+)"
        )
    hidden = int(_scalar(metadata, p + "embedding_length", path))
    heads = int(_scalar(metadata, p + "attention.head_count", path))
    head_dim = int(_scalar(metadata, p + "attention.key_length", path, hidden // max(heads, 1)))
    for key in (p + "attention.value_length", p + "rope.dimension_count"):
        if int(_scalar(metadata, key, path, head_dim)) != head_dim:
            raise InvalidInputError(
                f"{path}: {key}={metadata[key]} differs from the head size {head_dim}; minieagle "
                "rotates and attends over whole heads, so it cannot run this model"
            )
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = len(tokens) if tokens else _scalar(metadata, p + "vocab_size", path)
    kwargs = dict(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(_scalar(metadata, p + "feed_forward_length", path)),
        num_hidden_layers=int(_scalar(metadata, p + "block_count", path)),
        num_attention_heads=heads,
        num_key_value_heads=int(_scalar(metadata, p + "attention.head_count_kv", path, heads)),
        head_dim=head_dim,
        max_position_embeddings=int(_scalar(metadata, p + "context_length", path)),
        rope_theta=_float32_value(_scalar(metadata, p + "rope.freq_base", path, 10000.0)),
        rms_norm_eps=_float32_value(
            _scalar(metadata, p + "attention.layer_norm_rms_epsilon", path)
        ),
        tie_word_embeddings="output.weight" not in tensors,
    )
    for field, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if metadata.get(f"tokenizer.ggml.{key}") is not None:
            kwargs[field] = int(metadata[f"tokenizer.ggml.{key}"])
    try:
        return LlamaConfig(**kwargs)
    except ValueError as e:
        raise InvalidInputError(f"{path}: its metadata gives an impossible Llama: {e}") from e


def _check_tensors(path: Path, tensors: dict, config: LlamaConfig) -> None:
    """Refuse unsupported types, tensors minieagle's Llama lacks, missing tensors, and shapes
    that disagree with the metadata, each naming the tensor."""
    supported = supported_types()
    for t in tensors.values():
        if t.tensor_type.name not in supported:
            raise InvalidInputError(
                f"{path}: tensor {t.name!r} has type {t.tensor_type.name}, which minieagle cannot "
                f"dequantize; supported: {', '.join(supported)}. Re-quantize the model to one "
                "of them (llama.cpp's llama-quantize), e.g. Q8_0"
            )
    unknown = sorted(name for name in tensors if hf_tensor_name(name) is None)
    if unknown:
        raise InvalidInputError(
            f"{path} holds tensors minieagle's Llama has no place for: {unknown[:5]}"
            f"{' ...' if len(unknown) > 5 else ''} (biases, extra norms and expert weights are "
            "not supported); pick a plain Llama model"
        )
    shapes = param_shapes(config)
    found = {hf_tensor_name(name): t for name, t in tensors.items()}
    missing = [name for name in shapes if name not in found]
    if missing:
        raise InvalidInputError(
            f"{path} lacks {len(missing)} tensors of a {config.num_hidden_layers}-layer Llama, "
            f"e.g. {missing[:3]}; the file is incomplete: {_RECONVERT}"
        )
    for name, t in found.items():
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))  # GGUF lists innermost first
        if name not in shapes:
            raise InvalidInputError(
                f"{path}: tensor {t.name!r} belongs to no layer of a {config.num_hidden_layers}-"
                f"layer Llama ({ARCHITECTURE}.block_count); {_RECONVERT}"
            )
        if shape != shapes[name]:
            raise InvalidInputError(
                f"{path}: tensor {t.name!r} has shape {shape} but the metadata implies "
                f"{shapes[name]}; {_RECONVERT}"
            )


def tokenizer_fields(metadata: dict) -> dict:
    """The tokenizer part of a GGUF's metadata (TOKENIZER_KEYS that it has) as plain Python
    values: lists of str/int, str, int, bool."""
    return {key: metadata[key] for key in TOKENIZER_KEYS if metadata.get(key) is not None}


def _tokenizer_files(fields: dict, notes: list[str]) -> dict[str, str]:
    """The HF tokenizer files (tokenizer.json, tokenizer_config.json) for a GGUF's tokenizer
    fields, as JSON text; {} (and a note saying why) when they cannot be made. The weights are
    imported either way: a model's own tokenizer.json can be copied in afterwards."""
    if not fields:
        notes.append("the file has no tokenizer metadata: no tokenizer.json written")
        return {}
    from minieagle.hf_tokenizer import tokenizer_files_from_gguf

    try:
        files = tokenizer_files_from_gguf(fields)
    except InvalidInputError as e:
        notes.append(
            f"no tokenizer.json written ({e}); copy the model's tokenizer.json and "
            "tokenizer_config.json from its Hugging Face repository into the directory"
        )
        return {}
    return {
        name: json.dumps(content, indent=2, ensure_ascii=False) for name, content in files.items()
    }
