"""The hub token a Jupyter server's new terminal sees, asked through the server's terminal API (the
course server's and the hub's tests check that no terminal gets it)."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request


def terminal_token(base: str, token: str) -> str:
    """The hub token a new terminal of the server at `base` sees ("none" if it has none). In a thread
    of its own: the caller may run an event loop already (Playwright's sync API)."""
    from concurrent.futures import ThreadPoolExecutor

    command = 'echo "T""OKEN=${JUPYTERHUB_API_TOKEN:-${JPY_API_TOKEN:-none}}."'
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _terminal_says(base, token, command)).result()


async def _terminal_says(base: str, token: str, command: str) -> str:
    """Open a terminal through the server's API, type `command`, return what follows TOKEN=."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(base + "/api/terminals", data=b"{}", method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with opener.open(request, timeout=30) as answer:
        name = json.loads(answer.read())["name"]
    ws = await websocket_connect(HTTPRequest(base.replace("http", "ws", 1) + f"/terminals/websocket/{name}",
                                             headers={"Authorization": f"token {token}"}))
    try:
        await ws.write_message(json.dumps(["stdin", command + "\r"]))
        seen = ""
        while True:
            raw = await asyncio.wait_for(ws.read_message(), 30)
            assert raw is not None, f"the terminal closed: {seen[-300:]}"
            message = json.loads(raw)
            if message[0] == "stdout":
                seen += message[1]
                match = re.search(r"TOKEN=([^.\s]*)\.", seen)
                if match:
                    return match.group(1)
    finally:
        ws.close()
