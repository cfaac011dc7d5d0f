#!/usr/bin/env bash
# Stand-in written for recipegen's tests, same layout and contract as eugr/spark-vllm-docker mods/fix-qwen3.5-chat-template
# (run.sh + chat_template.jinja): copy the template into $WORKSPACE_DIR, the directory the engine runs in,
# where the recipe's --chat-template unsloth.jinja finds it. Not a copy of the peer's file.
set -e
cp chat_template.jinja "$WORKSPACE_DIR/unsloth.jinja"
