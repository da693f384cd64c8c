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


def sparse_targets(plan, src, mask, scale, weights=tuning.WEIGHTS, init_heads=None, stretched=None, n=None, fps=None,
                   lift=0.0, sole=0.0, stances=None):
    """Targets for effectors (and elbow/knee hints) at ``scale * src``.

    Elbows and knees without a hint in the source keep, weakly, where the
    start pose (the network's answer) has them: like a pole target, this
    keeps the bend on the natural side while the prior fades (a nearly
    straight leg could otherwise fold backwards).

    A hand or foot target beyond :data:`..tuning.FAR_TARGET_REACH` times its
    chain's reach (from the chain's root in ``init_heads``) is moved in to
    the reach. ``stretched`` (effector -> (T,) bool, for a second pass from
    a solved pose): on those frames a target past the reach from the solved
    chain root keeps a fading share of its weight (down to
    :data:`..tuning.UNREACHABLE_WEIGHT`), so that the chain points at it
    while the other effectors are met.

    A foot given by its ankle alone keeps the start pose's direction in the
    world (heel to ball, weakly); with ``n`` (up) and ``fps``, on the frames
    where its ankle stands (:func:`.feet.stance`, faded in and out over
    :data:`..tuning.CONTACT_BLEND` seconds) its ball is held at the ankle
    target's height less the rig's own flat-foot drop from ankle to ball:
    the foot stands flat, its heading the stance's mean (the start pose's
    turns frame by frame slid the ball of a planted foot), faded in once
    the ankle stands (the heel lands first) and out after; and the foot's
    direction never puts its ball under the floor it stood on.

    ``lift`` (armature units, along ``n``): every effector raised by it (another body's ankles brought
    to the rig's standing height, :meth:`..sparse.SparsePath._lift`). ``sole``: how far the rig's floor
    lies under its lowest rest foot point (``TargetInfo.sole``, where the figures measure the floor
    from); the ankles' stances (``stances``, side -> (T,) bool, :func:`ankle_stances` of ``src``, where
    the caller has them) are ``TargetInfo.contacts``.

    Returns
    -------
    Targets, TargetInfo
    """
    rows = SparseRows(plan, src, mask, scale, weights, n, fps, lift, stances)
    rows.info.sole = float(sole)
    for name in SPARSE_EFFECTORS + SPARSE_HINTS:
        rows.effector(name, init_heads, stretched)
    if init_heads is not None:
        rows.poles(init_heads)
        for s in "lr":
            rows.foot_direction(s, init_heads)
    for s in rows.still:     # (a given toe says how the foot stands: no stance of its own)
        rows.flat_foot(s)
    return rows.tg, rows.info


def ankle_stances(src, mask, n, fps) -> dict:
    """Side -> (T,) bool: the frames where that ankle stands (:func:`.feet.stance`), for the ankles given."""
    return {s: stance(src, mask, n, fps, _K[f"foot_{s}"]) for s in "lr" if mask[:, _K[f"foot_{s}"]].any()}


class SparseRows:
    """The rows of one sparse source being built (:func:`sparse_targets`)."""

    def __init__(self, plan, src, mask, scale, weights, n, fps, lift=0.0, stances=None):
        self.plan, self.src, self.mask, self.w, self.n, self.fps = plan, src, mask, weights, n, fps
        self.tg = Targets()
        self.info = TargetInfo(floor_offset=float(lift))
        self.x = src * scale
        if lift:
            self.x = self.x + (float(lift) * np.asarray(n, dtype=np.float64)).astype(self.x.dtype)
        self.rest = plan.rig.head
        # where each ankle stands, and the ankles given alone (their foot's own points unknown)
        self.still, self.along, self.fp = {}, {}, {}
        if n is not None and fps and len(src) >= 3:
            self.fp = foot_points(plan, n)
            stances = ankle_stances(src, mask, n, fps) if stances is None else stances
            self.info.contacts = np.zeros((len(src), 4), dtype=bool)
            for si, (s, on) in enumerate((s, stances.get(s)) for s in "lr"):
                if on is not None:
                    self.info.contacts[:, 2 * si] = on
                    if not mask[:, _K[f"toe_{s}"]].any():
                        self.still[s] = on

    def _reach(self, name):
        """The chain's length at rest (armature units) of a limb effector, where the rig has its chain."""
        for eff, root, chain in _CHAINS:
            if eff == name and root != "pelvis":
                bones = [_bone(self.plan, c) for c in chain]
                if all(bb is not None for bb in bones):
                    self.info.reach[name] = float(sum(np.linalg.norm(self.rest[bones[i + 1]] - self.rest[bones[i]])
                                                      for i in range(len(bones) - 1)))

    def effector(self, name, init_heads, stretched):
        """The row of an effector (or a hint) given in the source: the bone's head where the source's point is."""
        b = _bone(self.plan, name)
        k = _K[name]
        if b is None or not self.mask[:, k].any():
            return
        hint = name in SPARSE_HINTS
        if not hint:
            self.info.effectors[name] = len(self.tg.rows)
            self._reach(name)
        wt = self.w["sparse_hint" if hint else "sparse_effector"] * self.mask[:, k]
        tgt = self.x[:, k]
        if not hint and name in self.info.reach and init_heads is not None:
            tgt, wt = self._within_reach(name, k, tgt, wt, init_heads, stretched)
        self.tg.add({self.tg.point(b): 1.0}, tgt, wt, name=name, kind="hint" if hint else "effector")

    def _within_reach(self, name, k, tgt, wt, init_heads, stretched):
        """``(target, weight)`` of an effector beyond its chain's reach from where the chain starts.

        The stretched chain points at it, weakly (the other effectors stay
        met: the body is not dragged along), at a point just past its reach
        (a target metres away pulls no harder). The weight fades from whole
        to :data:`..tuning.UNREACHABLE_WEIGHT` past the reach: the start
        pose's chain roots are approximate, a straight leg is at its reach,
        and a dragged empty crossing the reach must not make the pose jump.
        """
        info, mask = self.info, self.mask
        root = _bone(self.plan, CHAIN_ROOTS[name])
        d = tgt - init_heads[:, root]
        dist = vector_norm(d, keepdims=True)
        ratio = dist[:, 0] / info.reach[name]
        if not stretched or name not in stretched:   # only targets far out of reach are moved in
            far = (ratio > tuning.FAR_TARGET_REACH) & mask[:, k]
            if far.any():
                info.clamped[name] = tgt.copy()
                tgt = np.where(far[:, None], init_heads[:, root] + d / dist * 0.999 * info.reach[name], tgt)
            return tgt, wt
        far = (ratio > tuning.STRETCH_START) & mask[:, k] & stretched[name]
        if far.any():
            info.clamped[name] = tgt.copy()
            most = (tuning.STRETCH_START + tuning.STRETCH_FADE) * info.reach[name]
            aim = init_heads[:, root] + d / np.maximum(dist, 1e-12) * np.minimum(dist, most)
            tgt = np.where(far[:, None], aim, tgt)
            fade = np.where(far, np.clip((ratio - tuning.STRETCH_START) / tuning.STRETCH_FADE, 0.0, 1.0), 0.0)
            wt = wt * (1.0 - (1.0 - tuning.UNREACHABLE_WEIGHT) * fade)
        return tgt, wt

    def poles(self, init_heads):
        """Elbows and knees without a hint, weakly where the start pose has them (like pole targets)."""
        for name in SPARSE_HINTS:
            b = _bone(self.plan, name)
            if b is None:
                continue
            w = self.w["pole"] * (~self.mask[:, _K[name]])
            if w.any():
                self.tg.add({self.tg.point(b): 1.0}, init_heads[:, b], w, name=f"{name} pole", kind="pole")

    def foot_direction(self, s, init_heads):
        """A foot given by its ankle alone: the start pose's direction in the world (heel to ball), weakly.

        Not its turn relative to the shin: a leg the solve bends or
        straightens to meet the ankle would tip the foot with it (toes up
        through the floor while the foot stands). Where the ankle stands,
        the foot turns to lie flat (:meth:`_standing_direction`).
        """
        plan, mask = self.plan, self.mask
        fb, tb = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
        if fb is None or tb is None or not plan.rig.is_ancestor(fb, tb):
            return
        d = init_heads[:, tb] - init_heads[:, fb]
        L = float(np.linalg.norm(self.rest[tb] - self.rest[fb]))
        nd = vector_norm(d, keepdims=True)
        ok = mask[:, _K[f"foot_{s}"]] & (nd[:, 0] > 1e-9) & ~mask[:, _K[f"toe_{s}"]]
        if L > 1e-9 and ok.any() and s in self.still and self.still[s].any():
            d = self._standing_direction(s, tb, d, nd, L, ok)
            nd = vector_norm(d, keepdims=True)
            ok = ok & (nd[:, 0] > 1e-6)    # (a start pose's foot turned the other way: no direction)
        if L > 1e-9 and ok.any():
            self.tg.add({self.tg.point(tb): 1.0, self.tg.point(fb): -1.0}, L * d / np.maximum(nd, 1e-12),
                        self.w["sparse_foot"] * ok, name=f"foot_{s} direction", kind="pole", perpendicular=True)

    def _standing_direction(self, s, tb, d, nd, L, ok):
        """The foot's direction (T, 3) turned, as its ankle stands, to the nearest stance's heading, lying flat."""
        n, fps, fp, still = self.n, self.fps, self.fp, self.still[s]
        near = _nearest(still)
        held = _run_means(d / np.maximum(nd, 1e-12), still)[near]   # the nearest stance's heading
        flat = s in fp and fp[s][1][1] == tb     # (the ball is the toe bone's head: the row's end)
        if flat:   # standing, the foot lies flat: its ball the rig's flat-foot drop below the ankle
            drop = fp[s][0][3] - fp[s][1][3]
            held = (np.sqrt(max(L ** 2 - drop ** 2, 0.0)) * _level(held, n) - drop * n) / L
        r = _ramp_within(still, max(int(round(tuning.FOOT_TURN_BLEND * float(fps))), 1),
                         int(round(tuning.FOOT_TURN_LEAD * float(fps))))[:, None]
        d = (1.0 - r) * d / np.maximum(nd, 1e-12) + r * held
        d /= np.maximum(vector_norm(d, keepdims=True), 1e-12)
        if flat:
            d = self._above_floor(s, d, drop, L, near, ok, r)
        return d

    def _above_floor(self, s, d, drop, L, near, ok, r):
        """The foot's direction never putting its ball under the floor it stood on; where the toes lie flat too."""
        n = self.n
        a_z = self.x[:, _K[f"foot_{s}"]] @ n
        floor = (a_z - drop)[near]
        low = ok & (a_z + L * (d @ n) < floor) & (a_z - floor < L)
        if low.any():
            dz = (floor[low] - a_z[low]) / L
            d[low] = _level(d[low], n) * np.sqrt(np.maximum(1.0 - dz ** 2, 0.0))[:, None] + dz[:, None] * n
        # the ball on that floor (within TOE_FLOOR_GAP of it): the toes lie flat on it too
        # (see docs/tuning.md#foot_turn_lead)
        ball_gap = a_z + L * (d @ n) - floor
        on_floor = _smoothstep(1.0 - np.clip(ball_gap / (tuning.TOE_FLOOR_GAP * L), 0.0, 1.0))
        self.along[s] = (L * d, r[:, 0], np.maximum(r[:, 0], on_floor * ok))
        return d

    def flat_foot(self, s):
        """Where an ankle given alone stands: its ball at flat-foot height under it, and its toes flat too."""
        fp, mask, n, tg, w = self.fp, self.mask, self.n, self.tg, self.w
        ka = _K[f"foot_{s}"]
        if s not in fp or not self.still[s].any():
            return
        (_, _, _, h_ankle), (_, bb, boff, h_ball) = fp[s][0], fp[s][1]
        tgt = self.x[:, ka] - n * (h_ankle - h_ball)        # the ball at flat-foot height under the ankle
        if s in self.along:
            # as high as the foot's direction row puts it: flat where the foot stands, and
            # from the ankle along the foot's direction as the row fades in and out
            to_ball, r, r_toe = self.along[s]
            tgt = self.x[:, ka] + to_ball
            wt = w["flat_foot"] * r * mask[:, ka]
            wt_toe = w["flat_foot"] * r_toe * mask[:, ka]
        else:
            wt = wt_toe = w["flat_foot"] * _ramp(self.still[s], _blend_frames(self.fps)) * mask[:, ka]
        tg.add({tg.point(bb, boff): 1.0}, tgt, wt, axes=np.outer(n, n), name=f"ball_{s} flat", kind="height")
        tb = _bone(self.plan, f"toe_{s}")
        if tb is not None and tb == bb:   # the toes flat too: their tip as high as the ball
            rig = self.plan.rig
            tip = rig.rest_rotation()[tb].T @ (rig.tail[tb] - rig.head[tb])
            h_tip = float(np.dot(n, rig.tail[tb] - rig.head[tb]))
            tg.add({tg.point(tb, tip): 1.0}, tgt + n * h_tip, wt_toe, axes=np.outer(n, n), name=f"toe_{s} flat",
                   kind="height")
