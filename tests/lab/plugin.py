"""pytest plugin of the lab (tests/conftest.py: `pytest_plugins = ["lab.plugin"]`).

Fixtures:
  lab          session-scoped started Lab with at least 3 nodes (spark1..spark3).
  lab_factory  session-scoped callable: lab_factory(n) -> the same Lab grown to at least n nodes;
               use lab.nodes[:n] (e.g. lab.write_cluster(path, lab.nodes[:n])). One Lab serves
               the whole session: fewer dockerds on the 2 cores, and each size costs one start.
  clean_lab    function-scoped: the session Lab after lab.reset() (all dockerds up, no swarm,
               no containers), for tests that must not see what earlier tests left.
  ray_lab      function-scoped: clean_lab with the Ray image (a real Ray, lab/rayimage.py) on every
               node; the image is made and loaded when the first test asks for it.
  vllm_lab     function-scoped: clean_lab with the real-vLLM image (vLLM's CPU build, lab/vllmimage.py) on
               the first two nodes and the tiny Llama (lab/tinymodel.py) in their Hugging Face caches.

Where the lab cannot run, its tests are skipped with the reason, except under CI (env CI set),
where they fail: in CI the lab tests must run. The same for the Ray and real-vLLM tests without their
cached wheels (.ci/run downloads them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from . import rayimage, tinymodel, vllmimage
from .netlab import Lab, unavailable_reason

LAB_FIXTURES = {"lab", "lab_factory", "clean_lab", "ray_lab", "vllm_lab"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: needs the real multi-node Docker lab (root, dockerd)")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a lab fixture `lab`, so `-m "not lab"` deselects them, and put them in one
    xdist group: one Lab serves the session, so its tests run one after another in one worker, in file order,
    while the other worker runs the rest."""
    for item in items:
        if LAB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.lab)
            item.add_marker(pytest.mark.xdist_group("lab"))


def _require_lab() -> None:
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the lab cannot run, and CI must run it: {reason}", pytrace=False)
    print(f"\nlab tests skipped: {reason}")
    pytest.skip(f"lab unavailable: {reason}")


@pytest.fixture(scope="session")
def lab_factory() -> Iterator[Callable[[int], Lab]]:
    shared: list[Lab] = []
    failure: list[BaseException] = []

    def get(nodes: int = 3) -> Lab:
        _require_lab()
        if failure:  # do not retry a failed start-up in every test
            raise failure[0]
        try:
            if not shared:
                shared.append(Lab(nodes).start())
                _report(shared[0], "setup")
            elif len(shared[0].nodes) < nodes:
                shared[0].add_nodes(nodes - len(shared[0].nodes))
        except Exception as err:
            failure.append(err)
            raise
        return shared[0]

    with _sigterm_as_interrupt():
        yield get
    for lab in shared:
        lab.stop()
        _report(lab, "teardown")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM (a CI timeout, `kill`) into KeyboardInterrupt while the lab may run, so that
    pytest still tears it down instead of leaving dockerds behind. SIGKILL cannot be caught:
    the next run's leftover clearing handles that. Under xdist this is the lab's worker: a SIGTERM to the main
    pytest process reaches it only through execnet's shutdown, which may not wait for the teardown; the same
    clearing then handles what stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def lab(lab_factory: Callable[[int], Lab]) -> Lab:
    return lab_factory(3)


@pytest.fixture
def clean_lab(lab: Lab) -> Lab:
    lab.reset()
    return lab


def _require(what: str, reason: str | None) -> None:
    """Skip (outside CI) or fail (in CI) when an image of the lab cannot be made here."""
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the {what} lab tests cannot run, and CI must run them: {reason}", pytrace=False)
        print(f"\n{what} lab tests skipped: {reason}")
        pytest.skip(f"{what} image unavailable: {reason}")


def prepare_vllm(lab: Lab) -> Lab:
    """The lab reset, with the real-vLLM image on its first two nodes and the tiny Llama in their Hugging Face
    caches (for a module-scoped deployment that several tests share; vllm_lab for one test)."""
    _require("real-vLLM", vllmimage.unavailable_reason())
    lab.reset()
    made = "vllm image" in lab.timings
    lab.provide_vllm_image(lab.nodes[:2])
    for node in lab.nodes[:2]:
        tinymodel.put_in_cache(node.hf_cache)
    if not made:  # its cost, once (shown with -n 0 -s)
        t = lab.timings
        print(f"\nlab {lab.tag} real-vLLM image: layer {t['vllm layer']:.1f}s, image {t['vllm image']:.1f}s, "
              f"loaded on 2 nodes in {t['vllm image load']:.1f}s")
    return lab


@pytest.fixture
def vllm_lab(lab: Lab) -> Lab:
    return prepare_vllm(lab)


@pytest.fixture
def ray_lab(clean_lab: Lab) -> Lab:
    _require("Ray", rayimage.unavailable_reason())
    made = "ray image" in clean_lab.timings
    clean_lab.provide_ray_image()
    if not made:  # its cost, once (shown with -n 0 -s)
        print(f"\nlab {clean_lab.tag} Ray image: made in {clean_lab.timings['ray image']:.1f}s, loaded on "
              f"{len(clean_lab.nodes)} nodes in {clean_lab.timings['ray image load']:.1f}s")
    return clean_lab


def _report(lab: Lab, what: str) -> None:
    """Print how long the lab took (shown with -n 0 -s), to keep an eye on its cost."""
    steps = {k: v for k, v in lab.timings.items() if (k == "teardown") == (what == "teardown")}
    detail = ", ".join(f"{k} {v:.1f}s" for k, v in steps.items())
    print(f"\nlab {lab.tag} ({len(lab.nodes)} nodes) {what}: {detail}")
