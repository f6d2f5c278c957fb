"""Where the bot waits on Tonearm over the network.

Every such wait goes through an ``ExternalWait``. In the bot it is ``direct`` (just await it);
the slash-command tests run the bot inside simcord's simulated Discord, which must be told which
waits are on something outside it (the real Router) so that it does not take them for a stuck
bot — there it is simcord's ``env.external_wait``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")

ExternalWait = Callable[..., Awaitable[Any]]


async def direct(awaitable: Awaitable[T], *, reason: str) -> T:
    return await awaitable
