"""Assignment (c): classic speculative decoding's draft-model drafter."""

TITLE = "The draft-model drafter: a chain from a small Llama, its KV cache rolled back"
FILES = ("drafters/draft_model.py",)
