"""Stand-in for `python3 -m sglang.launch_server --model-path M [flags]`, with vLLM's rank protocol:
rank 0 listens on the --dist-init-addr port, waits for --nnodes - 1 ranks, then serves HTTP;
ranks > 0 join it (exit 1 if unreachable) and serve no HTTP.
The default --host is 127.0.0.1, as in SGLang: a recipe must ask for 0.0.0.0 to be reachable.
"""

from __future__ import annotations

import sys

from labengine.common import Log, Rendezvous, integers, join, on_stop, parse_flags, serve, stay

log = Log("sglang")


def _boolean(flag: str) -> bool:
    return flag == "--trust-remote-code" or flag.startswith(("--enable-", "--disable-"))


def main(args: list[str]) -> None:
    on_stop(log)
    log.start(["-m", "sglang.launch_server", *args])
    flags, _ = parse_flags(args, _boolean)
    model = flags.get("--model-path") or flags.get("--model")
    if not model:
        log.die("no --model-path given")
    n = integers(log, port=flags.get("--port", "30000"), nnodes=flags.get("--nnodes", "1"),
                 rank=flags.get("--node-rank", "0"))
    if n["nnodes"] > 1:
        dist_init = flags.get("--dist-init-addr", "")
        if not dist_init:
            log.die(f"--nnodes {n['nnodes']} needs --dist-init-addr HOST:PORT")
        host, _, port = dist_init.rpartition(":")
        if n["rank"] > 0:
            join(log, host, port, f"rank {n['rank']}")
            stay()
        Rendezvous(log, int(port), "/tmp/sglang/ranks").wait(n["nnodes"] - 1, "ranks")
    serve(log, flags.get("--host", "127.0.0.1"), n["port"], flags.get("--served-model-name") or model, "sglang",
          flags)


if __name__ == "__main__":
    main(sys.argv[1:])
