#!/bin/bash
# A stand-in for eugr/spark-vllm-docker mods/drop-caches (only where the import finds it is under test).
set -e
