"""The data plane: weights (and images) moved node to node by helper containers, never through this machine."""
