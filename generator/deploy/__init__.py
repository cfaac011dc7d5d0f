"""Deploy compiled recipes through the nodes' Docker contexts."""
