"""`recipegen models`: the recipe's model and draft models, whole, on every node it uses.

Everything runs in short-lived host-network containers of the recipe's own image on the nodes (python3 is in every
engine image), each given the node's Hugging Face cache: a scan on every node; where no node has a model, a
download on one; then one chain per model that lacks targets: source -> first target -> second ... over the
fabric addresses, each receiver passing the stream on while it writes. The deploying machine only starts the
containers and reads their progress lines: no byte of the weights passes through it, and no SSH is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from generator.deploy.docker import DockerError, reason
from generator.deploy.targets import each
from generator.engines.ranks import flag_value
from generator.resolve.modelid import read_model
from generator.transfer import hf
from generator.transfer.helpers import ROOT, Helpers, Peer, Proc, follow, hf_cache, last_line

DOWNLOAD_TIMEOUT = 24 * 3600.0
# `hf` is the current Hugging Face CLI, `huggingface-cli` the older name; images have one or the other.
_DOWNLOAD = ('if command -v hf >/dev/null 2>&1; then set -- hf "$@"; else set -- huggingface-cli "$@"; fi; '
             'exec "$@"')


@dataclass
class NodeResult:
    node: str
    model: str
    action: str  # present, source, downloaded (then the source), copied from X, refused, failed
    bytes: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.action in ("failed", "refused")


@dataclass
class Scan:
    free: int | None
    writable: bool
    error: str | None
    repos: dict[str, hf.RepoState] = field(default_factory=dict)


class Reporter(Protocol):
    """What the chain tells the person watching: a node's transfer starts and moves; notes. The CLI draws it."""

    def start(self, node: str, model: str, total: int) -> None: ...

    def advance(self, node: str, done: int) -> None: ...

    def note(self, text: str) -> None: ...


def revision(recipe: Any) -> str | None:
    """The revision the engine loads: its `--revision` flag (vLLM and SGLang both have it), else `main`'s ref."""
    return flag_value(recipe, "--revision")


def scan(helpers: Helpers, target: Peer, repos: list[str]) -> Scan:
    cmd = helpers.command(target, "scan", "scan", ROOT, *repos)
    done = subprocess.run(cmd, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise DockerError(cmd, done.returncode, done.stdout.decode(errors="replace"),
                          done.stderr.decode(errors="replace"))
    data = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return Scan(data["free"], data["writable"], data["error"],
                {r: hf.RepoState.from_scan(s) for r, s in data["repos"].items()})


def download(helpers: Helpers, target: Peer, model: str, rev: str | None) -> None:
    """Fetch the model into one node's cache with the image's own Hugging Face CLI; the token reaches it by
    name through the recipe's pass_env (never written anywhere)."""
    args = ["download", model, *(["--revision", rev] if rev else [])]
    env = tuple(n for n in target.plan.pass_env if n in os.environ)
    cmd = helpers.command(target, "download", "-c", _DOWNLOAD, "sh", *args, env=env, entrypoint="sh")
    done = subprocess.run(cmd, capture_output=True, timeout=DOWNLOAD_TIMEOUT)
    if done.returncode != 0:
        raise DockerError(cmd, done.returncode, done.stdout.decode(errors="replace"),
                          done.stderr.decode(errors="replace"))


def _advancer(reporter: Reporter, node: str) -> Callable[[dict[str, Any]], None]:
    return lambda line: reporter.advance(node, int(line.get("got", 0)))


def chain(helpers: Helpers, source: Peer, targets: list[Peer], plan: list[dict[str, Any]], port: int,
          reporter: Reporter) -> dict[str, tuple[str | None, float]]:
    """Stream `plan` from source through every target in turn: each target's error (None: whole) and the
    seconds its stream took (from its first byte to the last file in place; container starts not counted)."""
    procs: list[Proc] = []
    threads = []
    for i, target in enumerate(targets):
        nxt = targets[i + 1].node if i + 1 < len(targets) else None
        args = ["recv", ROOT, target.node.address, str(port), *([nxt.address, str(port)] if nxt else [])]
        proc = Proc(target, subprocess.Popen(helpers.command(target, "recv", *args), stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
        procs.append(proc)
        threads.append(follow(proc, _advancer(reporter, target.name)))
    sender = Proc(source, subprocess.Popen(
        helpers.command(source, "send", "send", targets[0].node.address, str(port), stdin=True),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    threads.append(follow(sender, lambda line: None))
    assert sender.popen.stdin is not None
    sender.popen.stdin.write(json.dumps({"root": ROOT, "entries": plan}).encode())
    sender.popen.stdin.close()
    sender.popen.wait()
    if sender.popen.returncode != 0:
        # a source that cannot send leaves the receivers waiting for a stream that will not come
        time.sleep(1)
        helpers.remove_all()
    for proc in procs:
        proc.popen.wait()
    for thread in threads:
        thread.join(timeout=10)
    results: dict[str, str | None] = {}
    seconds = {p.target.name: float(p.last.get("seconds", 0.0)) for p in procs}
    upstream_failed: str | None = None
    send_error = last_line(sender.stderr) if sender.popen.returncode != 0 else None
    for proc in procs:
        last = proc.last
        if proc.popen.returncode == 0 and last.get("done"):
            results[proc.target.name] = None
        elif not proc.listened:
            results[proc.target.name] = last_line(proc.stderr) or f"exit {proc.popen.returncode}"
        elif last.get("errors"):
            results[proc.target.name] = "; ".join(last["errors"])
        elif upstream_failed or send_error:
            results[proc.target.name] = (f"the stream from {upstream_failed} broke" if upstream_failed
                                         else f"the source {source.name} could not send: {send_error}")
        else:
            results[proc.target.name] = last_line(proc.stderr) or f"exit {proc.popen.returncode}"
        if results[proc.target.name] is not None or last.get("forward_error"):
            upstream_failed = upstream_failed or proc.target.name
    return {name: (error, seconds[name]) for name, error in results.items()}


def sync_models(targets: list[Peer], reporter: Reporter, rev: str | None, port: int) -> list[NodeResult]:
    """Every model of the plan (at revision `rev`, None: main) on every target; receivers listen on `port`.
    Any exception (Ctrl-C too) removes every helper container on every node before it goes on up."""
    with Helpers() as helpers:
        return _sync(helpers, targets, reporter, rev, port)


def _sync(helpers: Helpers, targets: list[Peer], reporter: Reporter, rev: str | None,
          port: int) -> list[NodeResult]:
    plan = targets[0].plan
    models = [m for m in dict.fromkeys(plan.models)]
    results: list[NodeResult] = []
    local = [m for m in models if read_model(m).hub_id is None]
    for m in local:
        reporter.note(f"{m} is a path in the container, not a Hugging Face id: copy it yourself")
    models = [m for m in models if m not in local]
    if not models:
        return results
    repos = [hf.repo_folder(m) for m in models]
    scans = each(targets, lambda t: scan(helpers, t, repos))
    dead = {n: s for n, s in scans.items() if isinstance(s, BaseException)}
    results += [NodeResult(n, ", ".join(models), "failed", error=_scan_failure(e, plan.image, plan.recipe_id))
                for n, e in dead.items()]
    live = [t for t in targets if t.name not in dead]
    if not live:
        return results
    states: dict[str, Scan] = {t.name: scans[t.name] for t in live}  # type: ignore[misc]
    manifests: dict[str, list[hf.Entry]] = {}
    downloaded: set[str] = set()
    sources: dict[str, Peer] = {}
    for model, repo in zip(models, repos):
        source, why = _source(live, states, repo, rev)
        if source is None:
            first = live[0]
            reporter.note(f"{model}: on none of the nodes ({why}); downloading it on {first.name}")
            try:
                download(helpers, first, model, rev)
                states[first.name] = scan(helpers, first, repos)
            except (DockerError, subprocess.TimeoutExpired, ValueError) as exc:
                results += [NodeResult(t.name, model, "failed", error=f"download on {first.name} failed: "
                                       f"{reason(exc)}") for t in live]
                continue
            downloaded.add(model)
            source, why = _source([first], states, repo, rev)
            if source is None:
                results += [NodeResult(t.name, model, "failed", error=f"after the download on {first.name}: {why}")
                            for t in live]
                continue
        sources[model] = source
        manifests[model] = hf.manifest(states[source.name].repos[repo], repo, rev)
    # Disk and permissions, for everything this run will write on a node, before anything is written anywhere.
    refused: dict[str, str] = {}
    for target in live:
        need = sum(hf.missing_bytes(manifests[m], _state(states[target.name], hf.repo_folder(m)))
                   for m in manifests if sources[m] is not target)
        s = states[target.name]
        if need and not s.writable:
            refused[target.name] = f"its cache {hf_cache(target)} is not writable: {s.error}"
        elif need and s.free is not None and need > s.free:
            refused[target.name] = (f"needs {human_size(need)} but its cache {hf_cache(target)} has "
                                    f"{human_size(s.free)} free")
    for model in manifests:
        repo, source, entries = hf.repo_folder(model), sources[model], manifests[model]
        todo = []
        for target in live:
            state = _state(states[target.name], repo)
            if target is source:
                results.append(NodeResult(target.name, model, "downloaded" if model in downloaded else "source"))
            elif target.name in refused:
                results.append(NodeResult(target.name, model, "refused", error=refused[target.name]))
            elif hf.complete(entries, state):
                results.append(NodeResult(target.name, model, "present"))
            else:
                todo.append(target)
        if not todo:
            continue
        stream = hf.stream_plan(entries, [_state(states[t.name], repo) for t in todo])
        total = hf.stream_bytes(stream)
        for target in todo:
            reporter.start(target.name, model, total)
        errors = chain(helpers, source, todo, stream, port, reporter)
        for target in todo:
            err, took = errors[target.name]
            results.append(NodeResult(target.name, model, "failed" if err else f"copied from {source.name}",
                                      0 if err else total, took, err))
    return results


def _scan_failure(exc: BaseException, image: str, recipe_id: str) -> str:
    """Why a node could not be scanned; the helpers run the recipe's image, so a node without it says so."""
    detail = reason(exc)
    lowered = detail.lower()
    if any(s in lowered for s in ("unable to find image", "no such image", "pull access denied")):
        return f"image {image} is not on this node (the helpers run it): `recipegen images {recipe_id}` first"
    return f"scan failed: {detail}"


def _state(scan_: Scan, repo: str) -> hf.RepoState:
    return scan_.repos.get(repo) or hf.RepoState()


def _source(live: list[Peer], states: dict[str, Scan], repo: str, rev: str | None) -> tuple[Peer | None, str]:
    why = "not in any cache"
    for target in live:
        state = states[target.name].repos.get(repo)
        if state is None:
            continue
        try:
            hf.manifest(state, repo, rev)
            return target, ""
        except hf.Incomplete as exc:
            why = f"{target.name}: {exc}"
    return None, why


def human_size(n: int) -> str:
    """1.5 GiB, 300.0 MiB: sizes as people read them."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"
