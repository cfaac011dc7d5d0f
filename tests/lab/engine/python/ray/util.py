"""ray.util, the part launchers use."""

from __future__ import annotations


def get_node_ip_address() -> str:
    """This node's address, as Ray would pick it when --node-ip-address is not given."""
    from ray._cluster import node_ip

    return node_ip()
