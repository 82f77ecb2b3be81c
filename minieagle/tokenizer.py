"""A byte-level BPE tokenizer (Sennrich et al., 2016; byte-level as in GPT-2), trained by our code.

Token ids:

- 0, 1, 2: the special tokens `<|pad|>`, `<|bos|>`, `<|eos|>`;
- 3 .. 258: the 256 single bytes, id = 3 + byte value;
- 259 ..: the merges, in the order they were learned (merge i makes token 259 + i).

Text is first cut into chunks by a regular expression in the spirit of GPT-2 (`PATTERN`):
contractions, an optional space followed by a word (letters, underscores), numbers of one to
three digits, an optional space followed by a run of punctuation, newlines, and runs of other
whitespace. BPE merges never cross a chunk boundary, so a merge is never learned across a word
and the space before the next word, and encoding each chunk separately can be cached.

Any `str` that is valid Unicode (no unpaired surrogates) round-trips: `decode(encode(s)) == s`.
Special tokens are never produced from text: the characters `<|eos|>` in the text are encoded as
ordinary bytes. `decode` renders the special tokens as nothing (pad and bos are skipped, eos ends
nothing), so `decode(encode(s, add_bos=True, add_eos=True)) == s` as well.
"""

from __future__ import annotations

import heapq
import json
import operator
import os
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path

from tqdm import tqdm

from minieagle.errors import InvalidInputError, MissingFileError

FORMAT = "minieagle-byte-bpe-v1"
PATTERN = (
    r"(?<=[^\W\d])'(?:[sdmt]|ll|ve|re)(?![^\W\d])"  # contractions: it's, we'll (not 'string')
    r"| ?[^\W\d]+"  # optional space + a word: letters and underscores (identifiers stay whole)
    r"|\d{1,3}"  # numbers, at most three digits per chunk
    r"| ?[^\s\w]+"  # optional space + a punctuation run
    r"|\s*[\r\n]+"  # line breaks, with any trailing spaces of the line before
    r"|\s+(?!\S)"  # whitespace that leaves its last space to the next word (indentation)
    r"|\s+"
)
_NUM_SPECIAL = 3
_NUM_BASE = _NUM_SPECIAL + 256  # 259: first merged id
_ENCODE_CACHE_LIMIT = 1_000_000


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of `pair` in `ids`, left to right, by `new_id`."""
    first, second = pair
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == first and ids[i + 1] == second:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _is_id(value: object, vocab_size: int) -> bool:
    try:
        return 0 <= operator.index(value) < vocab_size
    except TypeError:
        return False


def _learn_merges(
    chunk_counts: dict[bytes, int], num_merges: int, show_progress: bool
) -> list[tuple[int, int]]:
    """The BPE merges, most frequent adjacent pair first; ties go to the lowest (left, right) ids.

    Pair counts are updated incrementally: `pair_chunks` maps a pair to the chunks that contain (or
    once contained) it, so a merge only revisits those chunks. A heap holds (-count, pair) entries;
    an entry whose count is out of date is discarded when it reaches the top.
    """
    chunks = [[_NUM_SPECIAL + b for b in chunk] for chunk in chunk_counts]
    weights = list(chunk_counts.values())
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    pair_chunks: dict[tuple[int, int], set[int]] = defaultdict(set)
    for index, ids in enumerate(chunks):
        for pair in pairwise(ids):
            pair_counts[pair] += weights[index]
            pair_chunks[pair].add(index)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[int, int]] = []
    progress = tqdm(total=num_merges, desc="BPE merges", disable=not show_progress)
    while len(merges) < num_merges:
        while heap and pair_counts.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)  # stale entry
        if not heap or -heap[0][0] < 2:
            break  # no pair occurs twice: further merges would only memorise single chunks
        _, best = heapq.heappop(heap)
        new_id = _NUM_BASE + len(merges)
        merges.append(best)
        changed: set[tuple[int, int]] = set()
        for index in pair_chunks.pop(best):
            ids = chunks[index]
            merged = _merge(ids, best, new_id)
            if len(merged) == len(ids):
                continue  # the pair left this chunk in an earlier merge
            weight = weights[index]
            for pair in pairwise(ids):
                pair_counts[pair] -= weight
                changed.add(pair)
            for pair in pairwise(merged):
                pair_counts[pair] += weight
                pair_chunks[pair].add(index)
                changed.add(pair)
            chunks[index] = merged
        for pair in changed:
            count = pair_counts[pair]
            if count > 0:
                heapq.heappush(heap, (-count, pair))
            else:
                del pair_counts[pair]
        progress.update(1)
    progress.close()
    return merges


class Tokenizer:
    """Byte-level BPE: 3 special tokens, 256 byte tokens, then the learned merges."""

    PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"

    def __init__(self, merges: Iterable[tuple[int, int]], pattern: str = PATTERN) -> None:
        self.merges: list[tuple[int, int]] = []
        self._bytes: list[bytes] = [b""] * _NUM_SPECIAL + [bytes([b]) for b in range(256)]
        for rank, pair in enumerate(merges):
            new_id = _NUM_BASE + rank
            first, second = (int(i) for i in pair)
            if not (_NUM_SPECIAL <= first < new_id and _NUM_SPECIAL <= second < new_id):
                raise InvalidInputError(
                    f"merge {rank} = {pair!r} refers to ids outside [{_NUM_SPECIAL}, {new_id}); "
                    "a merge may only join byte tokens and earlier merges"
                )
            self.merges.append((first, second))
            self._bytes.append(self._bytes[first] + self._bytes[second])
        self._ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self.pattern = pattern
        self._regex = re.compile(pattern)
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(cls, text: str, vocab_size: int, *, show_progress: bool = False) -> Tokenizer:
        """Learn `vocab_size - 259` merges from `text`.

        Training stops early, with a smaller vocabulary, if no adjacent pair occurs twice.
        """
        if not isinstance(vocab_size, int) or vocab_size < _NUM_BASE:
            raise InvalidInputError(
                f"vocab_size={vocab_size!r} is below {_NUM_BASE} = 3 special + 256 byte tokens; "
                "pass at least 259 (e.g. 512)"
            )
        regex = re.compile(PATTERN)
        chunk_counts = Counter(chunk.encode("utf-8") for chunk in regex.findall(text))
        # sorted so that training never depends on dict order
        ordered = dict(sorted(chunk_counts.items()))
        return cls(_learn_merges(ordered, vocab_size - _NUM_BASE, show_progress))

    @property
    def vocab_size(self) -> int:
        return len(self._bytes)

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    @property
    def eos_id(self) -> int:
        return 2

    @property
    def special_tokens(self) -> dict[str, int]:
        """The special tokens' names and ids. `encode` never produces them from text; a chat
        template that writes `<|bos|>` has it turned into id 1 by `minieagle.chat.encode_chat`."""
        return {self.PAD: 0, self.BOS: 1, self.EOS: 2}

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = [_NUM_SPECIAL + b for b in chunk.encode("utf-8")]
        while len(ids) >= 2:
            pair = min(pairwise(ids), key=lambda p: self._ranks.get(p, len(self._ranks)))
            rank = self._ranks.get(pair)
            if rank is None:
                break  # no adjacent pair was ever merged
            ids = _merge(ids, pair, _NUM_BASE + rank)
        return ids

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of `text`; merges are applied lowest rank first within each chunk."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}; decode bytes first")
        ids = [self.bos_id] if add_bos else []
        cache = self._cache
        if len(cache) > _ENCODE_CACHE_LIMIT:
            cache.clear()
        for chunk in self._regex.findall(text):
            chunk_ids = cache.get(chunk)
            if chunk_ids is None:
                try:
                    chunk_ids = cache[chunk] = self._encode_chunk(chunk)
                except UnicodeEncodeError as error:
                    raise InvalidInputError(
                        f"text has a character that is not valid UTF-8 ({error.reason}: "
                        f"{chunk[error.start : error.end]!r}); remove unpaired surrogates"
                    ) from None
            ids.extend(chunk_ids)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of `ids` joined; the special tokens contribute no bytes."""
        ids = list(ids)
        table = self._bytes
        try:
            joined = b"".join([table[i] for i in ids])
        except (IndexError, TypeError):
            joined = None
        if joined is None or (ids and min(ids) < 0):
            bad = next(i for i in ids if not _is_id(i, len(table)))
            raise InvalidInputError(
                f"token id {bad!r} is outside [0, vocab_size={len(table)}); was it produced by "
                "a tokenizer with a different vocabulary?"
            )
        return joined

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`: bytes joined, then UTF-8 with invalid sequences replaced by U+FFFD.

        `<|pad|>` and `<|bos|>` are skipped and `<|eos|>` renders as "" (decoding does not stop).
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, id: int) -> bytes:
        """The bytes of one token, for display; special tokens give their names."""
        if not 0 <= id < self.vocab_size:
            raise InvalidInputError(f"token id {id} is outside [0, vocab_size={self.vocab_size})")
        if id < _NUM_SPECIAL:
            return (self.PAD, self.BOS, self.EOS)[id].encode("ascii")
        return self._bytes[id]

    def token_text(self, id: int) -> str:
        """One token as readable text: its bytes decoded (invalid UTF-8 shown as U+FFFD), spaces
        as ·, newlines as \\n. For tables and plots of tokens."""
        text = self.token_bytes(int(id)).decode("utf-8", errors="replace")
        return text.replace(" ", "·").replace("\n", "\\n")

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer as JSON to `path`, atomically (temporary file, then rename)."""
        path = Path(path)
        payload = {
            "format": FORMAT,
            "special_tokens": [self.PAD, self.BOS, self.EOS],
            "pattern": self.pattern,
            "vocab_size": self.vocab_size,
            "merges": [list(pair) for pair in self.merges],
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(payload, file, separators=(",", ":"))
            os.chmod(tmp, 0o644)  # mkstemp creates 0o600; the file should read like any other
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Read a tokenizer written by `save`; errors say what is wrong with the file."""
        path = Path(path)
        if not path.is_file():
            raise MissingFileError(f"no tokenizer file at {path}; train one or check the path")
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise InvalidInputError(
                f"{path} is not valid JSON ({error}); was it truncated?"
            ) from None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            found = payload.get("format") if isinstance(payload, dict) else None
            hint = (
                " It looks like a Hugging Face tokenizer.json: a checkpoint keeps minieagle's "
                "own beside it in minieagle_tokenizer.json, and "
                "minieagle.hf_tokenizer.load_tokenizer(directory) reads either."
                if isinstance(payload, dict) and "model" in payload
                else ""
            )
            raise InvalidInputError(
                f"{path} has format={found!r}, expected {FORMAT!r}; save it with "
                f"minieagle.tokenizer.Tokenizer.save.{hint}"
            )
        try:
            tokenizer = cls([tuple(pair) for pair in payload["merges"]], payload["pattern"])
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidInputError(f"{path} is a malformed {FORMAT} file: {error!r}") from None
        if payload.get("vocab_size", tokenizer.vocab_size) != tokenizer.vocab_size:
            raise InvalidInputError(
                f"{path} declares vocab_size={payload['vocab_size']} but its merges give "
                f"{tokenizer.vocab_size}; the file is inconsistent, retrain or re-save it"
            )
        return tokenizer

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"
