"""Before anything starts anywhere: every node answers, has the image, the GPU runtime, the ulimits and the
host paths the ranks need. Checked on all nodes at once; one failure means nothing starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from generator.deploy.docker import DockerError
from generator.deploy.targets import Deployment, Target, each
from generator.model import HF_CACHE_IN_CONTAINER
from generator.plan import LABEL_PREFIX


@dataclass
class NodeReport:
    node: str
    context: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    image_id: str | None = None


def preflight(dep: Deployment) -> dict[str, NodeReport]:
    results = each(dep.targets, _check_node)
    reports: dict[str, NodeReport] = {}
    for target in dep.targets:
        result = results[target.name]
        if isinstance(result, BaseException):
            result = NodeReport(target.name, target.node.context, [f"preflight failed: {result}"])
        reports[target.name] = result
    ids = {r.image_id for r in reports.values() if r.image_id}
    if len(ids) > 1:
        listing = ", ".join(f"{r.node}={r.image_id[7:19] if r.image_id.startswith('sha256:') else r.image_id[:12]}"
                            for r in reports.values() if r.image_id)
        for report in reports.values():
            report.problems.append(f"image {dep.plan.head.image} differs across nodes ({listing}): "
                                   "ranks must run the same build")
    return reports


def _check_node(target: Target) -> NodeReport:
    plan, docker = target.plan, target.docker
    report = NodeReport(target.name, plan.node.context)
    for name in plan.pass_env:
        if name not in os.environ:
            report.notes.append(f"{name} (pass_env) is not set here: the engine will start without it")
    try:  # the first call doubles as the "does the context answer" check
        for other in _other_recipes(target):
            report.problems.append(f"node is busy: recipe '{other}' runs here (one GPU per node; "
                                   f"`recipegen down {other}` first)")
    except DockerError as exc:
        hint = ("; create it with `recipegen contexts --create`" if "not found" in exc.detail.lower()
                and "context" in exc.detail.lower() else "")
        report.problems.append(f"context '{plan.node.context}' does not answer: {exc.detail}{hint}")
        return report
    if not target.compose_file.is_file():
        report.problems.append(f"{target.compose_file} is missing: run `recipegen build`")
    try:
        report.image_id = docker.image_id(plan.image)
    except DockerError as exc:
        report.problems.append(f"cannot inspect image {plan.image}: {exc.detail}")
        return report
    if report.image_id is None:
        if plan.build_context:
            report.notes.append(f"image {plan.image} is not there yet; compose will build it")
        else:
            report.problems.append(f"image {plan.image} is not on this node (load it there, or `recipegen images`)")
        return report
    problem = _trial_run(target)
    if problem:
        report.problems.append(problem)
    return report


# Exit status 3 of the trial container: a model is not in the mounted Hugging Face cache; it prints each missing
# one's folder, one a line, followed by " incomplete" when the folder is there but a snapshot link is dangling
# or a copy left a partial blob (`recipegen models` was cut off). `sh` and `ls` only: any engine image has them.
_MODEL_CHECK = ('missing=0; for m; do found=; for f in "$m"/snapshots/*/config.json "$m"/config.json; do '
                '[ -e "$f" ] && found=1 && break; done; [ -n "$found" ] || { echo "$m"; missing=1; continue; }; '
                'for f in "$m"/snapshots/*/* "$m"/snapshots/*/*/* "$m"/blobs/*.recipegen-partial; do '
                'if [ -L "$f" ] && [ ! -e "$f" ]; then found=; fi; '
                'case "$f" in *.recipegen-partial) [ -e "$f" ] && found=;; esac; done; '
                '[ -n "$found" ] || { echo "$m incomplete"; missing=1; }; done; '
                '[ "$missing" = 0 ] || exit 3')
MODEL_MISSING = 3


def model_dir(model: str) -> str:
    """Where the engine looks for the model inside the container: a local path, or the hub cache layout."""
    if model.startswith("/"):
        return model
    return f"{HF_CACHE_IN_CONTAINER}/hub/models--{model.replace('/', '--')}"


def _other_recipes(target: Target) -> set[str]:
    """Recipes other than this one with a running container on the node."""
    mine = target.plan.recipe_id
    rows = target.docker.run("ps", "-a", "--filter", f"label={LABEL_PREFIX}.recipe", "--format",
                             f'{{{{.Label "{LABEL_PREFIX}.recipe"}}}}\t{{{{.State}}}}', timeout=10)
    found = set()
    for row in rows.splitlines():
        recipe, _, state = row.rpartition("\t")
        if recipe and recipe != mine and state in ("running", "restarting", "created"):
            found.add(recipe)
    return found


def _trial_run(target: Target) -> str | None:
    """Run the rank's own compose service (its GPU request, ulimits, shm, devices, mounts: the very file `up`
    starts) with only a look for the model as its command: what would fail at `up` fails here, in a second,
    before any rank starts. Compose creates the read-write mount folders, as it will at `up` (and as a Swarm
    service, which never creates them, needs)."""
    plan = target.plan
    try:
        target.docker.compose(str(target.compose_file), "run", "--rm", "--no-deps", "-T", "--entrypoint", "sh",
                              "engine", "-c", _MODEL_CHECK, "sh", *(model_dir(m) for m in plan.models),
                              project=f"{plan.recipe_id}-preflight", timeout=180)
    except DockerError as exc:
        if exc.returncode == MODEL_MISSING:
            lines = exc.stdout.splitlines()
            incomplete = {line.removesuffix(" incomplete") for line in lines if line.endswith(" incomplete")}
            missing = set(lines) | incomplete
            named = [m for m in plan.models if model_dir(m) in missing] or [plan.model]
            fix = f"`recipegen models {plan.recipe_id}` copies it from a node that has it"
            return "; ".join(f"{'model' if m == plan.model else 'draft model'} {m} is "
                             f"{'incomplete in' if model_dir(m) in incomplete else 'not in'} this node's Hugging Face "
                             f"cache: looked in {_host_model_dir(target, m)} ({fix})" for m in named)
        return _explain_trial(exc.stderr or exc.stdout, target)
    return None


def _host_model_dir(target: Target, model: str | None = None) -> str:
    inside = model_dir(model or target.plan.model)
    for volume in target.plan.volumes:
        if inside.startswith(volume.target + "/"):
            return volume.source + inside[len(volume.target):]
    return f"{inside} (inside the container)"


def _hf_cache(target: Target) -> str | None:
    return next((v.source for v in target.plan.volumes if v.target == HF_CACHE_IN_CONTAINER), None)


def _explain_trial(stderr: str, target: Target) -> str:
    text = " ".join(stderr.split())
    if "bind source path does not exist" in text and _hf_cache(target) and _hf_cache(target) in text:
        return (f"model {target.plan.model} is not in this node's Hugging Face cache: looked in {_host_model_dir(target)} "
                f"(the cache folder {_hf_cache(target)} does not exist; `recipegen models {target.plan.recipe_id}` "
                "copies it from a node that has it)")
    if "bind source path does not exist" in text:
        path = text.split("bind source path does not exist:", 1)[1].strip().split()[0]
        return f"host path {path} does not exist on this node (a read-only mount needs it)"
    if "could not select device driver" in text or "nvidia-container" in text:
        return "no NVIDIA GPU runtime: the engine cannot give containers the GPU (install the NVIDIA Container Toolkit)"
    if "unresolvable CDI devices" in text or "CDI" in text:
        return ("CDI device nvidia.com/gpu=all is not known to this engine "
                "(generate the CDI spec: nvidia-ctk cdi generate)")
    if "rlimit" in text or "ulimit" in text:
        return (f"ulimits cannot be applied (memlock={target.plan.ulimits.memlock}): raise the hard limit on the node "
                "or lower `[ulimits]` in the cluster file")
    if "/dev/infiniband" in text:
        return "no /dev/infiniband on this node although the cluster says rdma = true"
    return f"a trial container could not start: {text[-300:]}"
