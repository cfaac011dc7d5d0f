#!/usr/bin/env python3
"""`recipegen models` in the lab: a synthetic model (HF cache layout, one LFS-like blob named by its sha256)
copied from one node to 1, 2 and 3 others, against a raw TCP stream between the same two nodes in the same run.

Targets (issue 15): the 1-target copy at >= 80% of the raw stream's rate; 3 targets within 1.2x the time of one.

Two passes, both against their own raw stream:
- the lab as it is: veth on this machine's 2 shared cores. Every node's bytes, every hop of the chain and every
  node's sha256 are worked by the same 2 cores, so the CPU, not any link, sets the pace; the pass prints the CPU
  each part costs (the raw stream's, the hash's) so the ceiling can be read off;
- every node's link shaped to --link-rate each way (tc tbf on both ends of its veth): a link of its own per node
  as the limit, as on real Sparks, where each node has its own 20 cores and disk and a receiver's work does not
  slow the others. This is where the chain's pipelining (N targets in about the time of one) shows.

Needs root and the lab's packages:

    sudo python3 benchmarks/models_lab.py [--gib 1] [--tmpfs] [--link-rate 200] [--images-only]

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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lab import IFNAME, IMAGE, Lab, unavailable_reason  # noqa: E402

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
# reading into a buffer and dropping it (or writing it to a file). Same image, same network path. Each prints its
# bytes, seconds and CPU seconds (user + system: on veth the stack's work lands on the processes' own time).
RAW_RECV = ("import socket,sys,time,os,resource\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(1);c,_=s.accept();b=bytearray(4<<20);n=0;t=time.time()\n"
            "f=os.open(sys.argv[3],os.O_WRONLY|os.O_CREAT|os.O_TRUNC) if len(sys.argv)>3 else None\n"
            "while True:\n k=c.recv_into(b)\n if not k: break\n n+=k\n f is None or os.write(f,memoryview(b)[:k])\n"
            "f is None or (os.fdatasync(f), os.unlink(sys.argv[3]))\n"
            "print(n,time.time()-t,sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))")
RAW_SEND = ("import socket,sys,time,os,resource\nf=open(sys.argv[3],'rb')\nfor i in range(200):\n try:\n"
            "  s=socket.create_connection((sys.argv[1],int(sys.argv[2])));break\n except OSError: time.sleep(0.1)\n"
            "s.sendfile(f);s.close();print(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))")


@dataclass
class Raw:
    bytes: int
    seconds: float  # the slowest receiver's
    cpu: float  # every sender's and receiver's CPU seconds

    @property
    def rate(self) -> float:
        return self.bytes / self.seconds


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


def raw_stream(lab: Lab, blob: Path, to_disk: bool, targets: int = 1) -> Raw:
    """The bytes over TCP from spark1 to each of `targets` nodes at once (one connection each), dropped on
    arrival or written into the target's cache (and synced): the ceilings of the network, and of the network
    plus the targets' disks (in the lab one disk and two cores shared by every node)."""
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
             "-c", RAW_SEND, dst.address, str(PORT), inside], env=lab.env, stdout=subprocess.PIPE, text=True))
    cpu = 0.0
    for send in sends:
        out = send.communicate(timeout=600)[0]
        assert send.returncode == 0
        cpu += float(out.split()[-1])
    results = [recv.communicate(timeout=600)[0].split() for recv in recvs]
    return Raw(int(results[0][0]), max(float(r[1]) for r in results), cpu + sum(float(r[2]) for r in results))


def sha256_rate(seconds: float = 1.0) -> float:
    """Bytes per second sha256 takes on one core of this machine (what every receiver spends on its copy)."""
    block, h, done = os.urandom(4 << 20), hashlib.sha256(), 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        h.update(block)
        done += len(block)
    return done / (time.perf_counter() - start)


def shape(lab: Lab, mib_per_s: float | None) -> None:
    """Every node's link limited to `mib_per_s` each way (None: unlimited again): tbf on the node's end of its
    veth (what it sends) and on the bridge's end (what it receives)."""
    for node in lab.nodes:
        for ns, dev in ((["-n", node.netns], IFNAME), ([], node.veth_host)):
            subprocess.run(["tc", *ns, "qdisc", "del", "dev", dev, "root"], capture_output=True)
            if mib_per_s:
                rate = int(mib_per_s * (1 << 20))
                subprocess.run(["tc", *ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate}bps",
                                "burst", str(max(rate // 50, 1 << 20)), "latency", "100ms"], check=True)


def copy(lab: Lab, project: Path, targets: int) -> tuple[float, float]:
    """Wall time of `recipegen models`, and the chain's own time from its summary table (from the chain joined
    to the last file in place: container starts and scans not counted)."""
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


def measure(lab: Lab, project: Path, blob: Path, size: int, title: str) -> dict[int, float]:
    """One pass: the raw stream, then `recipegen models` to 1, 2 and 3 targets. The chain's seconds by targets."""
    raw = raw_stream(lab, blob, to_disk=False)
    print(f"{title}: raw TCP stream spark1 -> spark2 {raw.rate / (1 << 20):.0f} MiB/s ({raw.seconds:.2f}s, "
          f"{raw.cpu / (size / (1 << 30)):.2f} CPU s per GiB)")
    times = {}
    for targets in (1, 2, 3):
        wall, chain = copy(lab, project, targets)
        times[targets] = chain
        parallel = raw_stream(lab, blob, to_disk=True, targets=targets)
        print(f"  {targets} target(s): stream {chain:.2f}s ({size / chain / (1 << 20):.0f} MiB/s, "
              f"{size / chain / raw.rate:.0%} of the raw stream); `recipegen models` wall {wall:.2f}s; "
              f"{targets} raw stream(s) from spark1 to files at once: {parallel.seconds:.2f}s")
    print(f"  => 1 target at {size / times[1] / raw.rate:.0%} of the raw stream (target >= 80%); "
          f"3 targets in {times[3] / times[1]:.2f}x the time of one (target <= 1.2x)")
    return times


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
    parser.add_argument("--link-rate", type=float, default=200.0,
                        help="MiB/s of each node's shaped link in the second pass (0: no second pass)")
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
        hash_rate = sha256_rate()
        print(f"model {size / (1 << 30):.2f} GiB, target caches on {'tmpfs' if args.tmpfs else 'disk'}; sha256 on "
              f"one core here: {hash_rate / (1 << 20):.0f} MiB/s ({(1 << 30) / hash_rate:.2f} CPU s per GiB, "
              f"spent by every target on its copy); {os.cpu_count()} cores for every node")
        measure(lab, project, blob, size, "the lab as it is (shared cores)")
        if args.link_rate:
            shape(lab, args.link_rate)
            try:
                measure(lab, project, blob, size, f"every node's link at {args.link_rate:g} MiB/s each way")
            finally:
                shape(lab, None)
        if args.tmpfs:
            for node in lab.nodes[1:]:
                subprocess.run(["umount", "-l", str(node.hf_cache)], check=False)
        images(lab, project, min(size, 1 << 30))


if __name__ == "__main__":
    main()
