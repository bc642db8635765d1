"""Work spread over threads: a text on each core at once (LocalProvider.embed)."""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable

# What the local model checks before each window it runs, where SQL embed() is asked to stop when
# its statement is interrupted (embed.register_embed sets it around the call; None elsewhere).
_STOP: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "_STOP", default=None
)


class _Interrupted(Exception):
    """The statement that called embed() was interrupted: no vector, and nothing cached."""


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _spread(run, count: int, threads: int) -> None:
    """``run(0)`` ... ``run(count - 1)`` on up to ``threads`` threads, this one among them, each
    taking the next number when it is free; the first error is raised here once all stopped."""
    taken = iter(range(count))
    lock = threading.Lock()
    errors = []

    def work() -> None:
        while not errors:
            with lock:
                b = next(taken, None)
            if b is None:
                return
            try:
                run(b)
            except BaseException as e:
                errors.append(e)

    helpers = [threading.Thread(target=work, daemon=True) for _ in range(min(threads, count) - 1)]
    for helper in helpers:
        helper.start()
    try:
        work()
    except BaseException as e:  # Ctrl-C between two batches
        errors.append(e)
    for helper in helpers:
        while helper.is_alive():  # a thread inside the model when Python exits aborts it
            try:
                helper.join()
            except BaseException as e:
                errors.append(e)
    if errors:
        raise errors[0]
