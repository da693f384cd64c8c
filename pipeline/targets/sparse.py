"""Target rows of a sparse source: the effectors where they are, elbow and knee hints, feet standing flat (no ``bpy``)."""

from __future__ import annotations

import numpy as np

from ...model.rotations_np import vector_norm
from ...model.skeleton import SPARSE_EFFECTORS, SPARSE_HINTS
from ...retarget.rigsolve import Targets
from .. import tuning
from .common import (CHAIN_ROOTS, _CHAINS, _K, TargetInfo, _blend_frames, _bone, _level, _nearest, _ramp, _ramp_within,
                     _run_means, _smoothstep)
from .feet import foot_points, stance


def sparse_targets(plan, src, mask, scale, weights=tuning.WEIGHTS, init_heads=None, stretched=None, n=None, fps=None):
    """Targets for effectors (and elbow/knee hints) at ``scale * src``.

    Elbows and knees without a hint in the source keep, weakly, where the
    start pose (the network's answer) has them: like a pole target, this
    keeps the bend on the natural side while the prior fades (a nearly
    straight leg could otherwise fold backwards).

    A hand or foot target beyond 1.5 times its chain's reach (from the chain's
    root in ``init_heads``) is moved in to the reach. ``stretched``
    (effector -> (T,) bool, for a second pass from a solved pose): on those
    frames a target more than 2% past the reach from the solved chain root
    keeps a fading share of its weight (down to :data:`UNREACHABLE_WEIGHT`
    12% past it), so that the chain points at it while the other effectors
    are met.

    A foot given by its ankle alone keeps the start pose's direction in the
    world (heel to ball, weakly); with ``n`` (up) and ``fps``, on the frames
    where its ankle stands (:func:`stance`, faded in and out over
    :data:`CONTACT_BLEND` seconds) its ball is held at the ankle target's
    height less the rig's own flat-foot drop from ankle to ball: the foot
    stands flat, its heading the stance's mean (the start pose's turns
    frame by frame slid the ball of a planted foot), faded in once the ankle
    stands (the heel lands first) and out after; and the foot's direction
    never puts its ball under the floor it stood on (the start pose's foot,
    pitched toes down as the heel rose, stabbed 5 cm into it).

    Returns
    -------
    Targets, TargetInfo
    """
    tg = Targets()
    info = TargetInfo()
    x = src * scale
    rest = plan.rig.head
    # where each ankle given alone stands (its foot's own points unknown)
    still, along, fp = {}, {}, {}
    if n is not None and fps and len(src) >= 3:
        fp = foot_points(plan, n)
        for s in "lr":
            ka = _K[f"foot_{s}"]
            if mask[:, ka].any() and not mask[:, _K[f"toe_{s}"]].any():
                still[s] = stance(src, mask, n, fps, ka)
    for name in SPARSE_EFFECTORS + SPARSE_HINTS:
        b = _bone(plan, name)
        k = _K[name]
        if b is None or not mask[:, k].any():
            continue
        hint = name in SPARSE_HINTS
        if not hint:
            info.effectors[name] = len(tg.rows)
            for eff, root, chain in _CHAINS:
                if eff == name and root != "pelvis":
                    bones = [_bone(plan, c) for c in chain]
                    if all(bb is not None for bb in bones):
                        info.reach[name] = float(sum(np.linalg.norm(rest[bones[i + 1]] - rest[bones[i]])
                                                     for i in range(len(bones) - 1)))
        wt = weights["sparse_hint" if hint else "sparse_effector"] * mask[:, k]
        tgt = x[:, k]
        if not hint and name in info.reach and init_heads is not None:
            # beyond the chain's reach from where the chain starts: the stretched chain
            # points at it, weakly (the other effectors stay met: the body is not dragged
            # along), at a point just past its reach (a target metres away pulls no harder)
            root = _bone(plan, CHAIN_ROOTS[name])
            d = tgt - init_heads[:, root]
            dist = vector_norm(d, keepdims=True)
            # (the weight fades from 100% 2% past the reach to tuning.UNREACHABLE_WEIGHT 12% past
            # it: the start pose's chain roots are approximate, a straight leg is at its
            # reach, and a dragged empty crossing the reach must not make the pose jump)
            ratio = dist[:, 0] / info.reach[name]
            if not stretched or name not in stretched:   # only targets far out of reach are moved in
                far = (ratio > 1.5) & mask[:, k]
                if far.any():
                    info.clamped[name] = tgt.copy()
                    tgt = np.where(far[:, None], init_heads[:, root] + d / dist * 0.999 * info.reach[name], tgt)
            else:
                far = (ratio > 1.02) & mask[:, k] & stretched[name]
                if far.any():
                    info.clamped[name] = tgt.copy()
                    aim = init_heads[:, root] + d / np.maximum(dist, 1e-12) * np.minimum(dist, 1.12 * info.reach[name])
                    tgt = np.where(far[:, None], aim, tgt)
                    fade = np.where(far, np.clip((ratio - 1.02) / 0.1, 0.0, 1.0), 0.0)
                    wt = wt * (1.0 - (1.0 - tuning.UNREACHABLE_WEIGHT) * fade)
        tg.add({tg.point(b): 1.0}, tgt, wt, name=name, kind="hint" if hint else "effector")
    if init_heads is not None:
        for name in SPARSE_HINTS:
            b = _bone(plan, name)
            if b is None:
                continue
            k = _K[name]
            w = weights["pole"] * (~mask[:, k])
            if w.any():
                tg.add({tg.point(b): 1.0}, init_heads[:, b], w, name=f"{name} pole", kind="pole")
        # a foot given by its ankle alone keeps the start pose's direction in the world (heel
        # to ball: pitch and heading, the network's guess), not its turn relative to the
        # shin: a leg the solve bends or straightens to meet the ankle would tip the foot
        # with it (toes up through the floor while the foot stands)
        for s in "lr":
            fb, tb = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
            if fb is None or tb is None or not plan.rig.is_ancestor(fb, tb):
                continue
            d = init_heads[:, tb] - init_heads[:, fb]
            L = float(np.linalg.norm(rest[tb] - rest[fb]))
            nd = vector_norm(d, keepdims=True)
            ok = mask[:, _K[f"foot_{s}"]] & (nd[:, 0] > 1e-9) & ~mask[:, _K[f"toe_{s}"]]
            if L > 1e-9 and ok.any() and s in still and still[s].any():
                ka = _K[f"foot_{s}"]
                near = _nearest(still[s])
                held = _run_means(d / np.maximum(nd, 1e-12), still[s])[near]   # the nearest stance's heading
                flat = s in fp and fp[s][1][1] == tb     # (the ball is the toe bone's head: the row's end)
                if flat:   # standing, the foot lies flat: its ball the rig's flat-foot drop below the ankle
                    drop = fp[s][0][3] - fp[s][1][3]
                    held = (np.sqrt(max(L ** 2 - drop ** 2, 0.0)) * _level(held, n) - drop * n) / L
                r = _ramp_within(still[s], max(int(round(tuning.FOOT_TURN_BLEND * float(fps))), 1),
                                 int(round(tuning.FOOT_TURN_LEAD * float(fps))))[:, None]
                d = (1.0 - r) * d / np.maximum(nd, 1e-12) + r * held
                d /= np.maximum(vector_norm(d, keepdims=True), 1e-12)
                if flat:   # the ball never under the floor the foot stood on
                    a_z = x[:, ka] @ n
                    floor = (a_z - drop)[near]
                    low = ok & (a_z + L * (d @ n) < floor) & (a_z - floor < L)
                    if low.any():
                        dz = (floor[low] - a_z[low]) / L
                        d[low] = _level(d[low], n) * np.sqrt(np.maximum(1.0 - dz ** 2, 0.0))[:, None] + dz[:, None] * n
                    # the ball on that floor (within tuning.TOE_FLOOR_GAP of it): the toes lie flat on it too
                    # (toes bent down through it as the heel rose: 3 cm under on the held-out walk)
                    ball_gap = a_z + L * (d @ n) - floor
                    on_floor = _smoothstep(1.0 - np.clip(ball_gap / (tuning.TOE_FLOOR_GAP * L), 0.0, 1.0))
                    along[s] = (L * d, r[:, 0], np.maximum(r[:, 0], on_floor * ok))
                nd = vector_norm(d, keepdims=True)
                ok = ok & (nd[:, 0] > 1e-6)    # (a start pose's foot turned the other way: no direction)
            if L > 1e-9 and ok.any():
                tg.add({tg.point(tb): 1.0, tg.point(fb): -1.0}, L * d / np.maximum(nd, 1e-12),
                       weights["sparse_foot"] * ok, name=f"foot_{s} direction", kind="pole", perpendicular=True)
    for s in still:     # (a given toe says how the foot stands: no stance of its own)
        ka = _K[f"foot_{s}"]
        if s not in fp or not still[s].any():
            continue
        (_, _, _, h_ankle), (_, bb, boff, h_ball) = fp[s][0], fp[s][1]
        tgt = x[:, ka] - n * (h_ankle - h_ball)        # the ball at flat-foot height under the ankle
        if s in along:
            # as high as the foot's direction row puts it: flat where the foot stands, and
            # from the ankle along the foot's direction as the row fades in and out
            to_ball, r, r_toe = along[s]
            tgt = x[:, ka] + to_ball
            wt = weights["flat_foot"] * r * mask[:, ka]
            wt_toe = weights["flat_foot"] * r_toe * mask[:, ka]
        else:
            wt = wt_toe = weights["flat_foot"] * _ramp(still[s], _blend_frames(fps)) * mask[:, ka]
        tg.add({tg.point(bb, boff): 1.0}, tgt, wt, axes=np.outer(n, n), name=f"ball_{s} flat", kind="height")
        tb = _bone(plan, f"toe_{s}")
        if tb is not None and tb == bb:   # the toes flat too: their tip as high as the ball
            Q = plan.rig.rest_rotation()
            tip = Q[tb].T @ (plan.rig.tail[tb] - plan.rig.head[tb])
            h_tip = float(np.dot(n, plan.rig.tail[tb] - plan.rig.head[tb]))
            tg.add({tg.point(tb, tip): 1.0}, tgt + n * h_tip, wt_toe, axes=np.outer(n, n), name=f"toe_{s} flat",
                   kind="height")
    return tg, info
