"""Assignment (a): a Llama decoder layer, forward and backward, with the KV cache."""

TITLE = "A Llama decoder layer: forward, backward and the KV cache"
FILES = ("model.py",)
