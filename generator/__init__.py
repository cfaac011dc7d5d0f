"""recipegen: compile LLM-serving recipes into per-node Compose files and Swarm stacks, and deploy them.

The pipeline runs one way, one module per stage:
load (TOML with positions) -> validate (schema + lint) -> resolve (extends, cluster merge, defaults)
-> plan (typed per-node model) -> render (templates) -> verify (compose-spec) -> write.
"""

__version__ = "0.1.0"
