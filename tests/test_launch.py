"""The launcher a node's container starts with (setup commands, mods, a Ray head's start and wait), run for real:
the script is taken from the generated compose file as Compose hands it to the container, then run by /bin/sh
with stand-in programs on PATH that record what they were given. Also: loading mods, and what a bad mod says.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from generator.cli import main
from helpers.watchwords import without_watch
from helpers.launch import CLUSTER, build  # noqa: F401 - moved to tests/helpers/


def project(tmp_path: Path, recipe: str, mods: dict[str, dict[str, str]] | None = None) -> Path:
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    folder = tmp_path / "recipes" / "r"
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(recipe))
    for name, files in (mods or {}).items():
        mod = tmp_path / "mods" / name
        mod.mkdir(parents=True)
        for rel, text in files.items():
            (mod / rel).write_text(text)
    return tmp_path


def compose(root: Path, node: str) -> dict:
    return yaml.safe_load((root / "out" / "r" / node / "compose.yaml").read_text())


def container_files(doc: dict) -> dict[str, str]:
    """What Compose puts into the container: target path -> content, `$$` unescaped as Compose does. A config
    whose content is empty is not copied at all (compose v2 injectFileReferences: `if content == "" { continue }`)."""
    service = doc["services"]["engine"]
    files = {ref["target"]: doc["configs"][ref["source"]]["content"].replace("$$", "$")
             for ref in service.get("configs", [])}
    return {target: text for target, text in files.items() if text}


def run_launcher(root: Path, node: str, tmp_path: Path, programs: dict[str, str],
                 extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the node's launcher as its container would: files in place (under a fake root), the service's
    command as arguments, stand-in programs first on PATH."""
    argv, options = launcher_process(root, node, tmp_path, programs, extra_env)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **options)


def launcher_process(root: Path, node: str, tmp_path: Path, programs: dict[str, str],
                     extra_env: dict[str, str] | None = None) -> tuple[list[str], dict]:
    """The argv and the subprocess options (cwd, env) that run the node's launcher; see run_launcher."""
    doc = compose(root, node)
    service = doc["services"]["engine"]
    assert without_watch(service["entrypoint"]) == ["/bin/sh", "/opt/recipegen/launch.sh"]
    fake_root = tmp_path / f"root-{node}"
    launcher = None
    for target, text in container_files(doc).items():
        if target == "/opt/recipegen/launch.sh":
            launcher = text
            continue
        path = fake_root / target.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    assert launcher is not None
    # The launcher names absolute container paths: point them into the fake root.
    launcher = launcher.replace("/workspace/", f"{fake_root}/workspace/")
    bin_dir = tmp_path / f"bin-{node}"
    bin_dir.mkdir(exist_ok=True)
    for name, text in programs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    workdir = tmp_path / f"work-{node}"
    workdir.mkdir(exist_ok=True)
    container_tmp = tmp_path / f"tmp-{node}"  # the container's /tmp: it outlives a restart, not a new container
    container_tmp.mkdir(exist_ok=True)
    launcher = launcher.replace("/tmp/.recipegen-prepared", f"{container_tmp}/.recipegen-prepared")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **(extra_env or {})}
    return ["/bin/sh", "-c", launcher, "launch.sh", *service["command"]], {"cwd": workdir, "env": env}


RECORD = '#!/bin/sh\nprintf "%s\\n" "$(basename "$0") $*" >> "$LOG"\n'


def test_setup_then_mods_then_the_engine_in_order(tmp_path: Path):
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        setup = ["echo 'step one' >> \\"$LOG\\"", "printf '%s\\\\n' \\"two $((1 + 1))\\" >> \\"$LOG\\""]
        mods = ["fix-a", "mods/fix-b"]
        args = ["--port", "8001"]
        """, mods={"fix-a": {"run.sh": '#!/bin/sh\nset -e\necho "mod a in $(basename "$PWD") ws=$WORKSPACE_DIR '
                                        '$(cat data.txt)" >> "$LOG"\n', "data.txt": "payload $HOME 'q'"},
                   "fix-b": {"run.sh": '#!/bin/sh\necho "mod b" >> "$LOG"\n'}})
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    result = run_launcher(root, "n1", tmp_path, {"vllm": RECORD}, {"LOG": str(log)})
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert lines == ["step one", "two 2", f"mod a in fix-a ws={tmp_path / 'work-n1'} payload $HOME 'q'", "mod b",
                     "vllm serve m/m --tensor-parallel-size 1 --pipeline-parallel-size 1 --port 8001"]
    assert "recipegen: setup 1/2" in result.stderr and "recipegen: mod 2/2: fix-b" in result.stderr

    # The same container restarted (restart: on-failure): setup and mods do not run twice, the engine does.
    again = run_launcher(root, "n1", tmp_path, {"vllm": RECORD}, {"LOG": str(log)})
    assert again.returncode == 0, again.stderr
    assert log.read_text().splitlines()[len(lines):] == [lines[-1]]
    assert "setup and mods already ran in this container" in again.stderr


def test_empty_mod_files_reach_the_container(tmp_path: Path):
    """Compose copies no config with empty content, so an empty file of a mod (`__init__.py`, a marker) is made
    by the launcher; in the Swarm stack the launcher writes every file anyway."""
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        mods = ["marker"]
        """, mods={"marker": {"run.sh": '#!/bin/sh\ntest -f __init__.py && test ! -s __init__.py && '
                                        'echo "empty file there" >> "$LOG"\n', "__init__.py": ""}})
    assert build(root).exit_code == 0
    doc = compose(root, "n1")
    assert all(c["content"] for c in doc["configs"].values())  # none that Compose would skip
    log = tmp_path / "log"
    result = run_launcher(root, "n1", tmp_path, {"vllm": RECORD}, {"LOG": str(log)})
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines()[0] == "empty file there"


def test_a_failing_step_fails_the_container_before_the_engine(tmp_path: Path):
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        setup = ["true"]
        mods = ["broken"]
        """, mods={"broken": {"run.sh": "#!/bin/sh\nexit 7\n"}})
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    result = run_launcher(root, "n1", tmp_path, {"vllm": RECORD}, {"LOG": str(log)})
    assert result.returncode != 0
    assert not log.exists()  # the engine never ran


FAKE_RAY_MODULE = """\
import json, os
def init(address=None, **kwargs):
    assert address == "auto", address
def nodes():
    return json.loads(os.environ["FAKE_RAY_NODES"])
def shutdown():
    pass
"""


def ray_project(tmp_path: Path) -> Path:
    return project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        required_nodes = 2
        tensor_parallel_size = 2
        distributed_backend = "ray"
        ray_args = ["--num-cpus", "4"]
        """)


def python_with_fake_ray(tmp_path: Path) -> str:
    lib = tmp_path / "fake-ray"
    lib.mkdir(exist_ok=True)
    (lib / "ray.py").write_text(FAKE_RAY_MODULE)
    return f"#!/bin/sh\nPYTHONPATH={lib} exec {sys.executable} \"$@\"\n"


@pytest.mark.parametrize("alive, joined", [(["10.0.0.1", "10.0.0.2"], True), (["10.0.0.1"], False)])
def test_the_ray_head_waits_for_every_worker(tmp_path: Path, alive: list[str], joined: bool):
    root = ray_project(tmp_path)
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    nodes = json.dumps([{"NodeManagerAddress": a, "Alive": True} for a in alive]
                       + [{"NodeManagerAddress": "10.0.0.2", "Alive": False}])
    result = run_launcher(root, "n1", tmp_path, {"ray": RECORD, "vllm": RECORD,
                                                 "python3": python_with_fake_ray(tmp_path)},
                          {"LOG": str(log), "FAKE_RAY_NODES": nodes})
    calls = log.read_text().splitlines()
    assert calls[0] == "ray start --head --port=6379 --node-ip-address=10.0.0.1 --num-cpus 4"
    if joined:
        assert result.returncode == 0, result.stderr
        assert calls[1].startswith("vllm serve m/m ")
    else:
        assert result.returncode != 0 and len(calls) == 1  # the engine never started
        assert "not joined after 3s: n2 (10.0.0.2)" in result.stderr


def test_each_ray_worker_keeps_its_own_per_node_values(tmp_path: Path):
    root = ray_project(tmp_path)
    assert build(root).exit_code == 0
    for node, address in (("n1", "10.0.0.1"), ("n2", "10.0.0.2")):
        doc = compose(root, node)
        env = doc["services"]["engine"]["environment"]
        assert env["RAY_NODE_IP_ADDRESS"] == env["RAY_OVERRIDE_NODE_IP_ADDRESS"] == address
        names = json.loads(container_files(doc)["/root/.config/vllm/ray_non_carry_over_env_vars.json"])
        # n2 names its own NIC: the head's (unset) must not be copied over it; the addresses differ per node.
        assert names == sorted(["NCCL_SOCKET_IFNAME", "RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS",
                                "VLLM_HOST_IP"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def loopback_ray_project(tmp_path: Path, port: int, join_timeout: str) -> Path:
    """A two-node Ray recipe whose head is this machine's loopback, so a test can play the head's Ray port."""
    cluster = (CLUSTER.replace('"10.0.0.1"', '"127.0.0.1"').replace('"10.0.0.2"', '"127.0.0.2"')
               .replace('ray_join_timeout = "3s"', f'ray_join_timeout = "{join_timeout}"\nray_port = {port}'))
    root = ray_project(tmp_path)
    (root / "cluster.toml").write_text(cluster)
    return root


@contextlib.contextmanager
def head_port(port: int, delay: float):
    """The head's Ray port: closed for `delay` seconds (the head pulls, runs setup and mods), then listening."""
    stop = threading.Event()

    def serve() -> None:
        if stop.wait(delay):
            return
        with socket.create_server(("127.0.0.1", port)) as server:
            server.settimeout(0.1)
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    server.accept()[0].close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# `ray start` that fails (as the real one does when the head's GCS does not answer) the first $FAILS times.
FLAKY_RAY = RECORD + 'n=$(wc -l < "$LOG"); [ "$n" -gt "$FAILS" ] || exit 3\n'


def test_a_ray_worker_waits_for_a_late_head_and_joins(tmp_path: Path):
    port = free_port()
    root = loopback_ray_project(tmp_path, port, "60s")
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    started = time.monotonic()
    with head_port(port, 2.5):
        result = run_launcher(root, "n2", tmp_path, {"ray": FLAKY_RAY}, {"LOG": str(log), "FAILS": "1"})
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    join = f"ray start --block --address=127.0.0.1:{port} --node-ip-address=127.0.0.2 --num-cpus 4"
    assert log.read_text().splitlines() == [join, join]  # the first `ray start` failed and was run again
    assert took >= 2.5  # not before the head's port opened
    assert f"waiting for the Ray head at 127.0.0.1:{port}" in result.stderr
    assert "`ray start` exited with status 3; trying again" in result.stderr


@pytest.mark.parametrize("fails", [None, "99"])
def test_a_ray_worker_gives_up_after_ray_join_timeout(tmp_path: Path, fails: str | None):
    """No head (its port never opens), or a head `ray start` never joins: one line naming the head and the
    seconds waited, at ray_join_timeout, not at the test's 60 s."""
    port = free_port()
    root = loopback_ray_project(tmp_path, port, "3s")
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    started = time.monotonic()
    with head_port(port, 0 if fails else 1000):
        result = run_launcher(root, "n2", tmp_path, {"ray": FLAKY_RAY}, {"LOG": str(log), "FAILS": fails or "0"})
    took = time.monotonic() - started
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    why = "`ray start` exited with status 3" if fails else "its port accepted no connection"
    found = re.fullmatch(rf"recipegen: no Ray head to join at 127\.0\.0\.1:{port} after (\d+)s "
                         rf"\(ray_join_timeout 3s\): {re.escape(why)}", last)
    assert found, result.stderr
    assert 3 <= int(found[1]) <= took + 1  # the seconds it really waited
    assert took < 15  # gave up at the join timeout (a retry may run past it), not at the test's 60 s
    if fails:
        assert len(log.read_text().splitlines()) >= 1
    else:
        assert not log.exists()  # `ray start` never ran without a head


def test_docker_stop_reaches_a_joined_ray_worker(tmp_path: Path):
    """`ray start --block` runs as the launcher's child: docker stop's SIGTERM to PID 1 must reach it (else the
    rank is killed after stop_grace_period), and a stopped worker must not join again."""
    port = free_port()
    root = loopback_ray_project(tmp_path, port, "60s")
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    blocking_ray = RECORD + 'trap \'echo "ray got TERM" >> "$LOG"; exit 0\' TERM\nwhile :; do sleep 0.1; done\n'
    argv, options = launcher_process(root, "n2", tmp_path, {"ray": blocking_ray}, {"LOG": str(log)})
    with head_port(port, 0):
        launcher = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, **options)
        try:
            deadline = time.monotonic() + 20
            while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert log.exists(), "ray start never ran"
            launcher.send_signal(signal.SIGTERM)
            assert launcher.wait(timeout=10) == 0
        finally:
            launcher.kill()
            launcher.communicate()
    lines = log.read_text().splitlines()
    assert lines[0].startswith("ray start --block") and lines[1:] == ["ray got TERM"]


@pytest.mark.parametrize("files, message", [
    ({"patch.diff": "x"}, "has no run.sh"),
    ({"run.sh": "#!/bin/sh\n", "blob.bin": None}, "is not UTF-8 text"),
    ({"run.sh": "#!/bin/sh\n", "bad name.txt": "x"}, "cannot travel in a compose file"),
    ({"run.sh": "#!/bin/sh\n", "real/f.txt": "x", "linked": Path("real")}, "'linked' is a symlink"),
])
def test_a_bad_mod_is_one_line_naming_the_element(tmp_path: Path, files: dict, message: str):
    # inline: a binary file is refused (under the default "auto" it travels in an image: tests/test_mods_image.py)
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        mods = ["ok", "bad"]
        mods_transport = "inline"
        """, mods={"ok": {"run.sh": "#!/bin/sh\n"}})
    bad = tmp_path / "mods" / "bad"
    bad.mkdir()
    for rel, text in files.items():
        if isinstance(text, Path):  # a symlink to that path
            (bad / rel).symlink_to(text)
            continue
        (bad / rel).parent.mkdir(parents=True, exist_ok=True)
        (bad / rel).write_bytes(b"\xff\xfe\x00" if text is None else text.encode())
    result = build(root)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert lines[0].startswith("recipes/r/recipe.toml:4:") and "mods[1]" in lines[0]
    assert not (root / "out").exists()


def test_a_missing_mod_names_where_it_looked(tmp_path: Path):
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        mods = ["nowhere"]
        """)
    result = build(root)
    assert result.exit_code == 1 and "mod 'nowhere' not found" in result.stderr and "mods[0]" in result.stderr


def test_a_mod_too_big_for_the_stacks_one_argument_is_refused(tmp_path: Path):
    """The stack passes the launcher, mod files included, as one `sh -c` argument; Linux caps one at 128 KiB."""
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        mods = ["big"]
        """, mods={"big": {"run.sh": "#!/bin/sh\n", "table.txt": ""}})
    (root / "mods" / "big" / "table.txt").write_text(("0123456789" * 8 + "\n") * 1900)  # ~150 KiB of text
    result = build(root)
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("recipes/r/recipe.toml:4:") and "mods" in line and "128 KiB" in line, line
    assert not (root / "out").exists()


def test_mod_text_starting_with_a_tab_arrives_exactly(tmp_path: Path):
    """A literal block cannot start with a tab (YAML reads it as indentation): such text is quoted instead."""
    text = "\tindented with a tab\n\tsecond line $HOME\n"
    root = project(tmp_path, """\
        engine = "vllm"
        docker_image = "img"
        model = "m/m"
        mods = ["tabbed"]
        """, mods={"tabbed": {"run.sh": "#!/bin/sh\n", "Makefile": text}})
    assert build(root).exit_code == 0
    assert container_files(compose(root, "n1"))["/workspace/mods/tabbed/Makefile"] == text


# `ray start` refusing its command line as click does (a usage error: exit status 2), and as Ray's own checks do
# (cli_logger.abort: a PANIC line, click's "Error: " line, exit status 1), each before any connection.
REFUSING_RAY = {
    "usage": RECORD + "echo \"Error: No such option '--bogus'.\" >&2; exit 2\n",
    "abort": RECORD + "echo '2026-12-03 18:36:23,194\tPANIC scripts.py:1204 -- `--include-dashboard` should only be "
                      "specified when starting head node with `--head`.'; "
                      "echo 'Error: `{}` should only be specified when starting head node with `{}`.' >&2; exit 1\n",
}


@pytest.mark.parametrize("how", sorted(REFUSING_RAY))
def test_a_ray_worker_whose_ray_start_refuses_its_options_fails_at_once(tmp_path: Path, how: str):
    """Not retried until ray_join_timeout (60 s here): Ray's error line, then recipegen's, then exit 2."""
    port = free_port()
    root = loopback_ray_project(tmp_path, port, "60s")
    assert build(root).exit_code == 0
    log = tmp_path / "log"
    started = time.monotonic()
    with head_port(port, 0):
        result = run_launcher(root, "n2", tmp_path, {"ray": REFUSING_RAY[how]}, {"LOG": str(log)})
    took = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert len(log.read_text().splitlines()) == 1  # run once
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == "recipegen: `ray start` refused its options (Ray's error above): not retried"
    assert lines[-2].startswith("Error: ")
    if how == "abort":
        assert "PANIC" in result.stdout and "should only be specified when starting head node" in result.stdout
    assert took < 20
