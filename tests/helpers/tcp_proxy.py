"""A TCP proxy on 127.0.0.1 that a test can cut and restore, for "the database was lost mid-run".

    with TcpProxy("127.0.0.1", 5432) as proxy:   # proxy.port: point the client here
        proxy.cut()       # closes the listener and every open connection (clients see a lost server)
        proxy.restore()   # listens again on the same port

It runs an asyncio loop in a thread of its own; ``cut`` and ``restore`` return once done.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self.restore()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def restore(self) -> None:
        async def listen() -> None:
            if self._server is None:
                self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

        self._run(listen())

    def cut(self) -> None:
        async def close() -> None:
            server, self._server = self._server, None
            if server is not None:
                server.close()
            for w in list(self._writers):
                with contextlib.suppress(Exception):
                    w.transport.abort()
            self._writers.clear()
            if server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(server.wait_closed(), 5)

        self._run(close())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers.difference_update((writer, up_writer))
