"""The deploy backends behind one interface (`Backend`): Compose per node, or one Swarm stack."""

from __future__ import annotations

from generator.deploy.backends.base import Backend, Outcome, RankState
from generator.resolve.model import Cluster

__all__ = ["Backend", "Outcome", "RankState", "choose"]


def choose(swarm: bool, cluster: Cluster) -> Backend:
    """The one place that decides between Compose and Swarm."""
    if swarm:
        from generator.deploy.backends.swarm import SwarmBackend

        return SwarmBackend(cluster)
    from generator.deploy.backends.compose import ComposeBackend

    return ComposeBackend()
