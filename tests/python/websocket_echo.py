"""WebSocket echo through courtesy with Python's `websockets` (>= 15: its `proxy=` argument), as a
user of it writes one (tests/it/websockets.rs).

    python3 websocket_echo.py <proxy URL> <ws:// or wss:// URL> [<CA file to trust for wss>]

`websockets` reaches both ws:// and wss:// through an HTTP proxy with CONNECT; for wss:// the
TLS inside the tunnel is courtesy's (its CA given as the third argument). Sends three text
messages and prints each echo on a line of its own; exits 1 on any error. Every wait is bounded.
"""

import asyncio
import ssl
import sys

from websockets.asyncio.client import connect


async def main() -> None:
    proxy, url = sys.argv[1], sys.argv[2]
    context = None
    if url.startswith("wss://"):
        context = ssl.create_default_context(cafile=sys.argv[3])
    async with connect(url, proxy=proxy, ssl=context, open_timeout=20) as socket:
        for n in range(3):
            await socket.send(f"python {n}")
            print(await asyncio.wait_for(socket.recv(), 20), flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    except Exception as err:  # the test prints what went wrong
        print(f"failed: {err!r}", file=sys.stderr)
        sys.exit(1)
