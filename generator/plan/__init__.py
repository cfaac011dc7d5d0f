"""Plan: one typed object per node, everything the renderer, explain and the deployer read."""
