"""Cluster settings of the peers as a cluster.toml: eugr's `.env` and a sparkrun cluster file.

eugr's .env is read as launch-cluster.sh reads it (KEY=value lines, `#` comments, a pair of matching quotes
stripped; a line without '=', a bad name or a repeated key refuses the file): CLUSTER_NODES (head first) are the nodes' fabric addresses, since launch-cluster.sh hands them to each
node as its --host-ip; ETH_IF and IB_IF become the variables run-cluster-node.sh exports for them; every
CONTAINER_<NAME> but CONTAINER_NAME is a `-e NAME=value` of launch-cluster.sh; MASTER_PORT its rendezvous port.
A sparkrun cluster file (~/.config/sparkrun/clusters/<name>.yaml: name, hosts, user, cache_dir, transfer_*,
topology) names SSH hosts; sparkrun finds the fabric at run time, so the addresses are proposed from the hosts
and the fabric variables are left to `recipegen cluster probe`, said so in the file.
Each node gets a proposed context: `recipegen contexts --create` makes it as ssh://user@ssh_host.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from generator.check.secrets import secret_env
from generator.cluster.probe.write import write_atomic
from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.engines.ranks import port_number
from generator.importers.base import EnvVar, Field, NotCarried
from generator.importers.writer import comment, entry, schema_error
from generator.importers.yamlfile import YamlFile, read, read_text

SCHEMA_LINE = "#:schema ./schema/cluster.schema.json"
_ETH_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES", "MN_IF_NAME",
             "OMPI_MCA_btl_tcp_if_include")  # run-cluster-node.sh: all set to --eth-if
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_KEYS_USED = {"CLUSTER_NODES", "ETH_IF", "IB_IF", "MASTER_PORT", "CONTAINER_NAME", "LOCAL_IP"}


@dataclass(frozen=True)
class NodeEntry:
    name: str
    address: str
    ssh_host: str
    source: str


@dataclass(frozen=True)
class ImportedCluster:
    source: Path
    peer: str
    fields: tuple[Field, ...]
    env: tuple[EnvVar, ...]
    nodes: tuple[NodeEntry, ...]
    not_carried: tuple[NotCarried, ...]


def is_cluster_file(path: Path) -> bool:
    """eugr's .env by its name; a sparkrun cluster file by its keys (hosts and no command)."""
    if path.name == ".env" or path.name.endswith(".env"):
        return True
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        doc = read(path)
    except RecipegenError:
        return False
    return "hosts" in doc.data and "command" not in doc.data


def convert_cluster(path: Path) -> tuple[ImportedCluster, str]:
    """The import and its cluster TOML, which the cluster schema accepts."""
    if path.name == ".env" or path.name.endswith(".env"):
        imported, fail = _eugr_env(path)
    else:
        doc = read(path)
        imported, fail = _sparkrun(doc), lambda key, message: doc.error(key, message)
    text = render_cluster(imported)
    error = schema_error(text, "cluster")
    if error is not None:  # at the peer key the value came from, as its comment names it
        key = error.key or ""
        sources = {f.key: f.source for f in imported.fields} | {f"env.{v.name}": v.source for v in imported.env}
        source = sources.get(key) or sources.get(key.split(".")[0], "")
        said = source.removeprefix(f"{path.name}: ")
        raise fail(said.split(" ")[0] if said != source else key,
                   f"the cluster file's `{key}` would be invalid: {error.message}")
    return imported, text


def _eugr_env(path: Path) -> tuple[ImportedCluster, Callable[[str, str], RecipegenError]]:
    shown, src = display_path(path), path.name
    values: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(read_text(path).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key, value = key.strip(), value.strip()
        problem = ("no '=': not KEY=value" if not eq else "not a variable name" if not _ENV_KEY.fullmatch(key)
                   else f"{key} again (first on line {values[key][1]})" if key in values else None)
        if problem:  # launch-cluster.sh refuses the whole file for each of these
            raise RecipegenError(Diagnostic(shown, number, None, key or None, problem))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":  # one pair of matching quotes
            value = value[1:-1]
        values[key] = (value, number)

    def fail(key: str, message: str) -> RecipegenError:  # a key the file has, at its line; else the file alone
        return RecipegenError(Diagnostic(shown, values[key][1], None, key, message) if key in values
                              else Diagnostic(shown, None, None, None, message))

    hosts = [h.strip() for h in values.get("CLUSTER_NODES", ("", 0))[0].split(",") if h.strip()]
    if not hosts:
        raise fail("CLUSTER_NODES", "no CLUSTER_NODES: the .env names no nodes (eugr's --discover writes them)")
    fields: list[Field] = [Field("name", _stem(path), f"{src}: the file's folder")]
    if "MASTER_PORT" in values:
        port = port_number(values["MASTER_PORT"][0])
        if port is None:
            raise fail("MASTER_PORT", f"{values['MASTER_PORT'][0]!r} is not a port number (1 to 65535)")
        fields.append(Field("master_port", port, f"{src}: MASTER_PORT"))
        fields.append(Field("ray_port", port, f"{src}: MASTER_PORT (launch-cluster.sh's start_ray_head "
                                                   f"--port: one port for Ray's head and torch's rendezvous)"))
    env: list[EnvVar] = []
    pass_env: list[str] = []
    named: list[NotCarried] = []
    if values.get("ETH_IF", ("",))[0]:
        env += [EnvVar(v, values["ETH_IF"][0], f"{src}: ETH_IF (run-cluster-node.sh exports it)") for v in _ETH_VARS]
    else:
        named.append(NotCarried("ETH_IF", None, "unset (eugr detects it at run time): run `recipegen cluster probe`"
                                                " to propose NCCL_SOCKET_IFNAME and the other socket variables"))
    if values.get("IB_IF", ("",))[0]:
        env += [EnvVar("NCCL_IB_HCA", values["IB_IF"][0], f"{src}: IB_IF (run-cluster-node.sh exports it)"),
                EnvVar("NCCL_IB_DISABLE", "0", f"{src}: IB_IF set (run-cluster-node.sh exports it)")]
    for key, (value, number) in values.items():
        if key.startswith("CONTAINER_") and key != "CONTAINER_NAME":
            name = key.removeprefix("CONTAINER_")
            if secret_env(name, value):
                pass_env.append(name)
                named.append(NotCarried(key, number, f"a secret: its value is not written; {name} goes in "
                                                     f"pass_env (export it in the shell that runs `recipegen up`)"))
            else:
                env.append(EnvVar(name, value, f"{src}: {key} (launch-cluster.sh passes it as -e {name})"))
        elif key not in _ENV_KEYS_USED:
            named.append(NotCarried(key, number, "a setting of eugr's scripts with no recipegen home"))
    if pass_env:
        fields.append(Field("pass_env", pass_env, f"{src}: CONTAINER_* secrets, passed by name"))
    nodes = _nodes(hosts, f"{src}: CLUSTER_NODES", lambda m: fail("CLUSTER_NODES", m))
    return ImportedCluster(path, "eugr .env", tuple(fields), tuple(env), nodes, tuple(named)), fail


def _sparkrun(doc: YamlFile) -> ImportedCluster:
    data, src = doc.data, doc.name
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise doc.error("hosts", "must be a non-empty list of host names or addresses")
    fields = [Field("name", str(data.get("name") or doc.path.stem), f"{src}: name")]
    if data.get("user"):
        fields.append(Field("user", str(data["user"]), f"{src}: user"))
    if data.get("cache_dir"):
        fields.append(Field("hf_cache", str(data["cache_dir"]), f"{src}: cache_dir (sparkrun mounts it as the "
                                                                 f"Hugging Face cache)"))
    named = [NotCarried(k, doc.line(k), why) for k, why in (
        ("transfer_mode", "how sparkrun copies models and images: `recipegen models` / `images` go node to node"),
        ("transfer_interface", "which network sparkrun copies over: recipegen copies over the fabric addresses"),
        ("topology", "sparkrun's CX7 topology hint: no recipegen home"),
        ("description", "free text: no recipegen home")) if data.get(k)]
    named.append(NotCarried("hosts", doc.line("hosts"), "sparkrun detects each node's CX7 address and interfaces at "
                                                       "run time: the addresses below are the hosts as given; run "
                                                       "`recipegen cluster probe` for the fabric's and its [env]"))
    nodes = _nodes(hosts, f"{src}: hosts", lambda m: doc.error("hosts", m))
    return ImportedCluster(doc.path, "sparkrun cluster", tuple(fields), (), nodes, tuple(named))


def _nodes(hosts: list[str], source: str, fail: Callable[[str], Exception]) -> tuple[NodeEntry, ...]:
    """The nodes, head first, each at its own address (the cluster file refuses an address given twice)."""
    nodes: list[NodeEntry] = []
    for i, host in enumerate(hosts):
        address = _ipv4(host, fail)
        first = next((j for j, n in enumerate(nodes) if n.address == address), None)
        if first is not None:
            raise fail(f"'{host}' is given twice (entries {first + 1} and {i + 1}): each node has its own address")
        nodes.append(NodeEntry(f"spark{i + 1}", address, host, f"{source}[{i}]" + (" (the head)" if i == 0 else "")))
    return tuple(nodes)


def _ipv4(host: str, fail: Callable[[str], Exception]) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        raise fail(f"'{host}' is not an IPv4 address: a node's address is its fabric address; run `recipegen "
                   f"cluster probe --context ...` to find it") from None


def _stem(path: Path) -> str:
    """`lab.env` -> lab; a bare `.env` is named after its folder (eugr's checkout)."""
    return (path.name.removesuffix(".env") or path.resolve().parent.name or "eugr").strip(".") or "eugr"


def render_cluster(c: ImportedCluster) -> str:
    src = c.source.name
    out = [SCHEMA_LINE, f"# Imported by `recipegen import` from {src} ({c.peer}); each value names its source.",
           "# Contexts are proposed: `recipegen contexts` says whether they exist and answer."]
    out += [comment(f"not carried: {src}:{n.line or '?'}: {n.key}: {n.message}") for n in c.not_carried]
    for f in c.fields:
        out += entry(f.key, f.value, f.source)
    if c.env:
        out += ["", "[env]"]
        for var in c.env:
            out += entry(var.name, var.value, var.source)
    user = next((str(f.value) for f in c.fields if f.key == "user"), "root")  # the schema's default user
    for node in c.nodes:
        proposed = f"proposed: `recipegen contexts --create` makes it ssh://{user}@{node.ssh_host}"
        out += ["", "[[nodes]]", *entry("name", node.name, "recipegen's name for the node"),
                *entry("address", node.address, node.source), *entry("context", node.name, proposed),
                *entry("ssh_host", node.ssh_host, node.source)]
    return "\n".join(out) + "\n"


def write_cluster(path: Path, text: str, force: bool) -> None:
    """One rename: the old file or the new one, never half of either. Without `force`, a hard link that fails
    when the file exists: the check is the write itself (an import started meanwhile may have written it)."""
    try:
        write_atomic(path, text, force)
    except FileExistsError:
        raise cluster_exists(path) from None


def cluster_exists(path: Path) -> RecipegenError:
    return RecipegenError(Diagnostic(display_path(path), None, None, None,
                                     "the project has a cluster file: pass --force to replace it"))
