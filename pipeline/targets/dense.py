"""Target rows of a dense source: bone directions, hands, effectors, the root, contacts and heights (no ``bpy``)."""

from __future__ import annotations

import numpy as np

from ...model.rotations_np import vector_norm
from ...model.skeleton import BONE_CHILD, JOINTS, PARENTS
from ...retarget.rigsolve import Targets
from .. import tuning
from .common import _CHAINS, _J, _K, TargetInfo, _blend_frames, _bone, _median_length, _ramp, _rig_thumb, _world_from
from .feet import (_rest_point, foot_corrections, foot_pitch_corrections, foot_points, pitch_down, rig_sole,
                   skeleton_on_its_floor, stands_at_rest)


def dense_targets(plan, src, mask, scale, fps, n, *, foot_lock=True, source_heights=None,
                  source_rest=None, rest_floor_gap=None, hands=True, skeleton_floor=False, rest_human=True,
                  weights=tuning.WEIGHTS):
    """Targets for a dense source (see the package docstring).

    Parameters
    ----------
    plan : RetargetPlan
    src : ndarray (T, 32, 3)
        Source keypoints in the armature's axes, metres (``src_m``).
    mask : ndarray of bool (T, 32)
    scale : float
        Rig armature units per source metre.
    fps : float
    n : ndarray (3,)
        World up in armature axes.
    foot_lock : bool
        Add contact targets.
    source_heights : dict, optional
        ``{side: {"ankle": h, "ball": h}}`` flat-foot heights of the source
        (metres) when its skeleton is known; estimated from the motion
        otherwise.
    source_rest : dict, optional
        Joint name -> rest position (metres) of the source skeleton, when
        known: chain lengths come from it instead of the motion.
    rest_floor_gap : float, optional
        Height (armature units, along ``n``) of the rig's lowest rest foot
        point above the object's floor (:func:`.feet.rest_floor_gap`); with keypoint sources
        it decides where the rig's floor is (:func:`.feet.rig_sole`).
    hands : bool
        Rows for the hands' direction and turn from the hand tips and thumbs
        (keypoints; a source skeleton's rotations carry its hands' turn).
    skeleton_floor : bool
        ``source_heights`` are another skeleton's, measured from its lowest
        rest foot joint as its motion was grounded: a rig standing on its
        floor at rest stands its sole, not its lowest foot joint, there.

    Returns
    -------
    Targets, TargetInfo
    """
    rows = DenseRows(plan, src, mask, scale, fps, n, weights)
    rows.bone_directions(rest_floor_gap)
    if hands:
        for s in "lr":
            rows.hand(s)
    rows.hips_and_shoulders()
    rows.effectors(source_rest)
    rows.root()
    if foot_lock and rows.T >= 3:
        rows.contacts(source_heights, rest_floor_gap, skeleton_floor, rest_human)
    return rows.tg, rows.info


class DenseRows:
    """The rows of one dense source being built, family by family (:func:`dense_targets`)."""

    def __init__(self, plan, src, mask, scale, fps, n, weights):
        self.plan, self.src, self.mask, self.scale, self.fps, self.n = plan, src, mask, scale, fps, n
        self.w = weights
        self.tg = Targets()
        self.info = TargetInfo()
        self.T = src.shape[0]
        self.rig = plan.rig
        self.x = src * scale
        self.feet_dir = {}         # foot joint -> its pitched direction (T, 3), for the ball's contact
        self.floor_known = False   # (the rig stands on its floor at rest: its feet's clearances are known)
        self.pelvis_row = False    # (whether a row leaves the pelvis along the spine)
        self.root_rows = []

    def direction(self, ja, jb, weight, kind, pitch=0.0):
        """A row: rig head(jb) - head(ja) along the source's jb - ja.

        Where the two heads keep their distance in every pose (one bone's
        head on the other, or two heads on one bone) the whole error counts:
        the rig's segment of its own length along the source's direction, so
        a segment pointing the other way is as wrong as it looks (an error
        across the direction alone is zero there too: a clavicle flipped in
        the start pose stayed flipped). Elsewhere (bones between them) only
        the error across it: the span bends.
        """
        plan, rig, src, mask, tg = self.plan, self.rig, self.src, self.mask, self.tg
        ba, bb = _bone(plan, JOINTS[ja]), _bone(plan, JOINTS[jb])
        L = float(np.linalg.norm(rig.head[bb] - rig.head[ba]))
        if L < 1e-6:
            return False
        rigid = rig.parents[bb] == ba or (rig.parents[bb] == rig.parents[ba] and rig.parents[ba] >= 0)
        d = src[:, jb] - src[:, ja]
        nd = vector_norm(d, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            u = d / nd
        ok = mask[:, ja] & mask[:, jb] & (nd[:, 0] > 1e-6)
        if pitch:   # (a foot: the source's flat foot onto the rig's, foot_pitch_corrections)
            u = np.where(ok[:, None], pitch_down(np.where(ok[:, None], u, 0.0), self.n, pitch), u)
            self.feet_dir[JOINTS[ja]] = u
        if rigid:
            self.info.rigid[len(tg.rows)] = L
        tg.add({tg.point(bb): 1.0, tg.point(ba): -1.0}, L * u, weight * ok, name=f"{JOINTS[ja]}>{JOINTS[jb]}",
               kind=kind, perpendicular=not rigid)
        return True

    def bone_directions(self, rest_floor_gap):
        """Each canonical bone along the source's (a foot's pitched from the source's flat foot onto the rig's)."""
        plan, rig, w = self.plan, self.rig, self.w
        pitch = {f"foot_{sd}": a for sd, a in foot_pitch_corrections(plan, self.src, self.mask, self.n, self.fps,
                                                                      rest_floor_gap).items()}
        self.info.foot_pitch = {k: float(np.degrees(a)) for k, a in pitch.items()}
        for j, name in enumerate(JOINTS):
            c = BONE_CHILD[j]
            if c >= len(JOINTS):
                continue
            bj, bc = _bone(plan, name), _bone(plan, JOINTS[c])
            if bj is not None and bc is not None and rig.is_ancestor(bj, bc):
                if self.direction(j, c, w["direction"], "direction", pitch.get(name, 0.0)) and name == "pelvis":
                    self.pelvis_row = True
        self._bridged_directions()
        for sd in "lr":
            self.toe_tip(sd, stands_at_rest(plan, rest_floor_gap))

    def toe_tip(self, s, standing):
        """The bone ending at the toe tip along the source's line to its toe tip, where the source gives the tip.

        No other row holds its pitch: the start pose's (the network's, or a
        skeleton's toe carried from a rest whose foot lies otherwise) lifted
        the toes off the source's or put them through the floor. The toe
        bone from the ball of the foot (its tail the toe tip, as a toe's End
        Site is), on a rig not standing on its floor at rest: on one that
        does, the foot is pitched onto the rig's flat foot and the toe's line
        is left to the start pose (see docs/benchmarks.md, the floor rule).
        On a rig without a toe bone, the foot from the ankle (the reader's
        convention: such a foot's End Site is at the toes,
        :func:`...readers.source_rig.end_point_names`).
        """
        plan, rig, src, mask = self.plan, self.rig, self.src, self.mask
        f, t, kt = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}"), _K[f"toe_tip_{s}"]
        b, ka = (t, _K[f"toe_{s}"]) if t is not None else (f, _K[f"foot_{s}"])
        if b is None or (t is not None and standing) or not mask[:, kt].any() or not mask[:, ka].any():
            return
        tail = rig.tail[b] - rig.head[b]
        L = float(np.linalg.norm(tail))
        if L < 1e-6:
            return
        d = src[:, kt] - src[:, ka]
        nd = vector_norm(d, keepdims=True)
        ok = mask[:, ka] & mask[:, kt] & (nd[:, 0] > 1e-6)
        u = np.where(ok[:, None], d / np.where(ok[:, None], nd, 1.0), 0.0)
        self.info.rigid[len(self.tg.rows)] = L
        self.tg.add({self.tg.point(b, rig.rest_rotation()[b].T @ tail): 1.0, self.tg.point(b): -1.0}, L * u,
                    self.w["direction"] * ok, name=f"{'toe' if t is not None else 'foot'}_{s}>toe_tip_{s}",
                    kind="direction")

    def _bridged_directions(self):
        """Joints missing in the middle of a bone chain: the direction from the nearest ancestor both have.

        A rig with fewer spine bones, or a source without one (keypoints
        without spine2), left nothing but the start pose to hold the chest's lean.
        """
        plan, mask = self.plan, self.mask
        for j, name in enumerate(JOINTS):
            if _bone(plan, name) is None or PARENTS[j] < 0:
                continue
            k, a = j, -1
            while PARENTS[k] >= 0 and BONE_CHILD[PARENTS[k]] == k:
                if _bone(plan, JOINTS[PARENTS[k]]) is not None and mask[:, PARENTS[k]].any():
                    a = PARENTS[k]
                    break
                k = PARENTS[k]
            if a >= 0 and a != PARENTS[j] and self.rig.is_ancestor(_bone(plan, JOINTS[a]), _bone(plan, name)):
                if self.direction(a, j, self.w["direction"], "direction") and JOINTS[a] == "pelvis":
                    self.pelvis_row = True

    def hand(self, s):
        """The hand of side ``s`` along its hand tip, and turned about its line to its thumb, where the source gives them.

        Joint positions alone leave a hand's turn to the network (see
        docs/tuning.md#root_target). The thumb's row counts the direction
        across the hand only: where a thumb point sits along the hand differs
        between skeletons. On the rig, the hand tip is the canonical end
        offset carried by the hand's alignment (as target_keypoints places
        it), the thumb the tip of the rig's own thumb where it has one.
        """
        from ...retarget.plan import end_offset_on_rig

        plan, src, mask, tg, w = self.plan, self.src, self.mask, self.tg, self.w
        b, jh = _bone(plan, f"hand_{s}"), _J[f"hand_{s}"]
        tip = end_offset_on_rig(plan, f"hand_tip_{s}")
        if b is None or tip is None:
            return
        kt, kb = _K[f"hand_tip_{s}"], _K[f"thumb_{s}"]
        # the hand's line: to its tip where given, else along the forearm
        ja = kt if mask[:, kt].any() else _J[f"forearm_{s}"]
        along = src[:, ja] - src[:, jh] if ja == kt else src[:, jh] - src[:, ja]
        with np.errstate(invalid="ignore", divide="ignore"):
            h = along / vector_norm(along, keepdims=True)
        h_ok = mask[:, jh] & mask[:, ja] & np.isfinite(h).all(-1)
        h = np.where(h_ok[:, None], h, 0.0)
        L_tip = float(np.linalg.norm(tip))
        if mask[:, kt].any():
            self.info.rigid[len(tg.rows)] = L_tip
            tg.add({tg.point(b, tip): 1.0, tg.point(b): -1.0}, L_tip * h, w["direction"] * h_ok,
                   name=f"hand_{s}>hand_tip_{s}", kind="direction")
        if mask[:, kb].any():
            self._thumb(s, b, jh, kb, tip / L_tip, h, h_ok)

    def _thumb(self, s, b, jh, kb, t_ax, h, h_ok):
        """The hand turned about its line ``h`` until its thumb is on the source's side of it."""
        from ...retarget.plan import end_offset_on_rig

        plan, src, mask, tg = self.plan, self.src, self.mask, self.tg
        o = _rig_thumb(plan, b)
        o = end_offset_on_rig(plan, f"thumb_{s}") if o is None else o
        L = float(np.linalg.norm(o - (o @ t_ax) * t_ax))      # the thumb's reach across the hand
        d = src[:, kb] - src[:, jh]
        d = d - (d * h).sum(-1, keepdims=True) * h
        with np.errstate(invalid="ignore", divide="ignore"):
            u = d / vector_norm(d, keepdims=True)
        ok = h_ok & mask[:, kb] & np.isfinite(u).all(-1)
        if L > 1e-9 and ok.any():
            P = np.eye(3)[None] - h[:, :, None] * h[:, None, :]      # across the hand's line
            tg.add({tg.point(b, o): 1.0, tg.point(b): -1.0}, L * np.where(ok[:, None], u, 0.0),
                   self.w["direction"] * ok, axes=P, name=f"hand_{s}>thumb_{s}", kind="direction")

    def hips_and_shoulders(self):
        """The hips from the pelvis where no row leaves it along the spine; the left-right directions of hips and chest.

        A rig whose first spine joint sits on its pelvis (no length, no row)
        had nothing holding the pelvis' pitch; where the spine row holds it,
        the hips are left to sit as the rig's own (see
        docs/tuning.md#hips_from_pelvis). Left-right: the joints fixed on the
        pelvis and on the chest (the clavicles, not the upper arms, whose
        distance changes when the clavicles turn).
        """
        plan, w = self.plan, self.w
        for s in (("l", "r") if not self.pelvis_row else ()):
            bp, bt = _bone(plan, "pelvis"), _bone(plan, f"thigh_{s}")
            if bp is not None and bt is not None and self.rig.is_ancestor(bp, bt):
                self.direction(_J["pelvis"], _J[f"thigh_{s}"], w["direction"], "direction")
        for a, b in (("thigh_r", "thigh_l"), ("clavicle_r", "clavicle_l")):
            if _bone(plan, a) is not None and _bone(plan, b) is not None:
                self.direction(_J[a], _J[b], w["lateral"], "lateral")

    def _chain_lengths(self, chain, source_rest):
        """``(rig_len, src_len)`` of a chain of joints: the rig's at rest, the source's at rest or from its motion."""
        rest = self.rig.head
        bones = [_bone(self.plan, c) for c in chain]
        rig_len = float(sum(np.linalg.norm(rest[bones[k + 1]] - rest[bones[k]]) for k in range(len(bones) - 1)))
        if source_rest is not None and all(c in source_rest for c in chain):
            src_len = float(sum(np.linalg.norm(source_rest[chain[k + 1]] - source_rest[chain[k]])
                                for k in range(len(chain) - 1)))
        else:
            src_len = sum(_median_length(self.src, _J[chain[k]], _J[chain[k + 1]], self.mask)
                          for k in range(len(chain) - 1))
        return rig_len, src_len

    def effectors(self, source_rest):
        """Hands, feet and head relative to their chain roots, each scaled by its chain's length ratio."""
        plan, src, mask, tg = self.plan, self.src, self.mask, self.tg
        for eff, root, chain in _CHAINS:
            be, br = _bone(plan, eff), _bone(plan, root)
            if be is None or br is None or not mask[:, _J[eff]].any():
                continue
            if root == "pelvis":   # along the spine and neck joints both have (bending does not change it)
                chain = [j for j in ("pelvis", "spine1", "spine2", "spine3", "neck", "head")
                         if _bone(plan, j) is not None and mask[:, _J[j]].any()]
            if any(_bone(plan, c) is None for c in chain):
                continue
            rig_len, src_len = self._chain_lengths(chain, source_rest)
            if not (np.isfinite(src_len) and src_len > 1e-6 and rig_len > 1e-9):
                continue
            v = (src[:, _J[eff]] - src[:, _J[root]]) * (rig_len / src_len)
            ok = mask[:, _J[eff]] & mask[:, _J[root]]
            self.info.effectors[eff] = len(tg.rows)
            self.info.reach[eff] = rig_len
            tg.add({tg.point(be): 1.0, tg.point(br): -1.0}, v, self.w["effector"] * ok, name=f"{eff} from {root}",
                   kind="effector")

    def _hips_middle(self, both):
        """The middle of the source's hips (T, 3), frames that lost a hip filled from the pelvis; and the frames it has.

        Frames that lost a hip (a video estimator's dropout) keep the same
        row: the pelvis joint plus its offset to the hips' middle, taken from
        the frames that have all three (interpolated across the gap);
        switching to the pelvis row there would move the rig by the
        conventions' difference, a pop each time.
        """
        x, mask = self.x, self.mask
        mid = 0.5 * (x[:, _J["thigh_l"]] + x[:, _J["thigh_r"]])
        gap = mask[:, _J["pelvis"]] & ~both
        ref = np.flatnonzero(both & mask[:, _J["pelvis"]])
        if gap.any() and ref.size:
            off = mid[ref] - x[ref, _J["pelvis"]]
            f = np.flatnonzero(gap)
            mid[f] = x[f, _J["pelvis"]] + np.stack([np.interp(f, ref, off[:, c]) for c in range(3)], -1)
            both = both | gap
        return mid, both

    def root(self):
        """The root near the scaled source's: the middle of the hip joints where it gives both, the pelvis elsewhere.

        Conventions put the pelvis joint in different places but the hip
        joints in one: the rig's hips where the source's are, its legs reach
        the scaled feet (see docs/tuning.md#root_target).
        """
        plan, mask, tg, w, n = self.plan, self.mask, self.tg, self.w, self.n
        r = plan.root
        if r < 0:
            return
        nn = np.outer(n, n)
        P = w["root"] * (np.eye(3) - nn) + w["root_vertical"] * nn
        hips = [_bone(plan, f"thigh_{s}") for s in "lr"]
        both = np.zeros(self.T, dtype=bool)
        if all(b is not None and self.rig.is_ancestor(r, b) for b in hips):
            both = mask[:, _J["thigh_l"]] & mask[:, _J["thigh_r"]]
            if both.any():
                mid, both = self._hips_middle(both)
                self.root_rows.append(len(tg.rows))
                tg.add({tg.point(hips[0]): 0.5, tg.point(hips[1]): 0.5}, mid, both, axes=P, name="hips",
                       kind="root")
        if (mask[:, _J["pelvis"]] & ~both).any():
            self.root_rows.append(len(tg.rows))
            tg.add({tg.point(r): 1.0}, self.x[:, _J["pelvis"]], ~both, axes=P, name="pelvis", kind="root")

    def _sole(self, fp, source_heights, rest_floor_gap, skeleton_floor):
        """Where the rig's floor lies under its lowest rest foot point (``info.sole``, armature units)."""
        if source_heights is None:   # keypoints: their heights are above a real floor; so are the rig's
            return rig_sole(self.plan, fp, self.src, self.mask, self.n, self.fps, self.scale, rest_floor_gap)
        if skeleton_floor and stands_at_rest(self.plan, rest_floor_gap):
            # another skeleton, grounded by its lowest foot joints: a rig standing on its floor at rest
            # has its sole, not its lowest foot joint, where the source's lowest joints are
            # (see docs/tuning.md#rig_sole)
            return max(float(rest_floor_gap), 0.0)
        return 0.0

    def contacts(self, source_heights, rest_floor_gap, skeleton_floor, rest_human=True):
        """Contacts (ankle and ball of each foot) and heights; the root rows shifted by the median correction.

        A rig whose rest is no standing human pose (:func:`..source.rest_is_human`) says nothing of how
        high its feet stand: the source's heights are kept (scaled), its contacts only held in place.
        """
        fp = foot_points(self.plan, self.n)
        self.floor_known = bool(rest_human and stands_at_rest(self.plan, rest_floor_gap))
        self.info.sole = self._sole(fp, source_heights, rest_floor_gap, skeleton_floor) if rest_human else 0.0
        if self.info.sole:
            fp = {sd: [(nm, b, o, h + self.info.sole) for nm, b, o, h in pts] for sd, pts in fp.items()}
        contacts = np.zeros((self.T, 4), dtype=bool)
        offsets, heights = [], []   # (each frame's correction: its foot's delta; the root takes their median)
        if (skeleton_floor and stands_at_rest(self.plan, rest_floor_gap)
                and not skeleton_on_its_floor(source_heights, self.src, self.mask, self.n, self.fps)):
            # a rig standing on its floor, another skeleton whose lowest rest joint does not touch the
            # source's floor (a CMU toe joint): the source's feet map to it where they stand in the motion
            source_heights = None
        flat = foot_corrections(fp, self.src, self.mask, self.n, self.fps, self.scale, source_heights)
        if not rest_human:
            flat = {sd: (h, known, 0.0) for sd, (h, known, _d) in flat.items()}
        for si, s in enumerate("lr"):
            if s in flat:
                self._foot(s, si, fp, flat[s], contacts, offsets, heights)
        self.info.contacts = contacts
        if not offsets:
            offsets = heights
        if offsets and self.root_rows and np.concatenate(offsets).size:
            shift = float(np.median(np.concatenate(offsets)))
            self.info.floor_offset = shift
            for row in self.root_rows:
                self.tg.rows[row]["target"] += (self.n * shift).astype(self.tg.rows[row]["target"].dtype)

    def _foot(self, s, si, fp, flat, contacts, offsets, heights):
        """One foot's height row and its ankle's and ball's contact rows."""
        x, mask, n, tg = self.x, self.mask, self.n, self.tg
        ka = _K[f"foot_{s}"]
        h_src, known, delta = flat
        # the ankle's height above the floor on every frame (weakly): the rig's feet are as high above
        # its floor as the source's above its own, scaled, in flight and on raised ground too (only
        # where the source's flat-foot height is known: a guess would move the body)
        ankle = self._ankle_above_floor(s, fp, x[:, ka] + n * delta)
        if known:
            tg.add({tg.point(fp[s][0][1]): 1.0}, ankle, self.w["height"] * mask[:, ka],
                   axes=np.outer(n, n), name=f"ankle_{s} height", kind="height")
            heights.append(np.full(int(mask[:, ka].sum()), delta))
        for pi, (pname, bone, off, h_rig) in enumerate(fp[s][:2]):
            k = _K[f"{_CONTACT_KEYPOINT[pname]}_{s}"]
            if not mask[:, k].any():
                continue
            c = self._contact_frames(k, h_src if pname == "ankle" else h_src * h_rig / max(fp[s][0][3], 1e-9))
            contacts[:, 2 * si + pi] = c
            if not c.any():
                continue
            tgt = ankle if pname == "ankle" else x[:, k] + n * delta
            if pname == "ball" and f"foot_{s}" in self.feet_dir:
                # a foot pitched onto the rig's flat foot: its ball where the rig's own foot puts it, from
                # the ankle's target along that direction (the source's ball, scaled, tilted the rig's foot)
                L = float(np.linalg.norm(_rest_point(self.rig, bone, off) - _rest_point(self.rig, *fp[s][0][1:3])))
                tgt = np.where(mask[:, ka, None], ankle + L * self.feet_dir[f"foot_{s}"], tgt)
            wts = self.w["contact"] * _ramp(c, _blend_frames(self.fps)) * mask[:, k]
            pidx = tg.point(bone, off)
            self.info.contact_rows.append(len(tg.rows))
            self.info.floor_points.append(pidx)
            tg.add({pidx: 1.0}, tgt, wts, name=f"{pname}_{s} contact", kind="contact")
            if not np.any(off):
                offsets.append(np.full(int(c.sum()), delta))

    def _foot_length(self, fp, s) -> float:
        """The rig's ankle-to-ball length of foot ``s`` (armature units)."""
        (_a, fb, fo, _ha), (_b, bb, bo, _hb) = fp[s][:2]
        return float(np.linalg.norm(_rest_point(self.rig, bb, bo) - _rest_point(self.rig, fb, fo)))

    def _ankle_above_floor(self, s, fp, ankle):
        """The ankle's targets ``ankle`` (T, 3) no lower than its rest clearance (less the slack): a source
        whose ankle dips below its floor (markerless capture) would put the rig's foot through it."""
        if not self.floor_known or len(fp[s]) < 2:
            return ankle
        h = fp[s][0][3] - tuning.FOOT_FLOOR_SLACK * self._foot_length(fp, s)
        return ankle + np.outer(np.maximum(h - ankle @ self.n, 0.0), self.n)

    def _contact_frames(self, k, h_pt):
        """Frames (T,) bool in which source point ``k``, lowered to flat-foot height ``h_pt``, stands on the floor."""
        from ...retarget.metrics import foot_contacts

        ok = self.mask[:, k]
        pts = self.src[:, k] - self.n * h_pt                   # the point lowered to flat-foot height
        return foot_contacts(np.where(ok[:, None], pts, np.nan)[:, None] @ _world_from(self.n).T, self.fps,
                             floor=0.0, height=0.03, speed=0.25, hysteresis=1.5, min_frames=3)[:, 0] & ok


#: The keypoint of each contact point of :func:`.feet.foot_points`.
_CONTACT_KEYPOINT = {"ankle": "foot", "ball": "toe"}
