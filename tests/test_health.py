"""The head's healthcheck, run for real: the compose file's `test` command (python3 and its probe) against a
local engine stand-in that serves /health the way the recipe's args say (`--host`, `--port`, TLS with
`--ssl-certfile`). A probe that asks the wrong scheme, address or port, or that insists on verifying a
certificate which names the node's real host, fails here.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from generator.cli import main

CLUSTER = """\
name = "solo"
user = "spark"
gpu = "nvidia"
rdma = false
[[nodes]]
name = "n1"
address = "10.0.0.1"
context = "n1"
"""


def healthcheck(tmp_path: Path, engine: str, args: list[str]) -> list[str]:
    """Build a one-node recipe with these args; the head's healthcheck `test` argv (after "CMD")."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    folder = tmp_path / "recipes" / "r"
    folder.mkdir(parents=True)
    entrypoint = '\nentrypoint = ["python3", "-m", "sglang.launch_server"]' if engine == "sglang" else ""
    (folder / "recipe.toml").write_text(textwrap.dedent(f"""\
        engine = "{engine}"
        docker_image = "img"
        model = "m/m"{entrypoint}
        args = {args!r}
        """).replace("'", '"'))
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, ["build"], catch_exceptions=False)
    finally:
        os.chdir(previous)
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load((tmp_path / "out" / "r" / "n1" / "compose.yaml").read_text())
    test = doc["services"]["engine"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python3"]
    return test[1:]


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def engine(host: str, port: int, tls: tuple[Path, Path] | None = None):
    """An engine stand-in answering /health on (host, port) only, over TLS when given (cert, key)."""
    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = Server((host, port), Health)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def probe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The healthcheck as Docker runs it, with this interpreter as python3; no proxy may answer for it."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=30, env=env)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate naming a real host (not localhost), as a deployment's would."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=spark1.example.com", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_a_tls_head_is_probed_over_https_without_verifying_its_certificate(
        tmp_path: Path, certificate: tuple[Path, Path], engine_name: str):
    port = free_port("127.0.0.1")
    argv = healthcheck(tmp_path, engine_name, ["--port", str(port), "--ssl-certfile", "/certs/spark1.pem",
                                               "--ssl-keyfile=/certs/spark1.key"])
    assert argv[-1] == f"https://127.0.0.1:{port}/health"
    with engine("127.0.0.1", port, tls=certificate):
        assert probe(argv).returncode == 0, probe(argv).stderr
        # The plain probe fails against it: the scheme and the unverified context are what make it pass.
        plain = healthcheck(tmp_path / "plain", engine_name, ["--port", str(port)])
        assert probe(plain).returncode != 0
    assert probe(argv).returncode != 0  # and nothing answers once the engine is gone


@pytest.mark.parametrize("host, listen", [("127.0.0.2", "127.0.0.2"), ("0.0.0.0", "0.0.0.0"), ("::", "::1"),
                                          ("::1", "::1"), (None, "0.0.0.0")])
def test_the_probe_asks_the_engines_host_and_port(tmp_path: Path, host: str | None, listen: str):
    try:
        port = free_port(listen)
    except OSError:
        pytest.skip(f"this machine cannot listen on {listen}")
    args = ["--port", str(port)] + (["--host", host] if host else [])
    argv = healthcheck(tmp_path, "vllm", args)
    with engine(listen, port):
        result = probe(argv)
    assert result.returncode == 0, (argv[-1], result.stderr)


def test_up_asks_a_tls_head_over_https_without_verifying_its_certificate(
        tmp_path: Path, certificate: tuple[Path, Path]):
    """`recipegen up` waits for the head from the deploying machine: a head given a certificate is asked over
    https (over http it never looks ready, and `up` would time out on a head that serves)."""
    from generator.cli.deploy import compiled
    from generator.deploy import readiness

    port = free_port("127.0.0.1")
    healthcheck(tmp_path, "vllm", ["--port", str(port), "--ssl-certfile", "/certs/spark1.pem"])
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        dep = compiled("r", None, None)
    finally:
        os.chdir(previous)
    assert dep.url == f"https://{dep.head.node.ssh_host}:{port}"
    local = dep.url.replace(dep.head.node.ssh_host, "127.0.0.1")
    with engine("127.0.0.1", port, tls=certificate):
        assert readiness._get(f"{local}/health") == b""
        assert readiness._get(f"{local.replace('https:', 'http:')}/health") is None
