"""Import real pretrained Llamas into minieagle checkpoints (see docs/real_models.md).

`import_model(source, out_dir)` reads a llama.cpp `.gguf` file (`gguf_llama`) or a local Hugging
Face Llama directory (`hf_llama`) and writes a minieagle checkpoint: `config.json`,
`model.safetensors` (HF names, float32 or float16) and the tokenizer files. `smollm2` fetches
SmolLM2-135M-Instruct and imports it once into the cache (`minieagle.cache`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.importers.base import ImportedLlama

__all__ = ["ImportedLlama", "import_model", "read_model"]


def read_model(source, *, progress: bool = True) -> ImportedLlama:
    """The Llama at `source`: a `.gguf` file or a Hugging Face directory (with config.json), read
    into memory as float32 (`ImportedLlama`). progress: a bar over the tensors."""
    source = Path(source)
    if source.is_dir():
        from minieagle.importers.hf_llama import read_hf_llama

        return read_hf_llama(source, progress=progress)
    if source.suffix.lower() == ".gguf":
        from minieagle.importers.gguf_llama import read_gguf_llama

        return read_gguf_llama(source, progress=progress)
    if not source.exists():
        raise MissingFileError(
            f"{source} does not exist; pass a .gguf file or a Hugging Face model directory"
        )
    raise InvalidInputError(
        f"{source} is neither a .gguf file nor a directory; pass a llama.cpp .gguf file or a "
        "Hugging Face Llama directory (config.json + model.safetensors)"
    )


def import_model(
    source, out_dir, *, dtype: str = "float32", progress: bool = True, extra_files=None
) -> Path:
    """Read the Llama at `source` (`read_model`) and write it to `out_dir` as a minieagle
    checkpoint (`checkpoint.save_checkpoint`: atomic; an existing checkpoint there is replaced).

    dtype: storage precision, "float32" or "float16". progress: a bar over the tensors, and the
    importer's notes (what was dropped or dequantized) on stderr. extra_files: more file name ->
    text to write beside it (a licence). The safetensors header records the source's name and
    those notes; config.json the source's padding id. Returns the absolute checkpoint
    directory."""
    from minieagle.checkpoint import save_checkpoint

    if dtype not in ("float32", "float16"):
        raise InvalidInputError(f"dtype={dtype!r} is not 'float32' or 'float16'; pass one of them")
    model = read_model(source, progress=progress)
    if progress:
        for note in model.notes:
            print(f"note: {note}", file=sys.stderr)
    metadata = {"minieagle_imported_from": model.source.name}
    metadata.update({f"minieagle_import_note_{i}": n for i, n in enumerate(model.notes)})
    return save_checkpoint(
        out_dir,
        model.params,
        model.config,
        dtype=dtype,
        metadata=metadata,
        extra_files={**model.files, **(extra_files or {})},
        pad_token_id=model.pad_token_id,
    )
