"""minieagle: EAGLE speculative decoding (EAGLE-1/2/3) and its baselines, from scratch in NumPy."""

__version__ = "0.1.0"
