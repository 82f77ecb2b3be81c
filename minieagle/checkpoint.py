"""Checkpoints in the Hugging Face `LlamaForCausalLM` layout: `config.json`, `model.safetensors`
(HF tensor names, linear weights `[out, in]`) and an optional tokenizer: `tokenizer.json` and
`tokenizer_config.json` as HF has them, beside minieagle's own format in `minieagle_tokenizer.json`
(older checkpoints hold ours in `tokenizer.json`; `minieagle.hf_tokenizer.load_tokenizer`).

`save_checkpoint` is atomic: it writes a complete sibling directory, fsyncs it, then swaps it into
place, so a crash leaves the old checkpoint or the new one, never a mixture. `load_checkpoint`
checks everything and says what is wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import os
import shutil
import stat
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from minieagle.backend import to_host
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.hf_tokenizer import TOKENIZER_FILES  # what a saved tokenizer writes
from minieagle.model import param_shapes

if TYPE_CHECKING:
    from minieagle.hf_tokenizer import HFTokenizer
    from minieagle.tokenizer import Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
STORAGE_DTYPES = ("float32", "float16", "float64")  # what weights may be saved as
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


def minieagle_version() -> str:
    """The installed minieagle's version, recorded in every file it writes ("unknown" when run
    from a source tree that was never installed)."""
    try:
        from importlib.metadata import version

        return version("minieagle")
    except Exception:  # not installed (running from a source tree)
        return "unknown"


def config_to_hf_dict(config: LlamaConfig, dtype: str = "float32", pad_token_id=0) -> dict:
    """The `config.json` contents HF transformers writes for `config`: new and legacy spellings of
    the RoPE and dtype fields, so both transformers 4.x and 5.x read it. pad_token_id: the
    tokenizer's padding id (ours is 0; an imported model's its own, e.g. 2 for SmolLM2; None
    when it has none)."""
    d = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    d.update(dataclasses.asdict(config))
    d.update(hidden_act="silu", attention_bias=False, mlp_bias=False, pad_token_id=pad_token_id)
    d["rope_parameters"] = {"rope_type": "default", "rope_theta": float(config.rope_theta)}
    d.update(rope_theta=float(config.rope_theta), rope_scaling=None)
    d.update(dtype=dtype, torch_dtype=dtype, minieagle_version=minieagle_version())
    return d


# How to write each kind of config value, for the type errors below.
_JSON_SPELLING = {
    "integer": "write a whole number without quotes or decimal point, e.g. 128",
    "number": "write a number without quotes, e.g. 10000.0",
    "boolean": "write true or false without quotes",
}
_TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id")
_POSITIVE_NUMBERS = {"rope_theta": 10000.0, "rms_norm_eps": 1e-6}  # key -> a typical value


def _json_kind(value) -> str:
    """The JSON type `value` was read from: string, integer, number, boolean, array, ..."""
    kinds = ((bool, "boolean"), (numbers.Integral, "integer"), (numbers.Real, "number"))
    kinds += ((str, "string"), (list, "array"), (dict, "object"), (type(None), "null"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), type(value).__name__)


def config_value(key: str, value, want: str):
    """A config.json value as the Python type of a JSON `want` ("integer", "number" (finite) or
    "boolean"), or InvalidInputError naming the key, the value, its JSON type and how to write
    it: no string "false" read as true, no 128.0 read as a layer count."""
    kind = _json_kind(value)
    if kind == want or (want == "number" and kind == "integer"):
        if want == "number" and not math.isfinite(value):
            raise InvalidInputError(f"{key}={value!r} is not finite; {_JSON_SPELLING[want]}")
        return {"integer": int, "number": float, "boolean": bool}[want](value)
    what = f"a JSON {want}"
    if key in _TOKEN_ID_FIELDS:
        what = f"a single integer token id ({what})"
    raise InvalidInputError(
        f"{key}={value!r} must be {what}, not a JSON {kind}; {_JSON_SPELLING[want]}"
    )


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
    theta = None if theta is None else config_value("rope_parameters.rope_theta", theta, "number")
    legacy = None if legacy is None else config_value("rope_theta", legacy, "number")
    if theta is not None and legacy is not None and theta != legacy:
        raise InvalidInputError(
            f"rope_parameters.rope_theta={theta} disagrees with rope_theta={legacy}; "
            "delete one of them so the file says one thing"
        )
    return theta if theta is not None else legacy


def config_from_hf_dict(d: dict) -> LlamaConfig:
    """A `LlamaConfig` from a HF `config.json` dict (either RoPE spelling; unknown keys ignored).

    Every field must have its JSON type: integers for sizes and token ids (128, not "128" or
    128.0), numbers for rope_theta and the epsilons, booleans for tie_word_embeddings and the
    bias flags. Raises ValueError for anything minieagle cannot run exactly: another model_type
    or activation, attention/MLP biases, RoPE scaling, a value of the wrong type."""
    if not isinstance(d, dict):
        raise InvalidInputError(f"config must be a JSON object, got {type(d).__name__}")
    checks = (("model_type", "llama"), ("hidden_act", "silu"))
    for key, want in checks:
        if d.get(key, want) != want:
            raise InvalidInputError(
                f"{key}={d[key]!r} is not supported; minieagle runs {key}={want!r}"
            )
    for key in ("attention_bias", "mlp_bias"):
        if d.get(key) is not None and config_value(key, d[key], "boolean"):
            raise InvalidInputError(f"{key}=true is not supported; minieagle's Llama has no biases")
    missing = [key for key in _REQUIRED if key not in d]
    if missing:
        raise InvalidInputError(
            f"config has no {', '.join(missing)}; add them (HF names) to config.json"
        )
    kwargs = dict(_HF_DEFAULTS)
    json_types = {"int": "integer", "int | None": "integer", "float": "number", "bool": "boolean"}
    for field in dataclasses.fields(LlamaConfig):
        if d.get(field.name) is not None and field.name != "rope_theta":
            kwargs[field.name] = config_value(field.name, d[field.name], json_types[field.type])
    if d.get("num_key_value_heads") is None:
        kwargs["num_key_value_heads"] = kwargs.get("num_attention_heads")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    theta = _rope_theta(d)
    if theta is not None:
        kwargs["rope_theta"] = theta
    for key, typical in _POSITIVE_NUMBERS.items():
        if key in kwargs and kwargs[key] <= 0:
            raise InvalidInputError(f"{key}={kwargs[key]!r} must be positive, such as {typical}")
    return LlamaConfig(**kwargs)


def value_problem(name: str, tensor) -> str | None:
    """Why tensor `name` cannot be a weight (not floating point, or how many NaN and inf values
    it holds), or None. `validate_params` and the EAGLE head's checks share it."""
    array = np.asarray(tensor)
    if not np.issubdtype(array.dtype, np.floating):
        return f"tensor {name!r} has dtype {array.dtype}; expected floating point"
    if not np.isfinite(array).all():
        nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
        return f"tensor {name!r} has {nan} NaN and {inf} inf values"
    return None


def check_head_tensors(tensors: dict, expected: dict, what: str = "head") -> None:
    """A trained head must hold exactly the tensors `expected` ({name: shape}), each floating
    point and finite (a NaN would make every draft useless). Raises InvalidInputError naming
    every wrong tensor; `what` names the head in the message."""
    got = {name: tuple(np.shape(value)) for name, value in tensors.items()}
    if got != expected:
        wrong = sorted(n for n in expected.keys() | got.keys() if got.get(n) != expected.get(n))
        details = ", ".join(f"{n}: got {got.get(n)}, expected {expected.get(n)}" for n in wrong)
        raise InvalidInputError(f"{what} tensors do not match the config ({details})")
    problems = [p for name in expected if (p := value_problem(name, tensors[name])) is not None]
    if problems:
        raise InvalidInputError(f"{what} tensors are unusable: {'; '.join(problems)}")


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
        elif (problem := value_problem(name, array)) is not None:
            problems.append(problem)
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
    target: Path,
    params: dict,
    config: LlamaConfig,
    tokenizer,
    dtype: str,
    metadata: dict,
    pad_token_id: int | None,
) -> None:
    """Write the checkpoint files into the (new, empty) directory `target`."""
    config_json = config_to_hf_dict(config, dtype, pad_token_id=pad_token_id)
    (target / CONFIG_FILE).write_text(json.dumps(config_json, indent=2) + "\n")
    write_tensors(target / WEIGHTS_FILE, params, dtype, metadata)
    if tokenizer is not None:
        from minieagle.hf_tokenizer import write_tokenizer_files

        write_tokenizer_files(target, tokenizer)


def storage_dtype(dtype) -> str:
    """The name of a weight storage dtype, one of STORAGE_DTYPES, or a clear error."""
    try:
        name = np.dtype(dtype).name
    except TypeError:  # a name NumPy does not know (bfloat16 without ml_dtypes)
        name = str(dtype)
    if name not in STORAGE_DTYPES:
        raise InvalidInputError(f"dtype={name!r} is not one of {STORAGE_DTYPES}; pass 'float32'")
    return name


def write_tensors(path: Path, tensors: dict, dtype: str, metadata: dict | None = None) -> None:
    """Save `tensors` as safetensors at `path`: floating tensors cast to `dtype` (refusing values
    that overflow it), integer and bool buffers (EAGLE-3's d2t, t2d) as they are. The header
    carries `metadata`, the `minieagle_version` that wrote it, and the format tag "pt":
    transformers 4.x refuses any other tag ("np" included); files that earlier versions wrote
    with "np" still load here, which never reads it."""
    cast = {}
    with np.errstate(over="ignore"):
        for name, value in tensors.items():
            value = to_host(value)
            keep = not np.issubdtype(value.dtype, np.floating)
            # ascontiguousarray: safetensors writes a strided view's memory as if contiguous.
            cast[name] = np.ascontiguousarray(value, dtype=None if keep else dtype)
    for name, tensor in cast.items():
        if np.issubdtype(tensor.dtype, np.floating) and not np.isfinite(tensor).all():
            raise InvalidInputError(f"tensor {name!r} overflows {dtype}; save as float32 instead")
    header = {**(metadata or {}), "minieagle_version": minieagle_version(), "format": "pt"}
    save_file(cast, str(path), metadata=header)


def _swap_into_place(new: Path, directory: Path) -> None:
    """Rename `directory` aside (to `.NAME.old-<pid>-<random>`), rename `new` into place, then
    delete the old one; if the second rename fails, the old one is renamed back."""
    old = directory.with_name(f".{directory.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
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


def _abandoned_saves(directory: Path) -> list[Path]:
    """The temporary siblings (`.NAME.saving-<pid>-<random>`, `.NAME.old-<pid>-<random>`) that
    earlier saves of `directory` left when they crashed: those whose process is gone. Names
    without a pid (older versions) and this process's own names count as abandoned: a process
    saves one directory at a time, and a container restarts its trainer under the same pid."""
    abandoned = []
    for prefix in (f".{directory.name}.saving-", f".{directory.name}.old-"):
        for path in directory.parent.iterdir():
            if not path.name.startswith(prefix):
                continue
            pid, _, random = path.name[len(prefix) :].rpartition("-")
            if len(random) != 8 or not (pid == "" or pid.isdigit()):
                continue  # not a name a save gives
            if pid == "" or int(pid) == os.getpid() or not _process_alive(int(pid)):
                abandoned.append(path)
    return abandoned


def _process_alive(pid: int) -> bool:
    """Whether process `pid` exists (POSIX signal 0; another user's process counts). Where that
    cannot be asked (Windows), True: keep what cannot be checked."""
    if os.name != "posix":
        return True
    if pid <= 0:
        return False  # not a process id: kill would signal a process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, owned by another user
        return True
    return True


def save_checkpoint(
    directory,
    params: dict,
    config: LlamaConfig,
    tokenizer=None,
    *,
    dtype: str = "float32",
    metadata: dict | None = None,
    extra_files: dict[str, str | bytes] | None = None,
    pad_token_id: int | None = 0,
) -> Path:
    """Write `params` (HF names, `[out, in]`) and `config` (and `tokenizer`) to `directory`.

    dtype: storage precision, one of float32/float16/float64. metadata: str -> str pairs for the
    safetensors header. extra_files: file name -> contents written beside the weights (an imported
    model's tokenizer_config.json, its LICENSE). pad_token_id: the padding id config.json records
    when no `tokenizer` is given (an imported model's own, e.g. 2 for SmolLM2; None when it has
    none); with a tokenizer, config.json records the tokenizer's. An existing checkpoint at
    `directory` is replaced atomically as a whole; a directory holding other files is refused.
    Returns the directory."""
    dtype = storage_dtype(dtype)
    if tokenizer is not None:
        pad_token_id = tokenizer.pad_id
    if pad_token_id is not None and not 0 <= pad_token_id < config.vocab_size:
        raise InvalidInputError(
            f"pad_token_id={pad_token_id} is outside [0, vocab_size={config.vocab_size}); pass "
            "the tokenizer's padding id, or None for a model without one"
        )
    header = dict(metadata or {})
    bad = {k: v for k, v in header.items() if not (isinstance(k, str) and isinstance(v, str))}
    if bad:
        raise InvalidInputError(
            f"metadata {bad} is not str -> str; convert values with str() or json"
        )
    validate_params(params, config)
    extra_files = dict(extra_files or {})
    own = {CONFIG_FILE, WEIGHTS_FILE} | (set(TOKENIZER_FILES) if tokenizer is not None else set())
    bad = sorted(n for n in extra_files if n in own or n in ("", ".", "..") or Path(n).name != n)
    if bad:
        raise InvalidInputError(
            f"extra_files {bad} are not plain file names or clash with the checkpoint's own "
            f"{sorted(own)}; rename or drop them"
        )

    def write(new: Path) -> None:
        _write_files(new, params, config, tokenizer, dtype, header, pad_token_id)
        for name, contents in extra_files.items():
            data = contents.encode("utf-8") if isinstance(contents, str) else contents
            (new / name).write_bytes(data)

    return write_directory_atomically(
        directory,
        write,
        own_files=(CONFIG_FILE, WEIGHTS_FILE, *TOKENIZER_FILES, *extra_files),
        kind="checkpoint",
    )


def write_directory_atomically(
    directory, write: Callable[[Path], None], *, own_files: tuple[str, ...], kind: str
) -> Path:
    """Replace `directory` as a whole by what `write(new_dir)` puts into a fresh sibling directory.

    The new files are fsynced, then swapped into place, so a crash leaves the old directory or
    the new one, never a mixture. A directory holding files other than `own_files` is refused
    (`kind` names what is saved, for that message). Once the new directory is in place, what
    crashed saves of it left behind is deleted (`_abandoned_saves`). Returns the absolute
    directory."""
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
    prefix = f".{directory.name}.saving-{os.getpid()}-"  # the pid: is its owner still alive?
    new = Path(tempfile.mkdtemp(prefix=prefix, dir=directory.parent))
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
    for leftover in _abandoned_saves(directory):
        shutil.rmtree(leftover, ignore_errors=True)
    return directory


def _unreadable(path: Path, error: OSError) -> InvalidInputError:
    """The explained error for an OSError met while reading `path` (which exists)."""
    if isinstance(error, PermissionError):
        return InvalidInputError(
            f"cannot read {path}: permission denied; fix its permissions (chmod a+r on the "
            "file, a+rx on its directories) or run as a user who may read it"
        )
    return InvalidInputError(f"cannot read {path} ({error}); check the disk or re-download it")


def _require_file(path: Path, fix: str) -> None:
    """Refuse a `path` that is missing (MissingFileError ending in `fix`), is a directory or
    another non-file, or cannot even be looked at (permission denied)."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise MissingFileError(f"{path} is missing; {fix}") from None
    except OSError as e:
        raise _unreadable(path, e) from e
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise InvalidInputError(
            f"{path} is {what} where a file should be; move it aside, then {fix}"
        )


def read_config_json(path, *, fix_missing: str = "re-save or re-download it") -> dict:
    """The JSON object in the file `path` (a config.json), for checkpoints and heads alike.

    Raises MissingFileError (ending in `fix_missing`) when it is absent, and InvalidInputError
    naming the file when it is a directory, unreadable, malformed JSON or not a JSON object."""
    path = Path(path)
    _require_file(path, fix_missing)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise _unreadable(path, e) from e
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{path} is not UTF-8 text ({e}); fix or re-save it") from e
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"{path} is malformed JSON ({e}); fix or re-save it") from e
    if not isinstance(d, dict):
        raise InvalidInputError(
            f"{path} holds a JSON {_json_kind(d)}, not an object; a config.json is one "
            "{...} object of settings: fix or re-save it"
        )
    return d


@contextmanager
def _opened_tensors(path: Path, fix_missing: str) -> Iterator:
    """safe_open(path) with every failure explained: missing, unreadable, truncated, corrupt,
    or a dtype NumPy lacks (bfloat16)."""
    _require_file(path, fix_missing)
    try:
        with safe_open(str(path), framework="np") as f:
            yield f
    except OSError as e:
        raise _unreadable(path, e) from e
    except SafetensorError as e:
        raise InvalidInputError(
            f"{path} is truncated or corrupt ({e}); re-save or re-download it"
        ) from e
    except TypeError as e:  # safetensors' numpy reader on a dtype numpy lacks
        raise InvalidInputError(
            f"{path} holds tensors NumPy cannot read ({e}); convert them to float32 or "
            "float16 (e.g. in transformers: model.float().save_pretrained(...))"
        ) from e


def read_tensors(path, *, fix_missing: str = "re-save or re-download it") -> dict[str, np.ndarray]:
    """Every tensor in the safetensors file `path`, in its stored dtype: the one reader of
    checkpoints and heads. Raises MissingFileError (ending in `fix_missing`) when it is absent,
    InvalidInputError naming the file when it is a directory, unreadable, truncated or corrupt."""
    path = Path(path)
    with _opened_tensors(path, fix_missing) as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def read_tensor_metadata(path) -> dict[str, str]:
    """The str -> str metadata in the header of the safetensors file `path` (the `metadata` of
    `save_checkpoint`), without reading the tensors. Errors as `read_tensors`."""
    path = Path(path)
    with _opened_tensors(path, "re-save or re-download it") as f:
        return dict(f.metadata() or {})


# ---------------------------------------------------------------------------- trained for whom

TARGET_KEY = "minieagle_target"  # the target's directory, as given when training
FINGERPRINT_KEY = "minieagle_target_fingerprint"  # target_fingerprint of that target


def target_fingerprint(target_dir) -> str:
    """The identity of a target checkpoint's weights: the first 16 hex digits of the sha256 of
    its `model.safetensors` less the header's metadata: each tensor's entry (name, dtype, shape,
    byte range; JSON with sorted keys), then the data bytes. The metadata (version, import notes)
    is left out because safetensors writes it in no fixed order, so the same weights saved twice
    would otherwise differ, and because it does not change what the target computes. Read afresh
    on every call (a file may change)."""
    path = Path(target_dir) / WEIGHTS_FILE
    _require_file(path, "pass the directory of the target checkpoint")
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(length)) if length <= path.stat().st_size else None
            if not isinstance(header, dict):
                raise InvalidInputError(f"{path} has no safetensors header; re-save it")
            header.pop("__metadata__", None)
            digest.update(json.dumps(header, sort_keys=True).encode())
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise _unreadable(path, e) from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"{path} is truncated or corrupt ({e}); re-save it") from e
    return digest.hexdigest()[:16]


def target_record(target_dir) -> dict[str, str]:
    """What a head or draft model records about the target it was trained for: {TARGET_KEY:
    the directory, FINGERPRINT_KEY: its `target_fingerprint`} (the path alone when the directory
    holds no weights). `save_head` writes it into the head's config.json; for a draft model pass
    it as `save_checkpoint(..., metadata=...)`."""
    if not (Path(target_dir) / WEIGHTS_FILE).exists():
        return {TARGET_KEY: str(target_dir)}
    return {TARGET_KEY: str(target_dir), FINGERPRINT_KEY: target_fingerprint(target_dir)}


def target_embedding(target_dir, hidden_size: int, head_dir) -> tuple[np.ndarray, LlamaConfig]:
    """(`model.embed_tokens.weight` [V, d] as float32, its LlamaConfig) of the target checkpoint
    at `target_dir`, for a head export that carries the target's embedding (the official EAGLE
    code's form). Refuses a target whose width d is not the head's `hidden_size` (`head_dir`
    names the head in the message)."""
    params, config, _ = load_checkpoint(target_dir, with_tokenizer=False)
    if config.hidden_size != hidden_size:
        raise InvalidInputError(
            f"the head in {head_dir} has hidden_size={hidden_size} but the target in "
            f"{target_dir} has {config.hidden_size}; pass the target it was trained for"
        )
    return params["model.embed_tokens.weight"], config


def check_trained_for(
    trained, target_dir, *, kind: str = "model", stacklevel: int = 2
) -> bool | None:
    """Warn (UserWarning) when `trained` was trained for another target than `target_dir`.

    trained: a head's or draft model's directory (its config.json is read, then, when that
    records nothing, the metadata of its model.safetensors), or the dict it records (a parsed
    config.json, or `read_tensor_metadata`). kind names it in the warning ("head", "draft
    model"); stacklevel as in `warnings.warn` (2: the caller's line). Returns True when the
    fingerprints agree, False when they differ (after warning), None when `trained` records no
    fingerprint (nothing to compare: it loads silently)."""
    if isinstance(trained, dict):
        record = trained
    else:
        record = read_config_json(Path(trained) / CONFIG_FILE)
        if FINGERPRINT_KEY not in record:
            record = read_tensor_metadata(Path(trained) / WEIGHTS_FILE)
    recorded = record.get(FINGERPRINT_KEY)
    if recorded is None:
        return None
    actual = target_fingerprint(target_dir)
    if recorded == actual:
        return True
    warnings.warn(
        f"this {kind} was trained for {record.get(TARGET_KEY, 'another target')} (fingerprint "
        f"{recorded}), not {target_dir} ({actual}); acceptance will be poor — train a {kind} "
        "for this target",
        UserWarning,
        stacklevel=stacklevel,
    )
    return False


def _require_directory(directory: Path) -> None:
    """Refuse a checkpoint directory that is missing (naming the copy an interrupted save left
    behind, if any), is a file, or cannot be looked at."""
    try:
        mode = directory.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        leftovers = sorted(directory.parent.glob(f".{directory.name}.old-*"))
        hint = f"; an interrupted save left the previous one at {leftovers[0]}" if leftovers else ""
        raise MissingFileError(f"checkpoint directory {directory} does not exist{hint}") from None
    except OSError as e:
        raise _unreadable(directory, e) from e
    if not stat.S_ISDIR(mode):
        raise InvalidInputError(
            f"{directory} is a file, not a checkpoint directory; pass the directory holding "
            f"{CONFIG_FILE} and {WEIGHTS_FILE}"
        )


def load_checkpoint(
    directory, *, dtype=np.float32, with_tokenizer: bool = True
) -> tuple[dict[str, np.ndarray], LlamaConfig, Tokenizer | HFTokenizer | None]:
    """Read a checkpoint written by `save_checkpoint` (or HF, unsharded, without biases).

    Returns (params, config, tokenizer): params cast to `dtype` (None keeps the stored dtype),
    tokenizer (ours or an HF one, `load_tokenizer`) None when absent or not requested; one with
    more ids than config.vocab_size is refused. Raises FileNotFoundError or ValueError naming
    the file, the problem and the fix (missing, unreadable, truncated, malformed, mismatched)."""
    directory = Path(directory)
    _require_directory(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    d = read_config_json(
        config_path, fix_missing="copy the model's config.json there or re-save the checkpoint"
    )
    try:
        config = config_from_hf_dict(d)
    except (ValueError, TypeError) as e:
        raise InvalidInputError(f"{config_path}: {e}") from e
    if (directory / "model.safetensors.index.json").exists():
        raise InvalidInputError(f"{directory} is sharded; minieagle reads a single {WEIGHTS_FILE}")
    stored = read_tensors(weights_path, fix_missing="re-save the checkpoint with save_checkpoint")
    try:
        validate_params(stored, config)
    except ValueError as e:
        raise InvalidInputError(f"{weights_path} does not match {config_path}: {e}") from e
    params = {k: v if dtype is None else v.astype(dtype, copy=False) for k, v in stored.items()}
    if not with_tokenizer:
        return params, config, None
    from minieagle.hf_tokenizer import load_tokenizer

    return params, config, load_tokenizer(directory, vocab_size=config.vocab_size)
