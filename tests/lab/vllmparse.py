"""Run by the image's python3 with the real vLLM on its path (tests/test_vllm_parser.py): read a JSON list of
`vllm serve` argument lists on stdin, parse each with vLLM's own serve parser (make_arg_parser, as `vllm serve`
builds it), run its own checks of the parsed arguments, then build its engine configuration from them (the model's
config.json read from the path given, as the engine does before it loads any weight), and print per argv what vLLM
made of the words recipegen writes, or its own error.

Not a test module: it imports vLLM, which this machine's interpreter does not have.
"""

import contextlib
import io
import json
import sys


PARSED = ("model", "headless", "host", "port", "served_model_name", "tensor_parallel_size", "pipeline_parallel_size",
          "nnodes", "node_rank", "master_addr", "master_port", "distributed_executor_backend")
PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "world_size", "nnodes", "node_rank", "master_addr",
            "master_port", "distributed_executor_backend")


def main() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    results = []
    for argv in json.load(sys.stdin):
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv)
            if args.model_tag is not None:
                args.model = args.model_tag  # what `vllm serve` does with its positional
            validate_parsed_serve_args(args)
        except SystemExit:
            results.append({"error": (err.getvalue().strip().splitlines() or ["exit"])[-1]})
            continue
        except Exception as exc:  # vLLM's own checks raise ValueError, TypeError ...
            results.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        result = {"parsed": {name: getattr(args, name) for name in PARSED}}
        try:
            parallel = AsyncEngineArgs.from_cli_args(args).create_engine_config().parallel_config
            result["config"] = {name: getattr(parallel, name) for name in PARALLEL}
        except Exception as exc:  # pydantic's ValidationError, ValueError ...: the engine would stop here
            result["config_error"] = f"{type(exc).__name__}: {exc}"
        results.append(result)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
