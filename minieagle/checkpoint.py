"""Checkpoints in the Hugging Face `LlamaForCausalLM` layout: `config.json`, `model.safetensors`
(HF tensor names, linear weights `[out, in]`) and an optional `tokenizer.json`.

`save_checkpoint` is atomic: it writes a complete sibling directory, fsyncs it, then swaps it into
place, so a crash leaves the old checkpoint or the new one, never a mixture. `load_checkpoint`
checks everything and says what is wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.model import param_shapes

if TYPE_CHECKING:
    from minieagle.tokenizer import Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
_STORAGE_DTYPES = ("float32", "float16", "float64")
# HF's LlamaConfig defaults, used when a config.json leaves a field out (they differ from ours).
_HF_DEFAULTS = {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 2048}
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
_TIED_HINT = (
    " (tie_word_embeddings=true means the LM head reuses model.embed_tokens.weight; "
    "drop lm_head.weight or set tie_word_embeddings=false)"
)
_UNTIED_HINT = (
    " (tie_word_embeddings=false means the LM head is its own tensor; set it to true "
    "if the head reuses model.embed_tokens.weight)"
)


def _minieagle_version() -> str:
    try:
        from importlib.metadata import version

        return version("minieagle")
    except Exception:  # not installed (running from a source tree)
        return "unknown"


def config_to_hf_dict(config: LlamaConfig, dtype: str = "float32") -> dict:
    """The `config.json` contents HF transformers writes for `config`: new and legacy spellings of
    the RoPE and dtype fields, so both transformers 4.x and 5.x read it."""
    d = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    d.update(dataclasses.asdict(config))
    d.update(hidden_act="silu", attention_bias=False, mlp_bias=False, pad_token_id=0)
    d["rope_parameters"] = {"rope_type": "default", "rope_theta": float(config.rope_theta)}
    d.update(rope_theta=float(config.rope_theta), rope_scaling=None)
    d.update(dtype=dtype, torch_dtype=dtype, minieagle_version=_minieagle_version())
    return d


def _rope_theta(d: dict) -> float | None:
    """rope_theta from either spelling: `rope_parameters` (transformers 5) or top-level (4.x)."""
    new, legacy, scaling = d.get("rope_parameters"), d.get("rope_theta"), d.get("rope_scaling")
    for key, rope in (("rope_parameters", new), ("rope_scaling", scaling)):
        if rope is None:
            continue
        if not isinstance(rope, dict):
            raise InvalidInputError(
                f"{key}={rope!r} should be a JSON object such as {{'rope_type': ...}}"
            )
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise InvalidInputError(
                f"{key} has rope_type={kind!r}; minieagle implements only 'default' RoPE "
                "(no linear/dynamic/yarn/llama3 scaling); pick a model without RoPE scaling"
            )
    theta = new.get("rope_theta") if new is not None else None
    if theta is not None and legacy is not None and float(theta) != float(legacy):
        raise InvalidInputError(
            f"rope_parameters.rope_theta={theta} disagrees with rope_theta={legacy}; "
            "delete one of them so the file says one thing"
        )
    theta = theta if theta is not None else legacy
    return None if theta is None else float(theta)


def config_from_hf_dict(d: dict) -> LlamaConfig:
    """A `LlamaConfig` from a HF `config.json` dict (either RoPE spelling; unknown keys ignored).

    Raises ValueError for anything minieagle cannot run exactly: another model_type or activation,
    attention/MLP biases, RoPE scaling."""
    if not isinstance(d, dict):
        raise InvalidInputError(f"config must be a JSON object, got {type(d).__name__}")
    checks = (("model_type", "llama"), ("hidden_act", "silu"))
    for key, want in checks:
        if d.get(key, want) != want:
            raise InvalidInputError(
                f"{key}={d[key]!r} is not supported; minieagle runs {key}={want!r}"
            )
    for key in ("attention_bias", "mlp_bias"):
        if d.get(key):
            raise InvalidInputError(f"{key}=true is not supported; minieagle's Llama has no biases")
    missing = [key for key in _REQUIRED if key not in d]
    if missing:
        raise InvalidInputError(
            f"config has no {', '.join(missing)}; add them (HF names) to config.json"
        )
    kwargs = dict(_HF_DEFAULTS)
    kwargs["num_key_value_heads"] = d.get("num_key_value_heads") or d.get("num_attention_heads")
    for field in dataclasses.fields(LlamaConfig):
        if d.get(field.name) is not None and field.name != "rope_theta":
            kwargs[field.name] = d[field.name]
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    theta = _rope_theta(d)
    if theta is not None:
        kwargs["rope_theta"] = theta
    for key in ("bos_token_id", "eos_token_id"):
        if key in kwargs and not isinstance(kwargs[key], int):
            raise InvalidInputError(f"{key}={kwargs[key]!r} must be a single integer token id")
    return LlamaConfig(**kwargs)


def validate_params(params: dict, config: LlamaConfig) -> None:
    """Check `params` has exactly the tensors of `config`, each floating, of the right shape, and
    finite. Raises ValueError listing every problem (names, shapes got/expected, NaN/inf counts)."""
    expected = param_shapes(config)
    problems = []
    for name, shape in expected.items():
        if name not in params:
            hint = _UNTIED_HINT if name == "lm_head.weight" else ""
            problems.append(f"missing tensor {name!r} of shape {shape}{hint}")
    for name, value in params.items():
        array = np.asarray(value)
        if name not in expected:
            tied_head = name == "lm_head.weight" and config.tie_word_embeddings
            hint = _TIED_HINT if tied_head else "; the config has no such parameter"
            problems.append(f"unexpected tensor {name!r} of shape {array.shape}{hint}")
        elif array.shape != expected[name]:
            problems.append(
                f"tensor {name!r} has shape {array.shape} but the config expects {expected[name]} "
                "(does the config match the weights?)"
            )
        elif not np.issubdtype(array.dtype, np.floating):
            problems.append(f"tensor {name!r} has dtype {array.dtype}; expected floating point")
        elif not np.isfinite(array).all():
            nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
            problems.append(f"tensor {name!r} has {nan} NaN and {inf} inf values")
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise InvalidInputError("; ".join(problems[:5]) + more)


def _fsync(path: Path) -> None:
    """Flush a file or (on POSIX) a directory entry to disk."""
    if path.is_dir() and os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_files(
    target: Path, params: dict, config: LlamaConfig, tokenizer, dtype: str, metadata: dict
) -> None:
    """Write the checkpoint files into the (new, empty) directory `target`."""
    (target / CONFIG_FILE).write_text(json.dumps(config_to_hf_dict(config, dtype), indent=2) + "\n")
    write_tensors(target / WEIGHTS_FILE, params, dtype, metadata)
    if tokenizer is not None:
        tokenizer.save(target / TOKENIZER_FILE)


def write_tensors(path: Path, tensors: dict, dtype: str, metadata: dict) -> None:
    """Save `tensors` cast to `dtype` as safetensors at `path`, refusing values that overflow."""
    # ascontiguousarray: safetensors writes a strided view's memory as if it were contiguous.
    with np.errstate(over="ignore"):
        cast = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in tensors.items()}
    for name, tensor in cast.items():
        if not np.isfinite(tensor).all():
            raise InvalidInputError(f"tensor {name!r} overflows {dtype}; save as float32 instead")
    save_file(cast, str(path), metadata=metadata)


def _swap_into_place(new: Path, directory: Path) -> None:
    """Rename `directory` aside, rename `new` into place, then delete the old one."""
    old = directory.with_name(f".{directory.name}.old-{uuid.uuid4().hex[:8]}")
    if directory.exists():
        os.rename(directory, old)
        try:
            os.rename(new, directory)
        except BaseException:
            os.rename(old, directory)
            raise
    else:
        os.rename(new, directory)
    _fsync(directory.parent)
    shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    directory,
    params: dict,
    config: LlamaConfig,
    tokenizer=None,
    *,
    dtype: str = "float32",
    metadata: dict | None = None,
) -> Path:
    """Write `params` (HF names, `[out, in]`) and `config` (and `tokenizer`) to `directory`.

    dtype: storage precision, one of float32/float16/float64. metadata: str -> str pairs for the
    safetensors header. An existing checkpoint at `directory` is replaced atomically as a whole;
    a directory holding other files is refused. Returns the directory."""
    dtype = np.dtype(dtype).name
    if dtype not in _STORAGE_DTYPES:
        raise InvalidInputError(f"dtype={dtype!r} is not one of {_STORAGE_DTYPES}; pass 'float32'")
    header = {"format": "np", "minieagle_version": _minieagle_version(), **(metadata or {})}
    bad = {k: v for k, v in header.items() if not (isinstance(k, str) and isinstance(v, str))}
    if bad:
        raise InvalidInputError(
            f"metadata {bad} is not str -> str; convert values with str() or json"
        )
    validate_params(params, config)
    return write_directory_atomically(
        directory,
        lambda new: _write_files(new, params, config, tokenizer, dtype, header),
        own_files=(CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE),
        kind="checkpoint",
    )


def write_directory_atomically(
    directory, write: Callable[[Path], None], *, own_files: tuple[str, ...], kind: str
) -> Path:
    """Replace `directory` as a whole by what `write(new_dir)` puts into a fresh sibling directory.

    The new files are fsynced, then swapped into place, so a crash leaves the old directory or
    the new one, never a mixture. A directory holding files other than `own_files` is refused
    (`kind` names what is saved, for that message). Returns the absolute directory."""
    directory = Path(directory).absolute()
    if directory.exists():
        if not directory.is_dir():
            raise InvalidInputError(f"{directory} is a file; pass a directory path for the {kind}")
        others = sorted({p.name for p in directory.iterdir()} - set(own_files))
        if others:
            raise InvalidInputError(
                f"{directory} holds files that are not part of a {kind} ({others}); saving "
                "replaces the whole directory, so move them out or choose another directory"
            )
    directory.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(prefix=f".{directory.name}.saving-", dir=directory.parent))
    try:
        write(new)
        os.chmod(new, 0o755)  # mkdtemp makes 0o700; a model directory reads like any other
        for child in new.iterdir():
            os.chmod(child, 0o644)
            _fsync(child)
        _fsync(new)
        _swap_into_place(new, directory)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    return directory


def _require_file(path: Path, fix: str) -> None:
    if not path.is_file():
        raise MissingFileError(f"checkpoint file {path} is missing; {fix}")


def load_checkpoint(
    directory, *, dtype=np.float32, with_tokenizer: bool = True
) -> tuple[dict[str, np.ndarray], LlamaConfig, Tokenizer | None]:
    """Read a checkpoint written by `save_checkpoint` (or HF, unsharded, without biases).

    Returns (params, config, tokenizer): params cast to `dtype` (None keeps the stored dtype),
    tokenizer None when absent or not requested. Raises FileNotFoundError or ValueError naming
    the file, the problem and the fix."""
    directory = Path(directory)
    if not directory.is_dir():
        leftovers = sorted(directory.parent.glob(f".{directory.name}.old-*"))
        hint = f"; an interrupted save left the previous one at {leftovers[0]}" if leftovers else ""
        raise MissingFileError(f"checkpoint directory {directory} does not exist{hint}")
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    _require_file(config_path, "copy the model's config.json there or re-save the checkpoint")
    try:
        config = config_from_hf_dict(json.loads(config_path.read_text()))
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"{config_path} is malformed JSON ({e}); fix or re-save it") from e
    except (ValueError, TypeError) as e:
        raise InvalidInputError(f"{config_path}: {e}") from e
    if (directory / "model.safetensors.index.json").exists():
        raise InvalidInputError(f"{directory} is sharded; minieagle reads a single {WEIGHTS_FILE}")
    _require_file(weights_path, "re-save the checkpoint with save_checkpoint")
    try:
        stored = load_file(str(weights_path))
    except (SafetensorError, TypeError, ValueError) as e:
        raise InvalidInputError(
            f"{weights_path} is truncated or corrupt ({e}); re-save or re-download it"
        ) from e
    try:
        validate_params(stored, config)
    except ValueError as e:
        raise InvalidInputError(f"{weights_path} does not match {config_path}: {e}") from e
    params = {k: v if dtype is None else v.astype(dtype, copy=False) for k, v in stored.items()}
    if not (with_tokenizer and (directory / TOKENIZER_FILE).is_file()):
        return params, config, None
    try:
        from minieagle.tokenizer import Tokenizer
    except ImportError:  # the tokenizer module is optional until it lands
        return params, config, None
    return params, config, Tokenizer.load(directory / TOKENIZER_FILE)
