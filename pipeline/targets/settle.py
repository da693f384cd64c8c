"""Joints settled after the rig-space solve: knees and elbows as hinges, clavicles untwisted, limbs unbent (no ``bpy``).

Each turns bones about their own lines or mirrors a bend across its limb's
line: no joint the targets placed moves.
"""

from __future__ import annotations

import numpy as np

from ...model.rotations_np import vector_norm
from .. import tuning
from .common import _bone

#: The limbs that bend as hinges: (upper, lower, end) canonical joints; knees, then elbows.
HINGE_LIMBS = (("thigh", "calf", "foot"), ("upperarm", "forearm", "hand"))


def hinge_axes(plan) -> list:
    """The knees' and elbows' hinge axes: ``[(upper, lower, end, axis in the lower bone's rest frame)]``.

    A limb bent at rest (:data:`..tuning.HINGE_REST_BEND` or more: the
    meta-rig's elbows and knees) bends in that plane: its axis is the plane's normal.
    A straight one bends about the axis across its lower bone (shin,
    forearm) and the body's forward direction (the canonical -Y in the
    rig's axes, ``plan.K``), whatever the rig's bone rolls: a knee forward,
    an elbow of a T or A pose forward too (mocap skeletons bend so; see
    docs/tuning.md#hinge_axes). A limb whose lower bone is not its upper bone's
    child, or whose end is not its lower bone's child, or a straight one
    pointing forward at rest gives none.
    """
    rig = plan.rig
    Q = rig.rest_rotation()
    forward = plan.K @ np.array([0.0, -1.0, 0.0])
    out = []
    for upper, lower, end in HINGE_LIMBS:
        for s in "lr":
            t, c, f = _bone(plan, f"{upper}_{s}"), _bone(plan, f"{lower}_{s}"), _bone(plan, f"{end}_{s}")
            if t is None or c is None or f is None or int(rig.parents[c]) != t or int(rig.parents[f]) != c:
                continue
            u = rig.head[c] - rig.head[t]
            d = rig.head[f] - rig.head[c]     # the shin, the forearm
            nu, nd = float(np.linalg.norm(u)), float(np.linalg.norm(d))
            if nu < 1e-9 or nd < 1e-9:
                continue
            h = np.cross(u / nu, d / nd)
            if np.linalg.norm(h) < np.sin(np.radians(tuning.HINGE_REST_BEND)):
                h = np.cross(d / nd, forward)
                if np.linalg.norm(h) < 0.5:    # the lower bone points forward (or back) at rest: no plane
                    continue
            out.append((t, c, f, Q[c].T @ (h / np.linalg.norm(h))))
    return out


def _limb_bones(plan, limbs):
    """``(toe_of, bones)``: each foot bone's toe bone (its child) where the rig has one, and the bones
    to pose for ``limbs`` (:func:`hinge_axes`): theirs, their ancestors' and the toes."""
    rig = plan.rig
    toe_of = {}
    for s in "lr":
        f, k = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
        if f is not None and k is not None and int(rig.parents[k]) == f:
            toe_of[f] = k
    bones = sorted({b for t, c, f, _a in limbs for b in (t, c, f, *rig.ancestors(t))} | set(toe_of.values()))
    return toe_of, bones


def _free_of_locks(bones, locked) -> bool:
    """True when none of ``bones`` has a locked rotation axis in ``locked`` (bone -> (3,) bool)."""
    return not locked or not any(np.any(locked.get(int(b), False)) for b in bones)


def settle_hinges(plan, quats, locations, chunk=None, locked=None) -> None:
    """Turn the upper and lower bone of each knee and elbow about themselves so that it bends about its hinge axis.

    ``quats`` in place. Joint positions leave a thigh's (an upper arm's)
    turn about itself open where the knee (elbow) may turn any way (the
    lower bone makes up for it, and the end bone for that), and the
    rig-space solve meets the joints with whatever turn its steps left. A
    knee or an elbow is a hinge: its axis (:func:`hinge_axes`) is the normal
    of the plane of its three joints. Per frame, the upper bone turns about
    its line until the hinge axis lies along that normal, the lower bone
    about its own line likewise, and the end bone (foot, hand) keeps its
    turn in the world: every joint stays where it was, only the three
    rotations change. Faded in over bends of :data:`..tuning.HINGE_BEND` (a
    straight limb has no plane), and out where the axis is
    :data:`..tuning.HINGE_OFF` off the plane already. A straight knee whose
    foot has a toe bone faces where the foot points instead: its axis goes
    across the leg and the ankle-to-ball line (see
    docs/tuning.md#settle_hinges). A limb with a locked rotation axis on any
    of its three bones (``locked``: bone -> (3,) bool, as the rig-space
    solve's) is left as the solve made it.
    """
    from ...retarget.chunks import frame_chunks
    from ...retarget.rigpose import pose_rig

    rig = plan.rig
    limbs = [lb for lb in hinge_axes(plan) if _free_of_locks(lb[:3], locked)]
    if not limbs:
        return
    # a straight knee shows no plane: its foot says where it faces (the ankle-to-ball line, across the leg)
    toe_of, bones = _limb_bones(plan, limbs)
    for a0, b0 in frame_chunks(len(quats), chunk):
        W, X = pose_rig(rig, quats[a0:b0], None if locations is None else locations[a0:b0], bones=bones,
                        chunk=b0 - a0)
        for limb in limbs:
            _settle_hinge(rig, quats, a0, b0, W, X, limb, toe_of)


def _turn(u, onto, about):
    """The angle (T,) about ``about`` (T, 3) that takes ``u`` (T, 3) (across ``about``) onto ``onto``."""
    u_p = u - (u * about).sum(-1, keepdims=True) * about
    return np.arctan2((np.cross(u_p, onto) * about).sum(-1), (u_p * onto).sum(-1))


def _unit(v):
    return v / np.maximum(vector_norm(v), 1e-12)[:, None]


def _foot_facing(n, w, lw, fwd, ha):
    """A straight knee's plane normal ``n`` (T, 3) and fade ``w`` (T,): across the leg and the foot's forward line."""
    nf = np.cross(lw, fwd)
    nnf = vector_norm(nf)
    ok = nnf > 0.5 * vector_norm(fwd)     # (a foot along the leg says nothing)
    nf = nf / np.maximum(nnf, 1e-12)[:, None]
    nf = np.where(((nf * ha).sum(-1) < 0)[:, None], -nf, nf)
    n = np.where((((n * ha).sum(-1)) < 0)[:, None], -n, n)
    mix = np.where(ok, 1.0 - w, 0.0)[:, None]
    n = (1.0 - mix) * n + mix * nf
    n = n / np.maximum(vector_norm(n, keepdims=True), 1e-12)
    return n, np.maximum(w, ok.astype(np.float64))


def _settle_hinge(rig, quats, a0, b0, W, X, limb, toe_of):
    """One limb's hinge settled in frames ``a0:b0`` (posed as ``W``, ``X``), ``quats`` in place."""
    from ...model.rotations_np import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix

    t, c, f, a = limb
    Q = rig.rest_rotation()
    upper = X[:, c] - X[:, t]     # thigh, upper arm
    lower = X[:, f] - X[:, c]     # shin, forearm
    n = np.cross(upper, lower)
    nn = vector_norm(n)
    lu, ll = vector_norm(upper), vector_norm(lower)
    bend = np.degrees(np.arcsin(np.clip(nn / np.maximum(lu * ll, 1e-12), 0.0, 1.0)))
    w = np.clip((bend - tuning.HINGE_BEND[0]) / (tuning.HINGE_BEND[1] - tuning.HINGE_BEND[0]), 0.0, 1.0)
    n = n / np.maximum(nn, 1e-12)[:, None]
    uw, lw = _unit(upper), _unit(lower)
    ha = W[:, c] @ a                                      # the lower bone's hinge axis now
    if f in toe_of:   # a straight knee: its axis across the leg and the foot's forward line
        n, w = _foot_facing(n, w, lw, X[:, toe_of[f]] - X[:, f], ha)
    if not w.any():
        return
    cos = (n * ha).sum(-1)
    n = np.where((cos < 0)[:, None], -n, n)              # (the normal's sign nearest it)
    # a joint turned far from any hinge (its axis 30-60 degrees or more off the limb's plane:
    # no human pose; which way to turn it is unclear) is left as the solve made it
    w = w * np.clip((np.abs(cos) - tuning.HINGE_OFF[1]) / (tuning.HINGE_OFF[0] - tuning.HINGE_OFF[1]), 0.0, 1.0)
    R_rel = Q[t].T @ Q[c]
    Wt, Wc, Wf = W[:, t], W[:, c], W[:, f]
    g = w * _turn(Wt @ (R_rel @ a), n, uw)                 # the upper bone about its own line
    b = w * _turn(ha, n, lw)                               # the lower bone about its own line
    Wt2 = axis_angle_to_matrix(g[:, None] * uw) @ Wt
    Wc2 = axis_angle_to_matrix(b[:, None] * lw) @ Wc
    Bt = quat_to_matrix(np.asarray(quats[a0:b0, t], dtype=np.float64))
    quats[a0:b0, t] = matrix_to_quat(Bt @ (np.swapaxes(Wt, -1, -2) @ Wt2))
    quats[a0:b0, c] = matrix_to_quat(R_rel.T @ np.swapaxes(Wt2, -1, -2) @ Wc2)
    R_f = Q[c].T @ Q[f]
    quats[a0:b0, f] = matrix_to_quat(R_f.T @ np.swapaxes(Wc2, -1, -2) @ Wf)


def _unbend_setup(plan):
    """What :func:`unbend_backwards` needs of a plan: ``(Q, limbs, flex, thighs, toe_of, bones)``."""
    rig = plan.rig
    Q = rig.rest_rotation()
    limbs = hinge_axes(plan)
    # which way each limb bends forwards (flexes) about its hinge axis: as it bends at rest where it
    # does; a straight one, an elbow with its forearm turning forwards, a knee with its shin turning
    # backwards (:func:`hinge_axes` gives both the forearm's way, which its users need not tell apart)
    forward = plan.K @ np.array([0.0, -1.0, 0.0])
    thighs = {_bone(plan, "thigh_l"), _bone(plan, "thigh_r")}
    flex = {}
    for t, c, f, a in limbs:
        u, d = rig.head[c] - rig.head[t], rig.head[f] - rig.head[c]
        h = np.cross(u, d)
        if np.linalg.norm(h) < np.sin(np.radians(tuning.HINGE_REST_BEND)) * np.linalg.norm(u) * np.linalg.norm(d):
            h = np.cross(d, -forward if t in thighs else forward)
        flex[c] = 1.0 if float((Q[c] @ a) @ h) >= 0.0 else -1.0
    # a knee is judged against its foot too: bent backwards is behind the hip-ankle line as the foot
    # points (heel to ball), where the rig has a toe bone (a knee whose hinge is turned about the
    # leg would otherwise read backwards when it is not)
    toe_of, bones = _limb_bones(plan, limbs)
    return Q, limbs, flex, thighs, toe_of, bones


def unbend_backwards(plan, quats, locations=None, chunk=None, locked=None) -> np.ndarray:
    """Knees and elbows bent backwards a little, turned to bend forwards as much (``quats`` in place).

    Near a limb's full reach its bend's direction is nearly free: a knee
    bent a few degrees backwards (against its hinge, :func:`hinge_axes`)
    meets the ankle as well as one bent forwards (see
    docs/tuning.md#unbend_backwards). Over each run of frames in which a
    limb bends backwards (by up to :data:`..tuning.HYPEREXTENSION_MAX`, and
    somewhere by :data:`..tuning.HYPEREXTENSION_MIN` or more), its middle
    joint is mirrored across the line from its upper joint to its end (the
    upper and the lower bone each turn about the normal of the limb's
    plane; the end bone keeps its rotation in the world): the end stays
    where it was, the bend is as large, now forwards. A limb with a locked
    rotation axis (``locked``) is left alone. Returns the frames (T,) bool
    in which a limb turned.
    """
    from ...retarget.chunks import frame_chunks
    from ...retarget.rigpose import pose_rig

    rig = plan.rig
    turned = np.zeros(len(quats), dtype=bool)
    cached = plan.__dict__.get("_unbend")
    if cached is None:   # (per plan: a Live Solve tick asks again and again)
        cached = plan.__dict__["_unbend"] = _unbend_setup(plan)
    Q, limbs, flex, thighs, toe_of, bones = cached
    limbs = [lb for lb in limbs if _free_of_locks(lb[:3], locked)]
    if not limbs:
        return turned

    def posed(a0, b0):
        return pose_rig(rig, quats[a0:b0], None if locations is None else locations[a0:b0], bones=bones,
                        chunk=b0 - a0)

    todo = _backward_runs(_signed_bends(quats, posed, chunk, limbs, flex, thighs, toe_of), limbs)
    if not todo:
        return turned
    for a0, b0 in frame_chunks(len(quats), chunk):
        if not any(sel[a0:b0].any() for sel in todo.values()):
            continue
        W, X = posed(a0, b0)
        for limb in limbs:
            if limb[1] in todo and todo[limb[1]][a0:b0].any():
                k = np.flatnonzero(todo[limb[1]][a0:b0])
                _mirror_bend(Q, quats, a0 + k, W[k], X[k], limb)
                turned[a0 + k] = True
    return turned


def _signed_bends(quats, posed, chunk, limbs, flex, thighs, toe_of):
    """The signed bend of every limb on every frame: lower bone -> (T,) degrees, backwards negative."""
    from ...retarget.chunks import frame_chunks

    T = len(quats)
    bend = {c: np.zeros(T) for _t, c, _f, _a in limbs}
    for a0, b0 in frame_chunks(T, chunk):
        W, X = posed(a0, b0)
        for t, c, f, a in limbs:
            upper, lower = X[:, c] - X[:, t], X[:, f] - X[:, c]
            n = np.cross(upper, lower)
            sin_bend = vector_norm(n) / np.maximum(
                vector_norm(upper) * vector_norm(lower), 1e-12)
            deg = np.degrees(np.arcsin(np.clip(sin_bend, 0.0, 1.0)))
            deg = np.where((upper * lower).sum(-1) > 0, deg, 180.0 - deg)
            back = flex[c] * (n * (W[:, c] @ a)).sum(-1) < 0
            if t in thighs and f in toe_of:
                line = X[:, f] - X[:, t]
                e = line / np.maximum(vector_norm(line, keepdims=True), 1e-12)
                fwd = X[:, toe_of[f]] - X[:, f]
                fwd = fwd - (fwd * e).sum(-1, keepdims=True) * e
                off = upper - (upper * e).sum(-1, keepdims=True) * e      # the knee off the line
                back &= (off * fwd).sum(-1) < 0
            bend[c][a0:b0] = np.where(back, -deg, deg)
    return bend


def _backward_runs(bend, limbs):
    """Lower bone -> frames (T,) bool to turn: whole runs bent backwards that reach HYPEREXTENSION_MIN.

    Within a run the bend turns smoothly to its other side (it is 0 where
    the run starts and ends); a limb straight but for a degree or two
    either way is left alone (the bend's sign flickers about a straight knee).
    """
    todo = {}
    for _t, c, _f, _a in limbs:
        T = len(bend[c])
        back = (bend[c] < 0) & (bend[c] >= -tuning.HYPEREXTENSION_MAX)
        if not back.any():
            continue
        # runs of backward frames (each a start and an end), each run's deepest bend at once
        edges = np.flatnonzero(np.diff(np.concatenate([[0], back.astype(np.int8), [0]])))
        r0, r1 = edges[::2], edges[1::2]
        deepest = np.minimum.reduceat(np.where(back, bend[c], np.inf), r0)
        run = np.zeros(T + 1, dtype=np.int64)    # +1 where a chosen run starts, -1 past its end
        keep = deepest <= -tuning.HYPEREXTENSION_MIN
        np.add.at(run, r0[keep], 1)
        np.add.at(run, r1[keep], -1)
        sel = np.cumsum(run[:T]) > 0
        if sel.any():
            todo[c] = sel
    return todo


def _mirror_bend(Q, quats, frames, W, X, limb):
    """The limb's middle joint mirrored across its upper-to-end line in ``frames`` (posed as ``W``, ``X``)."""
    from ...model.rotations_np import matrix_to_quat, quat_to_matrix, rotation_between

    t, c, f, _a = limb
    upper, lower = X[:, c] - X[:, t], X[:, f] - X[:, c]
    line = X[:, f] - X[:, t]
    e = line / vector_norm(line, keepdims=True)
    uw = upper / vector_norm(upper, keepdims=True)
    lw = lower / vector_norm(lower, keepdims=True)
    # (mirrored across the line: both ends and the lengths kept, the bend as large)
    uw2 = 2.0 * (uw * e).sum(-1, keepdims=True) * e - uw
    lw2 = 2.0 * (lw * e).sum(-1, keepdims=True) * e - lw
    Wt, Wc, Wf = W[:, t], W[:, c], W[:, f]
    Wt2 = rotation_between(uw, uw2) @ Wt
    Wc2 = rotation_between(lw, lw2) @ Wc
    Bt = quat_to_matrix(np.asarray(quats[frames, t], dtype=np.float64))
    quats[frames, t] = matrix_to_quat(Bt @ (np.swapaxes(Wt, -1, -2) @ Wt2))
    quats[frames, c] = matrix_to_quat((Q[t].T @ Q[c]).T @ np.swapaxes(Wt2, -1, -2) @ Wc2)
    quats[frames, f] = matrix_to_quat((Q[c].T @ Q[f]).T @ np.swapaxes(Wc2, -1, -2) @ Wf)


def settle_clavicles(plan, quats, locations=None, chunk=None, locked=None) -> None:
    """Take each clavicle's turn about its own line out of its rotation (``quats`` in place).

    Joint positions show where a clavicle points, not how it is turned about
    itself: the upper arm, whose head is the clavicle's end, makes up for any
    turn, and the solve leaves the one the network guessed (see
    docs/tuning.md#hinge_axes). A clavicle turns little about itself;
    here it turns none (its rotation from rest is a swing: CMU's skeletons
    move theirs so), about its current line, so its end does not move, and
    the upper arm keeps its rotation in the world: no joint moves. A side
    whose clavicle or upper arm has a locked rotation axis (``locked``) is
    left alone.
    """
    from ...model.rotations_np import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix
    from ...retarget.chunks import frame_chunks
    from ...retarget.rigpose import pose_rig
    from ...retarget.solve import twist_angle

    rig = plan.rig
    Q = rig.rest_rotation()
    pairs = []
    for s in "lr":
        c, u = _bone(plan, f"clavicle_{s}"), _bone(plan, f"upperarm_{s}")
        if c is None or u is None or int(rig.parents[u]) != c or not _free_of_locks((c, u), locked):
            continue
        d = rig.head[u] - rig.head[c]
        if float(np.linalg.norm(d)) < 1e-9:
            continue
        pairs.append((c, u, Q[c].T @ (d / np.linalg.norm(d))))   # the clavicle's line in its own frame
    if not pairs:
        return
    bones = sorted({b for c, u, _a in pairs for b in (c, u, *rig.ancestors(c))})
    for a0, b0 in frame_chunks(len(quats), chunk):
        W, _ = pose_rig(rig, quats[a0:b0], None if locations is None else locations[a0:b0], bones=bones,
                        chunk=b0 - a0)
        for c, u, a in pairs:
            q = np.asarray(quats[a0:b0, c], dtype=np.float64)
            untwist = axis_angle_to_matrix(-twist_angle(q, a)[:, None] * a)   # (the turn about its line)
            Wc2 = W[:, c] @ untwist
            quats[a0:b0, c] = matrix_to_quat(quat_to_matrix(q) @ untwist)
            R_rel = Q[c].T @ Q[u]
            quats[a0:b0, u] = matrix_to_quat(R_rel.T @ np.swapaxes(Wc2, -1, -2) @ W[:, u])
