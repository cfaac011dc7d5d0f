#!/bin/bash
# Replace the model's chat template with the fixed one shipped beside this script.
set -e
install -D -m 0644 chat_template.jinja "$WORKSPACE_DIR/templates/qwen3.jinja"
echo "chat template installed (cost: \$0)"
