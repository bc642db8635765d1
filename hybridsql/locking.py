"""One call at a time: a HybridIndex or MemoryStore that threads share (an agent's web server)
serves them in turn, as its one SQLite connection must (apsw refuses a second thread's call
while one runs, and two threads' transactions on one connection would be one)."""

import functools
import inspect


def one_call_at_a_time(cls):
    """``cls`` with each public method, its own and its bases', run under ``self.lock`` (an
    RLock): a thread's call waits for another's to return, and a method that calls another
    takes the lock again without waiting."""
    for name in dir(cls):
        method = inspect.getattr_static(cls, name)
        if not name.startswith("_") and inspect.isfunction(method):
            setattr(cls, name, _locked(method))
    return cls


def _locked(method):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)

    return call
