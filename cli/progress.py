"""The progress line on stderr: clip i of n, frames per second, time left; silent with ``--quiet``."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


def _duration(seconds):
    seconds = max(0, int(round(seconds)))
    if seconds >= 3600:
        return "{}h{:02d}m".format(seconds // 3600, seconds % 3600 // 60)
    if seconds >= 60:
        return "{}m{:02d}s".format(seconds // 60, seconds % 60)
    return "{}s".format(seconds)


class Progress:
    """Progress line on stderr: clip i of n, frames per second, time left.

    On a terminal the line is rewritten in place; otherwise one line is
    written per update, at most every ``interval`` seconds.

    Parameters
    ----------
    total_clips : int
    total_frames : int
        Frames of all clips (for the time left).
    quiet : bool
        Write nothing.
    stream : file, optional
        Default ``sys.stderr``.
    """

    def __init__(self, total_clips, total_frames=0, quiet=False, stream=None, interval=1.0):
        self.total_clips = total_clips
        self.total_frames = max(int(total_frames), 0)
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.interval = interval
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.frames_done = 0
        self.clip_index = 0
        self.clip_name = ""
        self.clip_frames = 0
        self._last = 0.0
        self._open = False

    def begin_clip(self, index, name, frames):
        """Start clip ``index`` (1-based) named ``name`` with ``frames`` frames."""
        self.clip_index, self.clip_name, self.clip_frames = index, name, int(frames)
        self.update(0, 1, force=True)

    def update(self, done, total, stage="", force=False):
        """Report ``done`` of ``total`` work units of the current clip."""
        if not self._due(force):
            return
        frac = (done / total) if total else 0.0
        self._write("clip {}/{} {}: {}{:3.0f}%".format(self.clip_index, self.total_clips, self.clip_name,
                                                      (stage + " ") if stage else "", 100 * frac),
                    self.frames_done + frac * self.clip_frames)

    def update_many(self, done_clips, baking, frames_now, force=False):
        """Report clips baked at once: ``baking`` names them with their stage, ``frames_now`` counts
        the batch's frames so far (finished clips plus the baked share of those in progress)."""
        if self._due(force):
            self._write("clips {}/{} done, baking {}".format(done_clips, self.total_clips, baking or "-"),
                        frames_now)

    def _due(self, force):
        """Whether a progress line is due (one a second, five a second on a terminal)."""
        if self.quiet:
            return False
        now = time.perf_counter()
        if not force and now - self._last < (0.2 if self.tty else self.interval):
            return False
        self._last = now
        return True

    def _write(self, head, frames_now):
        """``head``, the rate over the run so far and the time left; in place on a terminal."""
        elapsed = time.perf_counter() - self.start
        rate = frames_now / elapsed if elapsed > 0 and frames_now > 0 else 0.0
        left = ""
        if rate > 0 and self.total_frames:
            left = ", {} left".format(_duration(max(self.total_frames - frames_now, 0) / rate))
        line = "{}, {:.0f} frames/s{}".format(head, rate, left)
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self._open = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end_clip(self, status=""):
        """Finish the current clip (counts its frames as done)."""
        self.frames_done += self.clip_frames
        self.message("clip {}/{} {}: {}".format(self.clip_index, self.total_clips, self.clip_name, status))

    def message(self, text):
        """Write a whole line (clears an in-place line first)."""
        if self.quiet:
            return
        if self._open:
            self.stream.write("\r\033[K")
            self._open = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def callback(self, stage=""):
        """A ``progress(done, total)`` callable for the bake pipeline."""
        return lambda fraction, name=stage: self.update(float(fraction), 1.0, name or stage)
