"""Stand-in for the `sglang` package: only `python3 -m sglang.launch_server` (see launch_server)."""
