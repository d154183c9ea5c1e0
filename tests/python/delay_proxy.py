#!/usr/bin/python3
"""A TCP relay that delays every byte by a fixed time each way: link latency
where tc's netem is not available (these machines' kernels lack it).

    delay_proxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS

Each chunk read from one side is written to the other DELAY_MS after it was
read, in order; the connection's two directions are independent, so a
round trip costs 2 x DELAY_MS. Prints "listening" once it accepts.
"""
from __future__ import annotations

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((loop.time() + delay, data or None))
            if not data:
                break
    except (ConnectionError, OSError):
        queue.put_nowait((loop.time(), None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def main() -> None:
    host, port, t_host, t_port, delay_ms = sys.argv[1:6]
    delay = float(delay_ms) / 1000

    async def serve(reader, writer) -> None:
        try:
            t_reader, t_writer = await asyncio.open_connection(t_host, int(t_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, t_writer, delay), pipe(t_reader, writer, delay))

    server = await asyncio.start_server(serve, host, int(port))
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
