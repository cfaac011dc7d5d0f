"""`recipegen images` node to node, offline: the agent's image-send / image-recv modes between loopback addresses
(127.0.0.2, .3 ... stand for the nodes' fabric addresses) against stand-in engines answering the Docker Engine
API on unix sockets; then how the helpers' images and sockets are chosen, and which path each target takes."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Iterator

import pytest

from generator.deploy.targets import Target
from generator.resolve.model import Node
from generator.transfer import agent, image_chain
from generator.transfer.image_chain import Copied, Helper, candidates, engine_socket, leg_error, repository

AGENT = str(Path(agent.__file__))


@dataclass
class Engine:
    """A stand-in engine: GET /images/get answers `image` chunked (cut after `cut_after` bytes if set);
    POST /images/load reads a chunked body and answers `load_answer` (or its own Loaded line)."""

    sock: Path
    image: bytes = b""
    cut_after: int | None = None
    load_answer: bytes | None = None
    loaded: list[bytes] = field(default_factory=list)  # bodies received whole (the final chunk came)
    cut_loads: int = 0  # bodies that ended without the final chunk


def handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/_ping":
                self._answer(200, b"OK")
                return
            assert self.path.startswith("/images/get?names="), self.path
            self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            data = engine.image if engine.cut_after is None else engine.image[:engine.cut_after]
            for i in range(0, len(data), 32768):
                part = data[i:i + 32768]
                self.wfile.write(b"%x\r\n" % len(part) + part + b"\r\n")
            if engine.cut_after is None:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True

        def do_POST(self) -> None:  # noqa: N802
            assert self.path.startswith("/images/load"), self.path
            assert self.headers["Transfer-Encoding"] == "chunked"
            body = bytearray()
            while True:
                line = self.rfile.readline()
                if not line:
                    engine.cut_loads += 1
                    return
                size = int(line.strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
            engine.loaded.append(bytes(body))
            self._answer(200, engine.load_answer or b'{"stream":"Loaded image: img:1\\n"}\r\n')

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[list[Engine]]:
    made: list[Engine] = []
    servers: list[socketserver.UnixStreamServer] = []

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    for i in range(4):
        engine = Engine(tmp_path / f"engine{i}.sock")
        server = Server(str(engine.sock), handler(engine))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(engine)
        servers.append(server)
    yield made
    for server in servers:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def last_json(out: bytes) -> dict[str, Any]:
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def run_chain(source: Engine, targets: list[Engine]) -> tuple[subprocess.CompletedProcess[bytes],
                                                                   list[tuple[int, dict[str, Any], str]]]:
    port = free_port()
    env = {**os.environ, "RECIPEGEN_ACCEPT_TIMEOUT": "30"}
    procs = []
    for i, engine in enumerate(targets):
        nxt = [f"127.0.0.{i + 3}", str(port)] if i + 1 < len(targets) else []
        procs.append(subprocess.Popen([sys.executable, AGENT, "image-recv", str(engine.sock), f"127.0.0.{i + 2}",
                                       str(port), *nxt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
    sender = subprocess.run([sys.executable, AGENT, "image-send", str(source.sock), "img:1", "127.0.0.2", str(port)],
                            capture_output=True, timeout=60)
    received = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        received.append((proc.returncode, last_json(out), err.decode()))
    return sender, received


def test_the_image_reaches_every_engine_in_the_chain_whole(engines: list[Engine]) -> None:
    source, *targets = engines
    source.image = os.urandom(3 << 20) + b"tail"
    sender, received = run_chain(source, targets)
    assert sender.returncode == 0, sender.stderr
    for (code, last, err), engine in zip(received, targets):
        assert code == 0, err
        assert last["done"] and last["error"] is None and last["loaded"] == ["img:1"]
        assert last["got"] == len(source.image)
        assert engine.loaded == [source.image]


def test_a_load_error_in_a_200_answer_fails_that_node_only(engines: list[Engine]) -> None:
    source, first, second, third = engines
    source.image = os.urandom(1 << 20)
    first.load_answer = b'{"errorDetail":{"message":"no space left on device"},"error":"no space left on device"}\n'
    _, received = run_chain(source, [first, second, third])
    code, last, _ = received[0]
    assert code == 1 and last["error"] == "no space left on device" and last["forward_error"] is None
    assert [r[0] for r in received[1:]] == [0, 0]
    assert second.loaded == third.loaded == [source.image]
    assert leg_error(code, last, "", None, None) == "docker load: no space left on device"


def test_a_source_cut_midway_loads_nothing_anywhere(engines: list[Engine]) -> None:
    """The engine's save stream ends early: the receivers see the sender's trailer say so and close their
    loads without the final chunk, so no engine takes a cut tar for a whole one."""
    source, first, second, _ = engines
    source.image = os.urandom(2 << 20)
    source.cut_after = 1 << 20
    sender, received = run_chain(source, [first, second])
    assert sender.returncode != 0
    for code, last, err in received:
        assert code == 1, err
        assert "the source failed" in last["error"]
    assert first.loaded == second.loaded == []


def test_an_unreachable_engine_fails_the_receiver_before_it_listens(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, AGENT, "image-recv", str(tmp_path / "none.sock"), "127.0.0.2",
                           str(free_port())], capture_output=True, timeout=30)
    assert done.returncode == 1 and b"listening" not in done.stdout
    assert f"cannot reach the engine at {tmp_path / 'none.sock'}" in done.stderr.decode()


@pytest.mark.parametrize("status, body, loaded, error", [
    (200, b'{"stream":"Loaded image: a/b:1\\n"}\r\n{"stream":"Loaded image ID: sha256:ab\\n"}', ["a/b:1", "sha256:ab"],
     None),
    (200, b'{"stream":"x"}{"errorDetail":{"message":"unexpected EOF"},"error":"unexpected EOF"}', [],
     "unexpected EOF"),
    (500, b'{"message":"invalid tar header"}\n', [], "invalid tar header"),
    (502, b"", [], "the engine answered 502"),
    (200, b"<html>proxy error</html>", [], "<html>proxy error</html>"),
], ids=["loaded", "error-in-200", "http-error", "empty-error", "not-json"])
def test_load_result(status: int, body: bytes, loaded: list[str], error: str | None) -> None:
    assert agent.load_result(status, body) == {"loaded": loaded, "error": error}


# --- choosing the helpers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("endpoint, path", [
    ("unix:///tmp/rgl/spark1/docker.sock", "/tmp/rgl/spark1/docker.sock"),
    ("unix:///var/run/docker.sock", "/var/run/docker.sock"),
    ("ssh://root@spark2", "/var/run/docker.sock"),
    ("ssh://me@10.0.0.2:2222", "/var/run/docker.sock"),
    ("tcp://10.0.0.2:2376", None),
    ("unix://docker.sock", None),
    ("", None),
])
def test_engine_socket(endpoint: str, path: str | None) -> None:
    found, why = engine_socket(endpoint)
    assert found == path
    assert bool(why) == (path is None)


def test_repository() -> None:
    assert repository("nvcr.io/nvidia/vllm:25.10-py3") == "nvcr.io/nvidia/vllm"
    assert repository("registry:5000/team/vllm") == "registry:5000/team/vllm"
    assert repository("registry:5000/team/vllm:1@sha256:ab") == "registry:5000/team/vllm"


LOCAL = [("other/tool:3", "sha256:t"), ("nvcr.io/nvidia/vllm:25.09-py3", "sha256:old"),
         ("<none>:<none>", "sha256:dangling"), ("scitrera/sglang:1", "sha256:sg"),
         ("vllm/vllm-openai:latest", "sha256:old"), ("busybox:latest", "sha256:bb")]


def test_candidates_same_repository_then_what_recipegen_ran_then_the_rest() -> None:
    got = candidates("nvcr.io/nvidia/vllm:25.10-py3", LOCAL, ["scitrera/sglang:1"], limit=10)
    # the other tag of the repository first; one name per image id; no dangling image
    assert got == ["nvcr.io/nvidia/vllm:25.09-py3", "scitrera/sglang:1", "other/tool:3", "busybox:latest"]


def test_candidates_the_image_itself_first_when_the_node_has_it() -> None:
    local = [*LOCAL, ("nvcr.io/nvidia/vllm:25.10-py3", "sha256:new")]
    assert candidates("nvcr.io/nvidia/vllm:25.10-py3", local, [], limit=2) == [
        "nvcr.io/nvidia/vllm:25.10-py3", "nvcr.io/nvidia/vllm:25.09-py3"]
    assert candidates("busybox", [("busybox:latest", "x")], [])[0] == "busybox:latest"


def test_candidates_are_bounded() -> None:
    many = [(f"img/{i}:1", f"sha256:{i}") for i in range(20)]
    assert len(candidates("x:1", many, [])) == image_chain.MAX_PROBES


class FakeHelpers:
    def container(self, node: Any, role: str, image: str, options: tuple[str, ...], *args: str,
                  **kw: Any) -> list[str]:
        return [image]


def fake_node(name: str) -> Target:
    return Target(Node(0, name, "10.0.0.1", name, name, "root", "/root", {}), Path("compose.yaml"))


def test_choose_helper_probes_until_python3_answers_and_stops_on_a_socket_fault(monkeypatch) -> None:
    tried: list[str] = []
    answers = {"a:1": (False, "a:1: exec: \"python3\": executable file not found"), "b:1": (True, "")}
    monkeypatch.setattr(image_chain, "context_endpoint", lambda ctx: "unix:///run/x.sock")
    monkeypatch.setattr(image_chain, "_local_images", lambda node: ([("a:1", "1"), ("b:1", "2"), ("c:1", "3")], []))
    monkeypatch.setattr(image_chain, "probe", lambda h, helper: (tried.append(helper.image), answers[helper.image])[1])
    got = image_chain.choose_helper(FakeHelpers(), fake_node("n"), "img:1")  # type: ignore[arg-type]
    assert isinstance(got, Helper) and got.image == "b:1" and got.socket == "/run/x.sock" and tried == ["a:1", "b:1"]
    tried.clear()
    answers["a:1"] = (False, "socket: the engine at /run/recipegen-engine.sock did not answer")
    got = image_chain.choose_helper(FakeHelpers(), fake_node("n"), "img:1")  # type: ignore[arg-type]
    assert isinstance(got, str) and "cannot use its engine socket /run/x.sock" in got and tried == ["a:1"]
    answers.update({"b:1": answers["a:1"], "a:1": (False, "a:1: no python3")})
    answers["b:1"] = (False, "b:1: no python3")
    answers["c:1"] = (False, "c:1: no python3")
    got = image_chain.choose_helper(FakeHelpers(), fake_node("n"), "img:1")  # type: ignore[arg-type]
    assert isinstance(got, str) and got.startswith("no image with python3 to run a helper (tried a:1, b:1, c:1")


def test_a_tcp_context_is_not_probed(monkeypatch) -> None:
    monkeypatch.setattr(image_chain, "context_endpoint", lambda ctx: "tcp://10.0.0.2:2376")
    monkeypatch.setattr(image_chain, "_local_images", lambda node: pytest.fail("listed images"))
    got = image_chain.choose_helper(FakeHelpers(), fake_node("n"), "img:1")  # type: ignore[arg-type]
    assert isinstance(got, str) and "tcp://10.0.0.2:2376" in got


# --- which path each target takes --------------------------------------------------------------------------

@pytest.fixture
def routes(monkeypatch):
    """Stub the helper choice, the chain and the fallback; record who went which way."""
    seen: dict[str, Any] = {"chain": [], "here": []}
    helpers: dict[str, Helper | str] = {}
    chain_errors: dict[str, str] = {}

    def chain(_h: Any, source: Helper, legs: list[Helper], image: str, port: int) -> dict[str, Copied]:
        seen["chain"].append([leg.node.name for leg in legs])
        return {leg.node.name: Copied(f"copied from {source.node.name} node to node", chain_errors.get(leg.node.name),
                                      10, 1.0) for leg in legs}

    def here(source: Target, targets: list[Target], image: str, why: dict[str, str]) -> dict[str, Copied]:
        seen["here"].append({t.name: why[t.name] for t in targets})
        return {t.name: Copied(f"through this machine ({why[t.name]})", None, 10, 1.0) for t in targets}

    monkeypatch.setattr(image_chain, "choose_helper", lambda h, node, image: helpers[node.name])
    monkeypatch.setattr(image_chain, "chain", chain)
    monkeypatch.setattr(image_chain, "through_here", here)
    return seen, helpers, chain_errors


def helper(name: str) -> Helper:
    return Helper(fake_node(name), "py:1", "/s")


def copy(*names: str) -> dict[str, Copied]:
    nodes = [fake_node(n) for n in names]
    return image_chain.copy_image(nodes[0], nodes[1:], "img:1", 29700)


def test_every_target_with_a_helper_goes_node_to_node(routes) -> None:
    seen, helpers, _ = routes
    helpers.update({n: helper(n) for n in ("s", "a", "b")})
    got = copy("s", "a", "b")
    assert seen == {"chain": [["a", "b"]], "here": []}
    assert all("node to node" in c.how for c in got.values())


def test_a_target_without_python3_goes_through_this_machine_the_others_node_to_node(routes) -> None:
    seen, helpers, _ = routes
    helpers.update({"s": helper("s"), "a": "no image with python3 to run a helper", "b": helper("b")})
    got = copy("s", "a", "b")
    assert seen["chain"] == [["b"]]
    assert seen["here"] == [{"a": "a cannot receive node to node: no image with python3 to run a helper"}]
    assert "through this machine (a cannot receive" in got["a"].how and "node to node" in got["b"].how


def test_a_source_that_cannot_send_sends_everything_through_this_machine(routes) -> None:
    seen, helpers, _ = routes
    helpers.update({"s": "its context endpoint tcp://x is not a unix socket or ssh", "a": helper("a")})
    got = copy("s", "a")
    assert seen["chain"] == []
    assert got["a"].how.startswith("through this machine (s cannot send node to node: its context endpoint tcp://x")


def test_a_failed_node_to_node_copy_is_retried_through_this_machine(routes) -> None:
    seen, helpers, errors = routes
    helpers.update({n: helper(n) for n in ("s", "a", "b")})
    errors["b"] = "the stream from a broke"
    got = copy("s", "a", "b")
    assert seen["here"][-1] == {"b": "node to node failed: the stream from a broke"}
    assert "node to node" in got["a"].how and "through this machine (node to node failed" in got["b"].how


@pytest.mark.parametrize("code, last, upstream, send_error, want", [
    (0, {"done": True, "error": None}, None, None, None),
    (1, {"done": True, "error": "bad tar"}, None, None, "docker load: bad tar"),
    (1, {}, "spark2", None, "the stream from spark2 broke"),
    (1, {}, None, "the engine cannot save img:1: No such image", "the source could not send: the engine cannot "
                                                                 "save img:1: No such image"),
    (125, {}, None, None, "docker: Error response from daemon: bind source path does not exist"),
])
def test_leg_error(code: int, last: dict[str, Any], upstream: str | None, send_error: str | None,
                   want: str | None) -> None:
    stderr = "docker: Error response from daemon: bind source path does not exist\n"
    assert leg_error(code, last, stderr, upstream, send_error) == want
