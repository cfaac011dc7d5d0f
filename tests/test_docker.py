"""The docker runner (generator/deploy/docker.py) offline: failures classified once, and `save | load` copies
that report the side that really failed and leave nothing running. Stand-in commands play docker save / load."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from generator.deploy.docker import DockerError, Failure, Refusal, bind_source, classify, pipe, refusal


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


# docker save: writes an image stream; on a closed pipe it says so, as docker does, and exits 1.
SAVE = py("import sys, os\n"
          "open(sys.argv[1], 'w').write(str(os.getpid())) if len(sys.argv) > 1 else None\n"
          "try:\n"
          "    for _ in range(2000): sys.stdout.buffer.write(b'x' * 65536)\n"
          "    sys.stdout.flush()\n"
          "except BrokenPipeError:\n"
          "    sys.stderr.write('write /dev/stdout: broken pipe\\n'); os._exit(1)\n")


def test_a_failed_load_reports_loads_error_not_saves_broken_pipe():
    load = py("import sys; sys.stdin.buffer.read(1000); "
              "sys.stderr.write('Error processing tar file(exit status 1): unexpected EOF\\n'); sys.exit(1)")
    with pytest.raises(DockerError) as caught:
        pipe(SAVE, load, timeout=60)
    assert caught.value.command == load
    assert caught.value.detail == "Error processing tar file(exit status 1): unexpected EOF"


def test_a_failed_save_is_reported_when_load_took_what_came():
    save = py("import sys; sys.stdout.write('partial'); sys.stderr.write('Error: No such image: x:1\\n'); "
              "sys.exit(1)")
    load = py("import sys; sys.stdin.read()")
    with pytest.raises(DockerError) as caught:
        pipe(save, load, timeout=60)
    assert caught.value.command == save and caught.value.failure is Failure.NOT_FOUND


def test_a_load_that_hangs_times_out_as_a_docker_error_and_stops_save(tmp_path: Path):
    pid_file = tmp_path / "save.pid"
    save = SAVE + [str(pid_file)]
    load = py("import time; time.sleep(60)")  # never reads: save blocks on a full pipe
    started = time.monotonic()
    with pytest.raises(DockerError) as caught:
        pipe(save, load, timeout=1)
    assert caught.value.failure is Failure.TIMEOUT and time.monotonic() - started < 20
    with pytest.raises(ProcessLookupError):  # save was killed and reaped, not left writing into nothing
        os.kill(int(pid_file.read_text()), 0)


def test_a_copy_that_works_raises_nothing():
    pipe(SAVE, py("import sys; assert len(sys.stdin.buffer.read()) == 2000 * 65536"), timeout=60)


@pytest.mark.parametrize("code, stdout, stderr, kind", [
    (None, "", "", Failure.TIMEOUT),
    (1, "", 'Failed to initialize: unable to resolve docker endpoint: context "x": context not found: open /r/m.json',
     Failure.NO_CONTEXT),
    (125, "", "unknown shorthand flag: 'f' in -f\nSee 'docker --help'.", Failure.NO_COMPOSE),
    (1, "", "docker: 'compose' is not a docker command.\nSee 'docker --help'", Failure.NO_COMPOSE),
    (1, "", "error during connect: Get \"http://docker.example/v1.45/info\": dial tcp 10.0.0.9:2376: i/o timeout",
     Failure.UNREACHABLE),
    (1, "[]\n", "Error response from daemon: No such container: pair-engine-1", Failure.NOT_FOUND),
    (1, "[]\n", "", Failure.NOT_FOUND),  # inspect's empty list is enough
    (1, "", "no such service: pair_spark2", Failure.NOT_FOUND),
    (125, "", "docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     Failure.REFUSED),
])
def test_failures_are_classified_once(code, stdout, stderr, kind):
    assert classify(code, stdout, stderr) is kind


@pytest.mark.parametrize("code, stderr, kind", [
    (1, 'Error response from daemon: invalid mount config for type "bind": bind source path does not exist: '
        "/home/u/.cache/huggingface", Refusal.BIND_SOURCE),
    (125, 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
     Refusal.GPU_DRIVER),
    (1, "Error response from daemon: could not select device driver \"cdi\": unresolvable CDI devices "
        "nvidia.com/gpu=all", Refusal.GPU_DRIVER),
    (1, "failed to create task: unresolvable CDI devices nvidia.com/gpu=all", Refusal.CDI),
    (1, "OCI runtime create failed: error setting rlimit type 8: operation not permitted", Refusal.ULIMIT),
    (1, "error gathering device information while adding custom device \"/dev/infiniband\": no such file or "
        "directory", Refusal.RDMA_DEVICE),
    (127, 'exec: "sh": executable file not found in $PATH', Refusal.CANNOT_EXEC),
    (1, "something else went wrong", Refusal.OTHER),
])
def test_refusals_to_start_a_container_are_read_once(code, stderr, kind):
    assert refusal(DockerError(["docker", "run"], code, "", stderr)) is kind


def test_bind_source_names_the_missing_path():
    exc = DockerError(["docker", "run"], 1, "", 'Error response from daemon: invalid mount config for type "bind": '
                                                "bind source path does not exist: /srv/models\n")
    assert bind_source(exc) == "/srv/models"


# --- Docker.copy_out: one way to read a file out of a container (issue 41) ---------------------------------------

def _fake_docker(tmp_path: Path, monkeypatch, files: dict[str, bytes], fail: str = "") -> None:
    """A `docker` on PATH whose `cp CONTAINER:PATH -` writes a tar of the file, as docker's does."""
    import io
    import tarfile

    store = tmp_path / "files"
    store.mkdir()
    for i, (path, data) in enumerate(files.items()):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(path.rsplit("/", 1)[-1])
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        (store / str(i)).write_bytes(buffer.getvalue())
    table = {path: str(store / str(i)) for i, path in enumerate(files)}
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\nsource = args[args.index('cp') + 1]\n"
                      f"table = {table!r}\npath = source.split(':', 1)[1]\n"
                      f"if {fail!r} or path not in table:\n"
                      f"    sys.stderr.write('Error response from daemon: Could not find the file ' + path + "
                      f"' in container x\\n'); sys.exit(1)\n"
                      "sys.stdout.buffer.write(open(table[path], 'rb').read())\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")


def test_copy_out_gives_the_files_bytes_and_raises_on_a_missing_one(tmp_path, monkeypatch):
    from generator.deploy.docker import Docker

    data = bytes(range(256)) * 3
    _fake_docker(tmp_path, monkeypatch, {"/etc/x.cfg": data})
    assert Docker("n1").copy_out("c", "/etc/x.cfg") == data
    with pytest.raises(DockerError):
        Docker("n1").copy_out("c", "/nope")


def test_the_group_record_is_read_whatever_its_keys_order(tmp_path, monkeypatch):
    """The record was found by a text search for `{"restarts"` in the tar stream: a record written with another
    key first (or a name holding that text) was lost."""
    import json

    from generator.deploy.group import read_group
    from generator.deploy.targets import OnNode
    from generator.plan.types import GROUP_STATE
    from generator.resolve.model import Node

    state = {"bound": [5, 1800], "halted": None, "restarts": [{"time": 1.0, "rank": 1, "node": "spark2",
                                                               "reason": "exit 1", "line": "CUDA error"}]}
    _fake_docker(tmp_path, monkeypatch, {GROUP_STATE: json.dumps(state).encode()})
    node = Node(0, "spark1", "10.0.0.1", "spark1", "spark1", "spark", "/home/spark", {})
    record = read_group(OnNode(node), "c")  # type: ignore[arg-type]
    assert record is not None and record.restarts == 1 and record.last_node == "spark2", record
