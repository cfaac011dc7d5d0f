"""generator/deploy/port.py's helper script, run here against real sockets of this machine (in the lab it runs in
a host-network container on a node: tests/test_lock_lab.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from generator.deploy.port import _FIND, PortHolder


def ask(port: int) -> dict[str, object]:
    said = subprocess.run([sys.executable, "-c", _FIND, str(port)], capture_output=True, text=True, check=True)
    return json.loads(said.stdout)


def test_the_helper_names_the_process_listening_on_a_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        found = ask(port)
        assert found["listening"] is True and found["pid"] == os.getpid()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound_only:  # bound, not listening: free
            bound_only.bind(("127.0.0.1", 0))
            assert ask(bound_only.getsockname()[1]) == {"listening": False}
    assert ask(port) == {"listening": False}


def test_a_holder_is_described_by_what_is_known_of_it():
    assert PortHolder(7, "python3", "a" * 64, "squatter").describe() == "container 'squatter' (process python3, pid 7)"
    assert PortHolder(7, "vllm", "a" * 64, "x-engine-1", "x").describe().startswith("container 'x-engine-1' of "
                                                                                    "recipe 'x'")
    assert PortHolder(9, "nginx").describe() == "process nginx (pid 9), not in a container of this engine"
    assert "could not name" in PortHolder().describe()
