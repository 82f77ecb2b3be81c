"""The trained draft networks: one module per EAGLE generation that has its own head."""
