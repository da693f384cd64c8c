"""The keys a bake writes: which pose-bone channels, with which values (no ``bpy``).

Blender's side (:meth:`..blender_io.bake.BakeJob.write`) turns these into
the fcurves of a new action; a bake onto a file's armature without Blender
(:mod:`..readers.bvh_armature`) keeps them as arrays for the BVH writer.
Both take them from :func:`key_channels`, so both write the same values.
"""

from __future__ import annotations

import numpy as np

from ..retarget.channels import quats_to_euler_continuous

__all__ = ["key_channels", "axis_angle_continuous"]


def axis_angle_continuous(q):
    """Continuous quaternions (T, B, 4) -> axis-angle (angle, x, y, z) (T, B, 4)."""
    w = np.clip(q[..., 0], -1.0, 1.0)
    v = q[..., 1:]
    sin_half = np.linalg.norm(v, axis=-1)
    angle = 2.0 * np.arctan2(sin_half, w)
    axis = np.zeros_like(v)
    ok = sin_half > 1e-9
    axis[ok] = v[ok] / sin_half[ok][:, None]
    axis[~ok] = (0.0, 1.0, 0.0)
    out = np.concatenate([angle[..., None], axis], axis=-1)
    # keep the axis from flipping between frames: (a, n) == (-a, -n); a frame turns round when
    # its axis points away from the previous frame's as kept, so the signs multiply along the clip
    if out.shape[0] > 1:
        step = np.where(np.einsum("tbi,tbi->tb", axis[1:], axis[:-1]) < 0, -1.0, 1.0)
        out[1:] *= np.cumprod(step, axis=0)[..., None]
    return out


def key_channels(result, rig, root, bone_mode, rotation_mode="BONE", release=False):
    """The channels to key: ``(bone name, property, values)`` with ``values()`` giving ``(T, N)``.

    Keyed are the solved bones, their ancestors (they keep their rest so
    playback is exact) and the root; each bone's rotation in its own mode
    (``rotation_mode="BONE"``) or as quaternions, the root's location too.
    Values are made one channel at a time as they are written (a long clip's
    Euler angles for every bone at once would take memory the keys need).

    Parameters
    ----------
    result : retarget.solve.RetargetResult
        The baked pose (``quaternions`` (T, B, 4), ``locations`` (T, B, 3),
        ``driven``, ``bone_names``).
    rig : RigDescription
    root : int
        The root bone.
    bone_mode : callable
        Bone name -> its current rotation mode (``PoseBone.rotation_mode``).
    rotation_mode : {"BONE", "QUATERNION"}
    release : bool
        Hand each bone's rotations over once (``result.quaternions`` is
        dropped; a bone's go as its channel is made).

    Returns
    -------
    channels : list of (str, str, callable)
    mode_changes : list of str
        Bones whose rotation mode becomes ``QUATERNION``.
    """
    res = result
    keyed = _keyed_bones(res, rig, root)
    if release:
        tracks = {int(b): np.ascontiguousarray(res.quaternions[:, b]) for b in np.flatnonzero(keyed)}
        res.quaternions = None

        def quat(b):
            return tracks.pop(int(b))
    else:
        def quat(b):
            return res.quaternions[:, b]
    out = []
    mode_changes = []
    eulers = {}
    for b in np.flatnonzero(keyed):
        name = res.bone_names[b]
        current = bone_mode(name)
        mode = current if rotation_mode == "BONE" else "QUATERNION"
        if mode == "QUATERNION":
            if current != "QUATERNION":
                mode_changes.append(name)
            out.append((name, "rotation_quaternion", lambda b=b: quat(b)))
        elif mode == "AXIS_ANGLE":
            out.append((name, "rotation_axis_angle", lambda b=b: axis_angle_continuous(quat(b)[:, None])[:, 0]))
        else:
            eulers.setdefault(mode, []).append(
                (name, lambda b=b, mode=mode: quats_to_euler_continuous(quat(b)[:, None], mode)[:, 0]))
        if b == root:
            out.append((name, "location", lambda b=b: res.locations[:, b]))
    out += [(name, "rotation_euler", values) for bones in eulers.values() for name, values in bones]
    return out, mode_changes


def _keyed_bones(res, rig, root):
    """Bones (B,) bool to key: the solved ones, their ancestors (they keep their rest: playback is exact), the root."""
    keyed = np.array(res.driven, dtype=bool)
    for b in np.flatnonzero(res.driven):
        for a in rig.ancestors(int(b)):
            keyed[a] = True
    keyed[root] = True
    return keyed
