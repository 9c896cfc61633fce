"""A minimal faust-streaming app for the smoke test: one agent, in topic to out topic.

Run as ``faust -A tests.integration.faust_echo_app worker`` with ECHO_BROKER,
ECHO_IN and ECHO_OUT in the environment (a test helper, so reading the environment
here is fine).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import faust

app = faust.App(
    os.environ["ECHO_GROUP"],
    broker=f"kafka://{os.environ['ECHO_BROKER']}",
    store="memory://",
    datadir=os.environ["ECHO_DATADIR"],  # not the working directory (the repo)
    web_enabled=False,
)
source = app.topic(os.environ["ECHO_IN"], value_serializer="raw")
target = app.topic(os.environ["ECHO_OUT"], value_serializer="raw")


@app.agent(source)
async def echo(stream: AsyncIterator[bytes]) -> None:
    async for value in stream:
        await target.send(value=b"echo:" + value)
