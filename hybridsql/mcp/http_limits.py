"""The HTTP server's connections, bounded before any request reaches the app.

uvicorn times out a connection only between requests (keep-alive): one that sends half a
request and waits is held for ever, needs no key (the key is checked once the headers are
whole), and enough of them use every file descriptor. So each connection here:

- must deliver each request whole (headers and body) within ``request_seconds`` of its
  connection or of its previous response, or it is closed;
- counts, until a request of it carries a valid key, among its address's connections without
  one: beyond ``per_client`` of those, the oldest that has been read (or that has sent nothing
  for ``GRACE_SECONDS``) is closed. A connection is never closed before its first bytes are
  read, so a keyed client gets in whatever the clients without a key on its address do, and
  one that has shown its key is not counted: key-less clients cannot lock out keyed ones on
  the same address (a proxy's, a NAT's);
- is refused at once beyond ``total`` open connections in all (kept below the descriptor limit,
  so that accept() never fails for want of one);
- when refused or closed, is said on stderr once per address and reason, then at most once a
  minute with the count since: a flood makes a few lines, not one per event.
"""

import resource
import sys
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_SECONDS = 10.0
PER_CLIENT = 64
GRACE_SECONDS = 1.0  # how long a connection that has sent nothing is kept from being closed
REPEAT_SECONDS = 60.0


def descriptor_limit() -> int:
    """Raises the soft limit on open files to the hard one (as servers do) and returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


class Refusals:
    """Says each (address, reason) once, then at most once every REPEAT_SECONDS."""

    def __init__(self):
        self.said: dict[tuple, list] = {}  # (address, reason) -> [when said, count since]

    def note(self, address: str, reason: str) -> None:
        now = time.monotonic()
        entry = self.said.get((address, reason))
        if entry is not None and now - entry[0] < REPEAT_SECONDS:
            entry[1] += 1
            return
        more = f" ({entry[1]} more since)" if entry is not None and entry[1] else ""
        print(f"hybridsql mcp: {address}: {reason}{more}", file=sys.stderr, flush=True)
        self.said[(address, reason)] = [now, 0]
        if len(self.said) > 10000:  # many addresses: forget the oldest
            for key in sorted(self.said, key=lambda k: self.said[k][0])[:5000]:
                del self.said[key]


def limited_protocol(
    total: int,
    keyed=lambda headers: True,
    per_client: int = PER_CLIENT,
    request_seconds=REQUEST_SECONDS,
):
    """uvicorn's h11 protocol with these limits (one class per server: the counts are its).
    ``keyed(headers)`` says whether a request's headers carry a valid key."""
    keyless: dict[str, dict] = {}  # address -> its connections without a key, oldest first
    refusals = Refusals()

    class Limited(H11Protocol):
        refused = False
        deadline = None
        address = "?"
        opened = 0.0
        read = False  # bytes of it were read, and carried no valid key
        keyed = False

        def connection_made(self, transport):
            peer = transport.get_extra_info("peername")
            self.address = peer[0] if peer else "?"
            if len(self.connections) >= total:
                return self.refuse(transport, f"refused: {total} connections are open in all")
            self.opened = time.monotonic()
            keyless.setdefault(self.address, {})[self] = None
            super().connection_made(transport)
            self.arm()
            self.trim()

        def refuse(self, transport, reason: str) -> None:
            self.refused = True
            refusals.note(self.address, reason)
            transport.abort()

        def trim(self) -> None:
            """Closes the oldest connections without a key of this address that have been
            read (or sent nothing for GRACE_SECONDS) while it has more than per_client."""
            waiting = keyless.get(self.address, {})
            now = time.monotonic()
            excess = len(waiting) - per_client
            for other in [c for c in waiting if c.read or now - c.opened > GRACE_SECONDS]:
                if excess <= 0:
                    break
                excess -= 1
                other.forget()
                reason = f"closed: {per_client} connections without a key already open"
                refusals.note(self.address, reason)
                other.transport.abort()

        def forget(self) -> None:
            waiting = keyless.get(self.address)
            if waiting is not None:
                waiting.pop(self, None)
                if not waiting:
                    del keyless[self.address]

        def connection_lost(self, exc):
            if self.refused:
                return
            self.forget()
            self.disarm()
            super().connection_lost(exc)

        def arm(self) -> None:
            self.disarm()
            self.deadline = self.loop.call_later(request_seconds, self.too_slow)

        def disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
                self.disarm()  # the request is whole (or the connection is ending)
            if self.keyed or self.transport.is_closing():
                return
            if self.conn.their_state is not h11.IDLE and self.headers and keyed(self.headers):
                self.keyed = True  # its headers are in, with a valid key
                self.forget()
            else:
                self.read = True
                self.trim()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self.arm()  # the next request has as long

        def too_slow(self) -> None:
            self.deadline = None
            if not self.transport.is_closing():
                refusals.note(
                    self.address, f"closed: no whole request within {request_seconds:g} s"
                )
                self.transport.abort()

    return Limited
