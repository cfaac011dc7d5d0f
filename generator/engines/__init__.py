"""Engines: what vLLM, SGLang and Ray accept and need on each rank, from their own sources."""
