"""Deploy compiled recipes through the nodes' Docker contexts.

docker (the one runner every docker call goes through) -> targets (what a deployment is) -> preflight, images,
contexts, swarm_setup (findings about the nodes) -> backends (Compose, Swarm: one interface) -> actions (up, down,
ps, logs: results the CLI formats).
"""
