"""Run files: ``<tag>.data`` (events), ``<tag>.stdout`` and ``<tag>.stderr`` (raw text).

Every event is written and flushed as it arrives, so a run killed at any moment leaves
valid lines behind (docs/run-data.md section 1). Files are opened in append mode
(``--resume`` adds to an existing run folder) and closed at the tag's ``end`` event.

A write that fails (a full disk, a quota) is not a benchmark's fault: the file is cut back
to its last complete line, so what was written stays valid JSON lines, nothing more is
written, and `RunFileSink.write_error` names the file for the session to report.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from milabench.events import DATA_FORMAT_VERSION, FORMAT_KEY, encode, redact

# Events whose payload comes from the benchmark's stream: written as they are (the
# orchestrator-made ones may hold configuration values and are redacted).
_STREAM_EVENTS = frozenset({"line", "data"})


class _TagFiles:
    __slots__ = ("data", "stdout", "stderr")

    def __init__(self, run_dir: Path, tag: str) -> None:
        self.data = open(run_dir / f"{tag}.data", "a", encoding="utf-8")
        self.stdout: IO[str] | None = None
        self.stderr: IO[str] | None = None

    def close(self) -> None:
        for f in (self.data, self.stdout, self.stderr):
            if f is not None:
                f.close()

    def discard(self) -> None:
        """Close every file, dropping what could not be written."""
        for f in (self.data, self.stdout, self.stderr):
            if f is None:
                continue
            try:
                f.close()  # flushes what is buffered: fails again on a full disk
            except OSError:
                pass


class RunFileSink:
    """Writes every event of every tag under ``run_dir`` (many tags at once)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, _TagFiles] = {}
        # "<file>: <reason>" for the first write that failed; then nothing more is written.
        self.write_error: str | None = None

    def _get(self, tag: str) -> _TagFiles:
        files = self._files.get(tag)
        if files is None:
            files = self._files[tag] = _TagFiles(self.run_dir, tag)
        return files

    def _text(self, files: _TagFiles, tag: str, pipe: str) -> IO[str]:
        f = getattr(files, pipe)
        if f is None:
            f = open(self.run_dir / f"{tag}.{pipe}", "a", encoding="utf-8")
            setattr(files, pipe, f)
        return f

    def _encode(self, event: dict, text_out: dict[str, list[str]]) -> str:
        name = event.get("event")
        data = event.get("data")
        pipe = event.get("pipe")
        if name == "line" and pipe in ("stdout", "stderr"):
            text_out[pipe].append(f"{data}\n" if isinstance(data, str) else "\n")
        raw = event.get("_json")
        if raw is not None and name == "data":
            # The benchmark's own (already validated, strict) JSON text: no re-encoding.
            return f'{{"event": "data", "data": {raw}, "pipe": "data"}}\n'
        if name not in _STREAM_EVENTS:
            data = redact(data)
        extra = {
            k: v
            for k, v in event.items()
            if k not in ("event", "data", "pipe") and not k.startswith("_")
        }
        if name == "config":  # the file's format version, once per file (its first line)
            extra[FORMAT_KEY] = DATA_FORMAT_VERSION
        return encode(name, data, pipe, **extra)

    def on_events(self, tag: str, events: list[dict]) -> None:
        """A batch of events of one tag: one write (and flush) per file."""
        if self.write_error is not None:
            return
        try:
            self._write(tag, events)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        """Stop writing; cut every open file back to its last complete line."""
        name = exc.filename or "a run file"
        self.write_error = f"cannot write {name}: {exc.strerror or exc}"
        for files in self._files.values():
            files.discard()
            for f in (files.data, files.stdout, files.stderr):
                if f is not None:
                    _cut_to_last_line(Path(f.name))
        self._files.clear()

    def _write(self, tag: str, events: list[dict]) -> None:
        files = self._get(tag)
        text: dict[str, list[str]] = {"stdout": [], "stderr": []}
        chunk = "".join([self._encode(ev, text) for ev in events])
        for pipe, lines in text.items():
            if lines:
                out = self._text(files, tag, pipe)
                _write(out, "".join(lines))
        _write(files.data, chunk)
        if events[-1].get("event") == "end":
            files.close()
            del self._files[tag]

    def on_event(self, tag: str, event: dict) -> None:
        self.on_events(tag, [event])

    def close(self) -> None:
        for files in self._files.values():
            try:
                files.close()
            except OSError as exc:
                self._failed(exc)
                break
        self._files.clear()


def _write(f: IO[str], text: str) -> None:
    """Write and flush; an OSError names the file."""
    try:
        f.write(text)
        f.flush()
    except OSError as exc:
        if exc.filename is None:
            exc.filename = f.name
        raise


def _cut_to_last_line(path: Path) -> None:
    """Truncate `path` after its last newline (a partly written line is dropped)."""
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, 2)
            start = max(size - (1 << 16), 0)
            while True:
                f.seek(start)
                block = f.read(size - start)
                cut = block.rfind(b"\n")
                if cut >= 0:
                    f.truncate(start + cut + 1)
                    return
                if start == 0:
                    f.truncate(0)
                    return
                size, start = start, max(start - (1 << 16), 0)
    except OSError:
        pass
