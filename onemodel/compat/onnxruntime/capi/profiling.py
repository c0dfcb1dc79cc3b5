"""onnxruntime's session profiling (`enable_profiling`, `end_profiling`) on onemodel's per-step
trace: a JSON array of Chrome trace events as onnxruntime writes it, one event per line, with a
"model_run" event per run and one "Node" event per executed step."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class Profiler:
    """Collects the trace of every run from creation to `end()`."""

    def __init__(self, prefix: str, provider: str) -> None:
        self.start_ns = time.time_ns()
        self._origin = time.perf_counter()
        self._prefix = prefix
        self._provider = provider
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def loaded(self, started: float, seconds: float) -> None:
        """The session's creation, the first event as in onnxruntime's profiles."""
        with self._lock:
            self._events.insert(
                0, self._event("Session", "session_initialization", started, seconds, {})
            )

    def record(self, records: list[tuple], started: float, seconds: float) -> None:
        """One run: its steps (Session.run's trace records) and the run as a whole."""
        from onemodel.runner import trace_events  # the CLI's module: only when profiling

        events = [self._event("Session", "model_run", started, seconds, {})]
        for event in trace_events(records, self._origin):
            op_type = event["args"]["op"]
            events.append(
                {
                    **event,
                    "cat": "Node",
                    "name": f"{event['name']}_kernel_time",
                    "pid": os.getpid(),
                    "tid": threading.get_ident(),
                    "args": {
                        "op_name": op_type,
                        "provider": self._provider,
                        "input_type_shape": event["args"]["shapes"],
                    },
                }
            )
        with self._lock:
            self._events.extend(events)

    def _event(self, category: str, name: str, start: float, seconds: float, args: dict) -> dict:
        return {
            "cat": category,
            "pid": os.getpid(),
            "tid": threading.get_ident(),
            "dur": round(seconds * 1e6, 3),
            "ts": round((start - self._origin) * 1e6, 3),
            "ph": "X",
            "name": name,
            "args": args,
        }

    def end(self) -> str:
        """Write the profile (in the working directory, named as onnxruntime names it)."""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = Path(f"{self._prefix}_{stamp}.json")
        with self._lock:
            lines = [json.dumps(event) for event in self._events]
        path.write_text("[\n" + ",\n".join(lines) + "\n]\n")
        return str(path)
