"""Streams and events of the ``trnsim`` device (``torch.trnsim.Stream``, ``Event``,
``current_stream``, ``stream``), what FSDP2 and other stream-aware code ask of a device.

Execution is synchronous: every device program runs to completion when it is issued, in issue
order. That order satisfies every ordering a stream program states (an event is recorded after
the work before it was issued, and a wait comes after the record), so results are those of any
correct schedule. What streams change is *time*: each stream has its own simulated clock. A
program issued on a stream starts when that stream is free and advances its clock by the
program's estimated makespan; ``wait_event`` / ``wait_stream`` move a clock forward to the other
stream's recorded time; ``Event.elapsed_time`` is the simulated time between two records, in
milliseconds, as on CUDA. The device report's ``"streams"`` section gives each stream's busy time,
the device's span (the latest clock) and the overlap the streams bought (busy sum - span).

Not modelled: a missing wait between streams is not detected (issue order hides it, as a
serialising runtime would), and the streams do not contend for engines (two streams' programs
that overlap in simulated time each take their own makespan)."""

from __future__ import annotations

import itertools
from typing import Any, Self

import torch

from . import _report

_ids = itertools.count(1)


def _device():
    from ._device import DEVICE_NAME

    return torch.device(DEVICE_NAME, 0)


class Stream:
    """A queue of device work with its own simulated clock (``torch.cuda.Stream``'s surface)."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        if device is not None:
            d = torch.device(device) if not isinstance(device, int) else _device()
            if d.type != _device().type:
                raise ValueError(f"torch.{_device().type}.Stream: device {d} is not a {_device().type} device")
        self.device = _device()
        self.priority = int(priority)
        self.stream_id = next(_ids)
        self.clock_ns = 0.0
        self.busy_ns = 0.0
        self.programs = 0
        _STATE.streams.append(self)

    # as torch.Stream: the c10 DeviceType number (PrivateUse1) and the device index
    device_type = property(lambda self: int(torch._C._autograd.DeviceType.PrivateUse1))
    device_index = property(lambda self: 0)

    def wait_event(self, event: Event) -> None:
        """Work issued on this stream after the call starts after ``event``'s record."""
        if event is not None and event.time_ns is not None:
            self.clock_ns = max(self.clock_ns, event.time_ns)

    def wait_stream(self, stream: Stream) -> None:
        """Work issued on this stream after the call starts after all work issued on ``stream``."""
        self.clock_ns = max(self.clock_ns, stream.clock_ns)

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        return True  # synchronous execution: issued work has completed

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> Self:
        _STATE.stack().append(self)
        return self

    def __exit__(self, *exc: object) -> bool:
        _STATE.stack().pop()
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("trnsim-stream", self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.{self.device.type}.Stream device={self.device} stream_id={self.stream_id} priority={self.priority}>"


class Event:
    """A point in a stream's simulated time (``torch.cuda.Event``'s surface)."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **kwargs: Any
    ) -> None:
        self.enable_timing = bool(enable_timing)
        self.time_ns: float | None = None
        self.stream: Stream | None = None

    def record(self, stream: Stream | None = None) -> None:
        stream = current_stream() if stream is None else stream
        self.stream = stream
        self.time_ns = stream.clock_ns

    def wait(self, stream: Stream | None = None) -> None:
        (current_stream() if stream is None else stream).wait_event(self)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Event) -> float:
        """Simulated milliseconds from this event's record to ``end_event``'s."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError(f"torch.{_device().type}.Event.elapsed_time: both events need enable_timing=True")
        if self.time_ns is None or end_event.time_ns is None:
            raise RuntimeError(f"torch.{_device().type}.Event.elapsed_time: both events must be recorded first")
        return (end_event.time_ns - self.time_ns) / 1e6

    def __repr__(self) -> str:
        at = "unrecorded" if self.time_ns is None else f"{self.time_ns:.0f} ns"
        return f"<torch.{_device().type}.Event {at}>"


class _State:
    def __init__(self) -> None:
        self.streams: list[Stream] = []
        self.default: Stream | None = None
        self._stack: list[Stream] = []

    def stack(self) -> list[Stream]:
        return self._stack


_STATE = _State()


def default_stream(device: Any = None) -> Stream:
    if _STATE.default is None:
        _STATE.default = Stream()
    return _STATE.default


def current_stream(device: Any = None) -> Stream:
    st = _STATE.stack()
    return st[-1] if st else default_stream()


def set_stream(stream: Stream) -> None:
    """Make ``stream`` current. Inside ``with stream(s):`` it stays current until the block ends,
    which restores the stream current at its start (as on CUDA)."""
    st = _STATE.stack()
    if st:
        st[-1] = stream
    else:
        st.append(stream)


class StreamContext:
    """``with torch.trnsim.stream(s):`` (``None`` is a no-op, as on CUDA)."""

    def __init__(self, stream: Stream | None) -> None:
        self.s = stream

    def __enter__(self) -> Stream | None:
        if self.s is not None:
            self.s.__enter__()
        return self.s

    def __exit__(self, *exc: object) -> bool:
        if self.s is not None:
            self.s.__exit__(*exc)
        return False


def stream(s: Stream | None) -> StreamContext:
    return StreamContext(s)


def synchronize(device: Any = None) -> None:
    """Every stream's issued work is done (it ran when issued)."""


def _on_program(est_ns: float) -> None:
    s = current_stream()
    s.clock_ns += est_ns
    s.busy_ns += est_ns
    s.programs += 1


def _section() -> dict[str, Any] | None:
    if len(_STATE.streams) <= 1:
        return None  # only the default stream: the run's totals say it all
    used = [s for s in _STATE.streams if s.programs]
    busy = sum(s.busy_ns for s in used)
    span = max((s.clock_ns for s in _STATE.streams), default=0.0)
    return {
        "streams": [
            {
                "stream_id": s.stream_id,
                "priority": s.priority,
                "programs": s.programs,
                "busy_us": round(s.busy_ns / 1000, 3),
                "clock_us": round(s.clock_ns / 1000, 3),
            }
            for s in used
        ],
        "busy_us": round(busy / 1000, 3),
        "span_us": round(span / 1000, 3),
        "overlap_us": round(max(busy - span, 0.0) / 1000, 3),
    }


def _reset() -> None:
    for s in _STATE.streams:
        s.clock_ns = s.busy_ns = 0.0
        s.programs = 0


def register() -> None:
    _report.ON_RUN.append(_on_program)
    _report.SECTIONS["streams"] = _section
    _report.RESETS.append(_reset)
