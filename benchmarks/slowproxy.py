"""A Docker endpoint that answers slowly: a unix-socket proxy in front of a dockerd that holds every request (each
chunk the client sends) for a fixed delay before passing it on. A docker context pointing at it makes a node as
slow as a far-away one, whatever the CPU is doing, so a benchmark can tell overlap from contention:
N slow nodes handled at once cost about one node's time, one after another N times it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Iterator


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while chunk := await reader.read(65536):
            if delay:
                await asyncio.sleep(delay)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(listen: Path, upstream: Path, delay: float, ready: threading.Event,
                 stop: asyncio.Event) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            daemon_r, daemon_w = await asyncio.open_unix_connection(str(upstream))
        except OSError:
            client_w.close()
            return
        # Requests wait; answers flow at once: the delay is one per request the CLI makes.
        await asyncio.gather(_pipe(client_r, daemon_w, delay), _pipe(daemon_r, client_w, 0.0))

    server = await asyncio.start_unix_server(handle, path=str(listen))
    listen.chmod(0o660)
    ready.set()
    async with server:
        await stop.wait()


@contextlib.contextmanager
def slow_endpoint(listen: Path, upstream: Path, delay: float) -> Iterator[Path]:
    """Serve `listen` (a new unix socket) as a slow copy of `upstream` (a dockerd socket) while in the block."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(_serve(listen, upstream, delay, ready, stop)),
                              daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError(f"the slow proxy at {listen} did not start")
    try:
        yield listen
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        listen.unlink(missing_ok=True)
