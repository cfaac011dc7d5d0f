#!/usr/bin/env python3
"""`recipegen models` in the lab: a synthetic model (HF cache layout, one LFS-like blob named by its sha256)
copied from one node to 1, 2 and 3 others, against a raw TCP stream between the same two nodes in the same run.

Targets (issue 15): the 1-target copy at >= 80% of the raw stream's rate; 3 targets within 1.2x the time of one.
The lab's ceiling is veth on a shared CPU: every node's bytes are moved by the same cores, so a chain of 3
receivers competes for them as real Sparks (one CPU each) do not. Needs root and the lab's packages:

    sudo python3 benchmarks/models_lab.py [--gib 2] [--tmpfs] [--images-only]

Then `recipegen images` (an image of min(--gib, 1) GiB plus the lab image) to 3 targets node to node, against
one `save | load` and against its fallback through this machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lab import IMAGE, Lab, unavailable_reason  # noqa: E402

MODEL = "bench/model"
REPO = "models--bench--model"
COMMIT = "b" * 40
PORT = 29799
RECIPE = f'''engine = "vllm"
docker_image = "{IMAGE}"
model = "{MODEL}"
required_nodes = {{n}}
tensor_parallel_size = {{n}}
shm_size = "1gb"
'''
# The raw ceiling: one host-network container per node, the sender's file through sendfile, the receiver
# reading into a buffer and dropping it. Same image, same network path, no disk writes on the receiving side.
RAW_RECV = ("import socket,sys,time,os\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(1);c,_=s.accept();b=bytearray(4<<20);n=0;t=time.time()\n"
            "f=open(sys.argv[3],'wb') if len(sys.argv)>3 else None\n"
            "while True:\n k=c.recv_into(b)\n if not k: break\n n+=k\n f and f.write(memoryview(b)[:k])\n"
            "f and (f.flush(), os.fdatasync(f.fileno()), os.unlink(sys.argv[3]))\nprint(n,time.time()-t)")
RAW_SEND = ("import socket,sys,time,os\nf=open(sys.argv[3],'rb')\nfor i in range(200):\n try:\n"
            "  s=socket.create_connection((sys.argv[1],int(sys.argv[2])));break\n except OSError: time.sleep(0.1)\n"
            "s.sendfile(f);s.close()")


def make_model(cache: Path, size: int) -> Path:
    """Write `size` bytes of random-looking data (a counter hashed in 1 MiB steps: fast, incompressible)."""
    base = cache / "hub" / REPO
    (base / "blobs").mkdir(parents=True)
    tmp = base / "blobs" / "tmp"
    digest = hashlib.sha256()
    block = os.urandom(1 << 20)
    with open(tmp, "wb") as f:
        for i in range(size >> 20):
            chunk = hashlib.sha256(i.to_bytes(8, "big")).digest() + block[32:]
            f.write(chunk)
            digest.update(chunk)
    blob = base / "blobs" / digest.hexdigest()
    tmp.rename(blob)
    config = b'{"architectures": ["Bench"]}'
    cid = hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()
    (base / "blobs" / cid).write_bytes(config)
    snap = base / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(f"../../blobs/{blob.name}")
    (snap / "config.json").symlink_to(f"../../blobs/{cid}")
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(COMMIT)
    return blob


def raw_stream(lab: Lab, blob: Path, to_disk: bool, targets: int = 1) -> tuple[int, float]:
    """The bytes over TCP from spark1 to each of `targets` nodes at once (one connection each), dropped on
    arrival or written into the target's cache (and synced): the ceilings of the network, and of the network
    plus the targets' disks (in the lab one disk and two cores shared by every node). Bytes per target and the
    slowest target's seconds."""
    src = lab.nodes[0]
    inside = "/root/.cache/huggingface/" + str(blob.relative_to(src.hf_cache))
    common = ["run", "--rm", "--network", "host", "--entrypoint", "python3"]
    recvs, sends = [], []
    for dst in lab.nodes[1: targets + 1]:
        dst.hf_cache.mkdir(parents=True, exist_ok=True)
        recvs.append(subprocess.Popen(
            ["docker", "--context", dst.context, *common, "-v", f"{dst.hf_cache}:/cache", IMAGE, "-c", RAW_RECV,
             dst.address, str(PORT), *(["/cache/raw.bin"] if to_disk else [])],
            env=lab.env, stdout=subprocess.PIPE, text=True))
        sends.append(subprocess.Popen(
            ["docker", "--context", src.context, *common, "-v", f"{src.hf_cache}:/root/.cache/huggingface", IMAGE,
             "-c", RAW_SEND, dst.address, str(PORT), inside], env=lab.env))
    for send in sends:
        assert send.wait(timeout=600) == 0
    results = [recv.communicate(timeout=600)[0].split() for recv in recvs]
    return int(results[0][0]), max(float(seconds) for _, seconds in results)


def copy(lab: Lab, project: Path, targets: int) -> tuple[float, float]:
    """Wall time of `recipegen models`, and the chain's own time from its summary table."""
    for node in lab.nodes[1:]:
        shutil.rmtree(node.hf_cache / "hub", ignore_errors=True)
    lab.write_cluster(project / "cluster.toml", lab.nodes[: targets + 1])
    (project / "recipes" / "bench" / "recipe.toml").write_text(RECIPE.format(n=targets + 1))
    start = time.perf_counter()
    done = subprocess.run(["recipegen", "models", "bench"], cwd=project, env=lab.env, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - start
    chain = max(float(t) for t in re.findall(r"copied from spark1\s*│[^│]*│\s*([0-9.]+)s", done.stdout))
    return wall, chain


def images(lab: Lab, project: Path, size: int) -> None:
    """`recipegen images` to 3 targets (node to node: a chain of helpers over the fabric) against one
    `save | load` to one target and the fallback's fan-out through this machine to the same 3 (both as docker
    CLI pipes through this machine). The image: the lab image plus a random layer of `size` bytes, built on
    spark1 alone."""
    from generator.deploy.targets import Target
    from generator.transfer.image_chain import through_here

    image = "bench/only-on-one:1"
    src, *others = lab.nodes[:4]
    context = project / "image"
    context.mkdir(exist_ok=True)
    with open(context / "blob", "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY blob /blob\n")
    subprocess.run(["docker", "--context", src.context, "build", "-q", "-t", image, str(context)],
                   env={**lab.env, "DOCKER_BUILDKIT": "0"}, check=True, capture_output=True)

    def clear() -> None:
        for node in others:
            lab.docker(node, "rmi", image, check=False)
    docker = ["docker", "--context"]
    clear()
    start = time.perf_counter()
    save = subprocess.Popen([*docker, src.context, "save", image], env=lab.env, stdout=subprocess.PIPE)
    subprocess.run([*docker, others[0].context, "load", "-q"], env=lab.env, stdin=save.stdout, check=True,
                   capture_output=True)
    save.wait()
    one = time.perf_counter() - start
    clear()
    mib = int(lab.docker(src, "image", "inspect", "--format", "{{.Size}}", image).stdout) / (1 << 20)
    (project / "recipes" / "img").mkdir(exist_ok=True)
    (project / "recipes" / "img" / "recipe.toml").write_text(RECIPE.format(n=4).replace(IMAGE, image))
    lab.write_cluster(project / "cluster.toml", lab.nodes[:4])
    subprocess.run(["recipegen", "build", "img"], cwd=project, env=lab.env, check=True, capture_output=True)
    start = time.perf_counter()
    done = subprocess.run(["recipegen", "images", "img"], cwd=project, env=lab.env, check=True, capture_output=True,
                          text=True)
    chain = time.perf_counter() - start
    assert done.stdout.count("node to node") == 3, done.stdout
    print(done.stdout.strip())
    clear()
    os.environ["DOCKER_CONFIG"] = lab.env["DOCKER_CONFIG"]  # the fallback's docker CLI finds the lab's contexts
    start = time.perf_counter()
    fanned = through_here(Target(src, Path()), [Target(n, Path()) for n in others], image,
                          {n.name: "benchmark" for n in others})
    fan = time.perf_counter() - start
    assert all(c.error is None for c in fanned.values()), fanned
    clear()
    print(f"image {mib:.0f} MiB: one save | load {one:.2f}s; `recipegen images` to 3 targets node to node "
          f"{chain:.2f}s ({chain / one:.2f}x one save | load, with helper probes and container starts); the "
          f"fallback (one save fanned out through this machine) to the same 3: {fan:.2f}s ({fan / one:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.0, help="size of the synthetic model")
    parser.add_argument("--tmpfs", action="store_true", help="targets' caches on tmpfs (leave the disk out)")
    parser.add_argument("--images-only", action="store_true", help="only the `recipegen images` comparison")
    args = parser.parse_args()
    why = unavailable_reason()
    if why:
        sys.exit(f"cannot run the lab: {why}")
    size = int(args.gib * (1 << 30)) >> 20 << 20
    with Lab(nodes=4, prefix="rgm") as lab, tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "recipes" / "bench").mkdir(parents=True)
        if args.images_only:
            images(lab, project, min(size, 1 << 30))
            return
        blob = make_model(lab.nodes[0].hf_cache, size)
        if args.tmpfs:  # every node's cache in memory: the network and the CPU alone, no disk
            for node in lab.nodes[1:]:
                node.hf_cache.mkdir(parents=True, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size * 2 + (64 << 20)}", "tmpfs",
                                str(node.hf_cache)], check=True)
        n, seconds = raw_stream(lab, blob, to_disk=False)
        raw = n / seconds
        n, disk_seconds = raw_stream(lab, blob, to_disk=True)
        raw_disk = n / disk_seconds
        print(f"model {size / (1 << 30):.2f} GiB, target caches on {'tmpfs' if args.tmpfs else 'disk'}; "
              f"raw TCP stream spark1 -> spark2: {raw / (1 << 20):.0f} MiB/s ({seconds:.2f}s); the same stream "
              f"written to spark2's cache: {raw_disk / (1 << 20):.0f} MiB/s ({disk_seconds:.2f}s)")
        times = {}
        for targets in (1, 2, 3):
            wall, chain = copy(lab, project, targets)
            times[targets] = chain
            _, parallel = raw_stream(lab, blob, to_disk=True, targets=targets)
            print(f"{targets} target(s): stream {chain:.2f}s ({size / chain / (1 << 20):.0f} MiB/s, "
                  f"{size / chain / raw:.0%} of raw TCP, {size / chain / raw_disk:.0%} of raw TCP to a file); "
                  f"`recipegen models` wall {wall:.2f}s (with scans and container starts); {targets} raw streams "
                  f"to files at once from spark1 (the lab's shared disk and cores): {parallel:.2f}s")
        print(f"1 target: {size / times[1] / raw:.0%} of the raw stream, {size / times[1] / raw_disk:.0%} of the "
              f"raw stream into a file (target >= 80%); 3 targets: {times[3] / times[1]:.2f}x the time of one "
              "(target <= 1.2x)")
        if args.tmpfs:
            for node in lab.nodes[1:]:
                subprocess.run(["umount", "-l", str(node.hf_cache)], check=False)
        images(lab, project, min(size, 1 << 30))


if __name__ == "__main__":
    main()
