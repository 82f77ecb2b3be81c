"""Read a local Hugging Face Llama directory into minieagle's parameters (float32, HF names).

A HF model directory holds `config.json`, the weights as one `model.safetensors` or as shards
listed by `model.safetensors.index.json` (`weight_map`: tensor name -> shard file), and the
tokenizer files. The names and `[out, in]` layout are already minieagle's; what needs doing is
gathering the shards, checking that they agree with the config, and widening float16/bfloat16
to float32.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from minieagle.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    config_from_hf_dict,
    config_value,
    read_config_json,
    value_problem,
)
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.importers.base import ImportedLlama
from minieagle.model import param_shapes

INDEX_FILE = "model.safetensors.index.json"
ARCHITECTURE = "LlamaForCausalLM"
# Copied beside the weights when the source has them.
SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "LICENSE",
)
_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")  # safetensors' names


def read_hf_llama(directory, *, progress: bool = True) -> ImportedLlama:
    """The Llama in the HF directory `directory`: float32 params, its LlamaConfig (from
    config.json, `checkpoint.config_from_hf_dict`) and the side files (SIDE_FILES) as text.
    progress: a bar over the tensors.

    Tensors minieagle's Llama has no use for (`rotary_emb.inv_freq`, a tied `lm_head.weight`)
    are dropped with a note; biases are refused, as are missing tensors, shapes that disagree
    with config.json, NaN or infinite weights, a shard index naming a missing file or a tensor
    its shard lacks; each error names the file and the tensor."""
    from tqdm import tqdm

    directory = Path(directory)
    if not directory.is_dir():
        raise MissingFileError(f"{directory} is not a directory; pass a HF model directory")
    config_path = directory / CONFIG_FILE
    d = read_config_json(config_path, fix_missing="a HF model directory has one: copy it there")
    architectures = d.get("architectures") or [ARCHITECTURE]
    if ARCHITECTURE not in architectures:
        raise InvalidInputError(
            f"{config_path} describes {architectures}; minieagle imports {ARCHITECTURE} only: "
            "pick a Llama model"
        )
    try:
        config = config_from_hf_dict(d)
    except ValueError as e:
        raise InvalidInputError(f"{config_path}: {e}") from e

    pad = d.get("pad_token_id")  # checked against the vocabulary when saved
    pad_token_id = None if pad is None else config_value("pad_token_id", pad, "integer")
    where = _weight_map(directory)  # tensor name -> shard path
    expected = param_shapes(config)
    notes, params = [], {}
    for name in sorted(set(where) - set(expected)):
        if name.endswith(".bias"):
            raise InvalidInputError(
                f"{where[name]} holds {name!r}: minieagle's Llama has no biases, so it cannot "
                "run this model exactly; pick a model without biases"
            )
        why = _drop_reason(name, config)
        notes.append(f"dropped {name} ({why})")
    missing = [name for name in expected if name not in where]
    if missing:
        raise InvalidInputError(
            f"{directory} lacks {len(missing)} tensors that {config_path.name} implies, e.g. "
            f"{missing[:3]}; check that config.json belongs to these weights"
        )
    bar = tqdm(
        expected.items(), desc=f"reading {directory.name}", unit="tensor", disable=not progress
    )
    for name, shape in bar:
        tensor = _read_tensor(where[name], name)
        if tensor.shape != shape:
            raise InvalidInputError(
                f"{where[name]}: tensor {name!r} has shape {tensor.shape} but {config_path} "
                f"implies {shape}; check that config.json belongs to these weights"
            )
        if (problem := value_problem(name, tensor)) is not None:
            raise InvalidInputError(
                f"{where[name]}: {problem}; the file is corrupt or the model was saved after its "
                "training diverged: re-download it, or save it again from a good copy"
            )
        params[name] = tensor
    files = {
        name: (directory / name).read_text(encoding="utf-8")
        for name in SIDE_FILES
        if (directory / name).is_file()
    }
    return ImportedLlama(
        params=params,
        config=config,
        source=directory,
        files=files,
        notes=notes,
        pad_token_id=pad_token_id,
    )


def _drop_reason(name: str, config) -> str:
    if name.endswith("rotary_emb.inv_freq"):
        return "RoPE frequencies, which minieagle computes from rope_theta"
    if name == "lm_head.weight" and config.tie_word_embeddings:
        return "tie_word_embeddings=true: the LM head reuses model.embed_tokens.weight"
    return "not a parameter of a Llama with this config"


def _weight_map(directory: Path) -> dict[str, Path]:
    """Every stored tensor's name -> the file holding it: one model.safetensors, or the shards
    of model.safetensors.index.json (each checked to exist and to hold what the index says)."""
    from safetensors import safe_open

    single, index_path = directory / WEIGHTS_FILE, directory / INDEX_FILE
    if single.is_file():
        return {name: single for name in _tensor_names(single, safe_open)}
    if not index_path.is_file():
        raise MissingFileError(
            f"{directory} has neither {WEIGHTS_FILE} nor {INDEX_FILE}; minieagle reads "
            "safetensors weights only (convert a pytorch_model.bin with transformers: "
            "model.save_pretrained(dir, safe_serialization=True))"
        )
    index = read_config_json(index_path)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise InvalidInputError(
            f"{index_path} has no weight_map object of tensor name -> shard file name; "
            "re-download or re-save the model"
        )
    where, held = {}, {}
    for shard_name in sorted(set(weight_map.values())):
        shard = directory / shard_name
        if Path(shard_name).name != shard_name or not shard.is_file():
            raise MissingFileError(
                f"{index_path} names the shard {shard_name}, but {shard} is missing; "
                "download that shard into the directory (or fix the index)"
            )
        held[shard_name] = set(_tensor_names(shard, safe_open))
    for name, shard_name in weight_map.items():
        if name not in held[shard_name]:
            raise InvalidInputError(
                f"{index_path} places {name!r} in {shard_name}, but {directory / shard_name} "
                "does not hold it; re-download the shards and the index together"
            )
        where[name] = directory / shard_name
    return where


def _tensor_names(path: Path, safe_open) -> list[str]:
    """The tensor names in the safetensors file `path`, or an error naming it."""
    from safetensors import SafetensorError

    try:
        with safe_open(str(path), framework="np") as f:
            return list(f.keys())
    except (SafetensorError, OSError) as e:
        raise InvalidInputError(
            f"{path} is not a readable safetensors file ({e}); it is truncated or corrupt: "
            "re-download it"
        ) from e


def _read_tensor(path: Path, name: str) -> np.ndarray:
    """Tensor `name` of the safetensors file `path` as float32. bfloat16, which NumPy lacks, is
    read from the raw bytes: a bfloat16 is the top 16 bits of the float32 it stands for."""
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        view = f.get_slice(name)
        dtype, shape = view.get_dtype(), tuple(view.get_shape())
        if dtype not in _FLOAT_DTYPES:
            raise InvalidInputError(
                f"{path}: tensor {name!r} is stored as {dtype}; minieagle imports float weights "
                f"({', '.join(_FLOAT_DTYPES)}): save the model unquantized"
            )
        if dtype != "BF16":
            return f.get_tensor(name).astype(np.float32)
    begin, end = _data_offsets(path)[name]
    with open(path, "rb") as file:
        file.seek(begin)
        raw = file.read(end - begin)
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16  # bf16 -> the float32 bits
    return bits.view(np.float32).reshape(shape)


def _data_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's byte range in the safetensors file `path`: an 8-byte little-endian header
    length, a JSON header of {name: {dtype, shape, data_offsets}}, then the data."""
    with open(path, "rb") as file:
        length = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(length))
    start = 8 + length
    return {
        name: (start + entry["data_offsets"][0], start + entry["data_offsets"][1])
        for name, entry in header.items()
        if name != "__metadata__"
    }
