"""A TCP relay: listens on a port and passes each connection on to a target. Killing it cuts
every connection at once and refuses new ones, as a node cut off from its database sees it.

Usage: relay.py LISTEN_PORT TARGET_HOST TARGET_PORT
Prints "relaying" once it listens.
"""

import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main():
    port, host, target = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])

    async def relay(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(host, target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer), pipe(server_reader, client_writer)
        )

    server = await asyncio.start_server(relay, "127.0.0.1", port, reuse_address=True)
    print("relaying", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
