"""GGUF model files for opt-in real-runtime runs: the tiny test models and the ``satbench models`` command."""
