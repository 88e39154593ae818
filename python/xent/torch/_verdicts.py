"""Deferred target checks: the verdicts of CUDA forwards, read late.

A loss that requires grad checks its targets on the device
(XENT_TARGETS_DEFERRED) and the host never waits for that check inside the
step: the verdict is polled (xent_verdict_ready, no wait) by the loss's
backward, by every later deferred forward and by :func:`check_pending`,
and a bad one raises there. A rejected call's loss is NaN and its gradient
zero, so the step that ran before the error surfaced moved nothing through
that loss.
"""

import collections
import threading

from .. import _lib

# Verdicts whose check nobody has read yet, oldest first, each with the
# tensors its error message reads (targets, weights): held until it is read.
_pending = collections.deque()
# Verdicts read and free for the next forward.
_free = []
_lock = threading.Lock()
# More pending than this and the oldest is waited for: a host that runs far
# ahead of its device must not pile up pinned memory and events.
_MAX_PENDING = 64


def take(keep) -> _lib.Verdict:
    """A verdict for the next deferred forward, registered as pending with
    the tensors `keep`. Reads the verdicts the device has reached first (and
    raises the oldest bad one's error)."""
    settle(block=False)
    with _lock:
        v = _free.pop() if _free else None
    if v is None:
        v = _lib.Verdict()
    with _lock:
        _pending.append((v, keep))
    if len(_pending) > _MAX_PENDING:
        settle(block=False, oldest=True)
    return v


def settle(block: bool, oldest: bool = False) -> None:
    """Read pending verdicts, oldest first: every one the device has reached
    (block False), every one (block True, waiting), or the oldest (waiting).
    The first bad one raises its error, which names the bad row."""
    while True:
        with _lock:
            if not _pending:
                return
            v, keep = _pending[0]
            if not (block or oldest) and not v.ready():
                return
            _pending.popleft()
        try:
            v.wait()
        except _lib.XentError as e:
            raise type(e)(e.status, "a loss's deferred target check (its loss was NaN and its "
                                    "gradient zero): " + e.message) from None
        finally:
            with _lock:
                _free.append(v)
        if oldest:
            return


def poll(ctx) -> None:
    """A backward's read of its forward's deferred check (`ctx.verdict`, a
    Verdict or None, cleared here): the pending verdicts the device is past
    are read, so a bad target raises before the gradient is returned when
    the device has finished that forward; otherwise later, and the gradient
    is zero."""
    if ctx.verdict is not None:
        ctx.verdict = None
        settle(block=False)


def check_pending() -> None:
    """Wait for the target checks of every CUDA loss computed so far and
    raise the first bad one's :class:`xent.XentValueError`.

    A loss that requires grad (with ``check_targets=True``) checks its
    targets on the device without holding the host up. A bad target raises
    in that loss's backward when the device has finished the forward by
    then, and otherwise at the next xent loss or at this call; the rejected
    loss is NaN and its gradient zero. Call this where an error must surface
    at a known point (before a checkpoint, at the end of training).
    """
    settle(block=True)
