"""Frame chunks: the per-frame work of a whole clip done a chunk of frames at a time.

No ``bpy`` here.
"""

from __future__ import annotations

__all__ = ["CHUNK_FRAMES", "frame_chunks"]


#: Frames per chunk of the per-frame work (:func:`retarget`, :func:`pose_rig`,
#: :func:`target_keypoints`, :func:`quats_to_euler_continuous`): whole-clip
#: outputs, temporaries of one chunk (a 100,000-frame clip's (T, B, 3, 3)
#: temporaries would take gigabytes). Results do not depend on it.
CHUNK_FRAMES = 4096


def frame_chunks(n_frames: int, chunk=None):
    """``(a, b)`` frame ranges of at most ``chunk`` frames (default :data:`CHUNK_FRAMES`) covering ``n_frames``."""
    step = max(int(chunk or CHUNK_FRAMES), 1)
    n_frames = int(n_frames)
    if n_frames <= 0:
        return [(0, 0)]
    return [(a, min(a + step, n_frames)) for a in range(0, n_frames, step)]
