"""The JSON report: one row per clip (:func:`result_row`), its headline figures, the summary over the
clips, written to a file or stdout (:func:`emit_report`)."""

from __future__ import annotations

import json
import math
import sys

from ..outputs import json_default, write_json
from .errors import say

__all__ = ["emit_report", "result_row", "headline", "summary"]


def emit_report(destination, report):
    """Write the report to a file, or print it to stdout when ``destination`` is ``-``.

    Parameters
    ----------
    destination : str or None
        Nothing is written when ``None``.
    report : dict
    """
    if destination is None:
        return
    if destination == "-":
        sys.stdout.write(json.dumps(report, indent=2, default=json_default) + "\n")
        sys.stdout.flush()
        return
    write_json(destination, report)


def _rounded(value, digits=3):
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return value
    return round(value, digits) if math.isfinite(value) else None


def result_row(result, clip, source, target, seconds):
    """Turn a ``BakeResult`` into a report row.

    Parameters
    ----------
    result : blender_io.bake.BakeResult
    clip : readers.KeypointClip
    source, target : str
    seconds : dict
        Stage timings measured here (``read``, ``export``...), merged with
        the pipeline's own (``solve``, ``fit``, ``write``).

    Returns
    -------
    dict
    """
    stages = {"read": 0.0, "solve": 0.0, "fit": 0.0, "write": 0.0, "export": 0.0}
    for key, value in dict(getattr(result, "seconds", {}) or {}).items():
        stages[key] = float(value)
    for key, value in seconds.items():
        stages[key] = stages.get(key, 0.0) + float(value)
    total = sum(stages.values())
    frames = int(result.frames)
    err = getattr(result, "keypoint_error_mm", None) or (None, None)
    fig = getattr(result, "figures", None)
    warnings = [say(w) for w in list(getattr(clip, "warnings", []) or []) + list(getattr(result, "warnings", []) or [])]
    return {
        "source": source,
        "target": target,
        "status": "done",
        "action": result.action.name if getattr(result, "action", None) is not None else None,
        "frames": frames,
        "fps": _rounded(result.fps),
        "frame_start": getattr(result, "frame_start", None),
        "layout": getattr(clip, "layout", None),
        "mode": getattr(result, "mode", None),
        "start": getattr(result, "start", None) or None,
        "devices": getattr(result, "devices", None),
        "seconds": {k: round(v, 4) for k, v in stages.items()},
        "seconds_total": round(total, 4),
        "frames_per_second": round(frames / total, 2) if total > 0 else None,
        "effector_reach_mm": {"mean": _rounded(fig.effector_reach_mm[0], 3),
                              "max": _rounded(fig.effector_reach_mm[1], 3)} if fig else None,
        "floor_error_cm": _rounded(fig.floor_error_cm, 2) if fig else None,
        "floor_reference": fig.floor_reference if fig else None,
        "joint_error_mm": {"mean": _rounded(fig.joint_error_mm[0], 2),
                           "max": _rounded(fig.joint_error_mm[1], 2)} if fig else None,
        "upright_share": _rounded(fig.upright_share, 4) if fig else None,
        "source_upright_share": _rounded(fig.source_upright_share, 4) if fig else None,
        "knees_backwards": int(fig.knees_backwards) if fig else None,
        "source_jitter": _rounded(fig.source_jitter, 4) if fig else None,
        "keypoint_error_mm": {"mean": _rounded(err[0], 2), "max": _rounded(err[1], 2)},
        "bone_direction_error_deg": _rounded(getattr(result, "bone_direction_error_deg", None), 3),
        "jitter": _rounded(getattr(result, "jitter", None), 4),
        "foot_sliding_mm": _rounded(getattr(result, "foot_sliding_mm", None), 3),
        "warnings": warnings,
        "outputs": [],
    }


def headline(row) -> str:
    """The figures that matter for a done clip row, in one line (floor, reach, directions)."""
    parts = []
    if row.get("floor_error_cm") is not None:
        what = "feet vs source" if row.get("floor_reference") == "source" else "floor"
        parts.append("{} {:+.1f} cm".format(what, row["floor_error_cm"]))
    reach = (row.get("effector_reach_mm") or {}).get("max")
    if reach is not None and row.get("mode") == "sparse":   # (a keypoint bake has no effectors to reach)
        parts.append("effectors within {:.1f} mm".format(reach))
    if row.get("bone_direction_error_deg") is not None:
        parts.append("bone directions {:.1f}\u00b0".format(row["bone_direction_error_deg"]))
    if row.get("knees_backwards"):
        parts.append("knees backwards on {} frames".format(row["knees_backwards"]))
    return ", ".join(parts)


def summary(rows, seconds, **extra):
    """The report's summary over clip rows.

    Parameters
    ----------
    rows : list of dict
    seconds : float
        Wall time of the whole run.

    Returns
    -------
    dict
    """
    done = [r for r in rows if r.get("status") == "done"]
    failed = [r for r in rows if r.get("status") == "failed"]
    skipped = [r for r in rows if r.get("status") == "skipped"]
    frames = sum(int(r.get("frames") or 0) for r in done)
    stages = {}
    for r in done:
        for key, value in (r.get("seconds") or {}).items():
            stages[key] = round(stages.get(key, 0.0) + float(value), 4)
    errs = [r["keypoint_error_mm"]["mean"] for r in done if (r.get("keypoint_error_mm") or {}).get("mean") is not None]
    maxs = [r["keypoint_error_mm"]["max"] for r in done if (r.get("keypoint_error_mm") or {}).get("max") is not None]
    dirs = [r["bone_direction_error_deg"] for r in done if r.get("bone_direction_error_deg") is not None]
    floors = [abs(r["floor_error_cm"]) for r in done if r.get("floor_error_cm") is not None]
    reach = [r["effector_reach_mm"]["max"] for r in done
             if (r.get("effector_reach_mm") or {}).get("max") is not None]
    out = {
        "clips": len(rows),
        "done": len(done),
        "failed": len(failed),
        "skipped": len(skipped),
        "failed_clips": [{"source": r["source"], "error": r.get("error")} for r in failed],
        "frames": frames,
        "seconds": round(seconds, 3),
        "seconds_by_stage": stages,
        "frames_per_second": round(frames / seconds, 2) if seconds > 0 and frames else None,
        "keypoint_error_mm": {
            "mean": round(sum(errs) / len(errs), 2) if errs else None,
            "max": round(max(maxs), 2) if maxs else None,
        },
        "bone_direction_error_deg": round(sum(dirs) / len(dirs), 3) if dirs else None,
        "floor_error_cm_max": round(max(floors), 2) if floors else None,
        "effector_reach_mm_max": round(max(reach), 3) if reach else None,
    }
    out.update(extra)
    return out
