"""A humanoid skeleton's hands, feet and toes found from its rest geometry alone (names that say nothing).

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["geometric_anchors"]


def geometric_anchors(rig, parsed):
    """``{"hand": {side: bone}, "foot": ..., "toe": ...}`` of a rig, or ``None`` (see :meth:`_Geometry.find`).

    ``parsed``: every bone's :class:`.bone_names.ParsedName` (bones of kind ``"ignore"`` are no limb).
    """
    return _Geometry(rig, parsed).find()


class _Geometry:
    """The rest geometry of a rig's hierarchy: reaches of subtrees, branches, main chains."""

    def __init__(self, rig, parsed):
        self.rig = rig
        self.p = parsed
        self._reach_cache = {}

    def _chain_down(self, b):
        """``b`` and its descendants along the child with the longest reach (a limb's main chain)."""
        out = [b]
        while True:
            kids = [c for c in self.rig.children(out[-1]) if self.p[c].kind != "ignore"]
            if not kids:
                return out
            out.append(max(kids, key=lambda c: (self._reach(c), -c)))

    def _reach(self, b):
        if b not in self._reach_cache:
            h = self.rig.head
            kids = self.rig.children(b)
            self._reach_cache[b] = max((float(np.linalg.norm(h[c] - h[b])) + self._reach(c) for c in kids),
                                       default=float(np.linalg.norm(self.rig.tail[b] - h[b])))
        return self._reach_cache[b]

    def _branches(self, b, min_reach):
        """Children of ``b`` whose subtree reaches further than ``min_reach``."""
        h = self.rig.head
        return [c for c in self.rig.children(b)
                if float(np.linalg.norm(h[c] - h[b])) + self._reach(c) > min_reach]

    def find(self):
        """Hands, feet and toes of a skeleton from its rest geometry alone (no usable names).

        The pelvis is the first bone from the root where three long branches
        meet (two legs and the spine); the chest the first bone up the spine
        where three meet again (two arms and the neck). On each limb the two
        longest consecutive segments are the upper and lower limb, so the
        joint after them is the hand (foot). Left and right come from the
        rest pose: up is pelvis to chest, forward is the feet's direction
        to the toes, left = up x forward. ``None`` when the skeleton does not
        branch like a human or has no toes to tell its front.
        """
        rig = self.rig
        self._reach_cache = {}
        roots = [i for i in range(len(rig)) if rig.parents[i] < 0]
        if not roots:
            return None
        root = max(roots, key=self._reach)
        size = self._reach(root)
        if not size > 0:
            return None
        min_reach = 0.2 * size
        pelvis, br = self._fork(root, 3, min_reach)
        if pelvis is None:
            return None
        # the spine branch forks again (arms + neck); the legs do not
        spine = None
        for c in br:
            chest, arms_br = self._fork(c, 3, min_reach)
            if chest is not None:
                spine, chest_br = c, arms_br
                break
        if spine is None:
            return None
        legs = [c for c in br if c != spine][:2]
        if len(legs) != 2:
            return None
        # arms: the two chest branches whose reaches match best; the rest is the neck
        pairs = [(abs(self._reach(a) - self._reach(b)), a, b) for i, a in enumerate(chest_br)
                 for b in chest_br[i + 1:]]
        _, a1, a2 = min(pairs)
        feet = [self._limb_end(c) for c in legs]
        hands = [self._limb_end(c)[0] for c in (a1, a2)]
        if any(f is None for f, _ in feet) or any(x is None for x in hands):
            return None
        toes = [t for _, t in feet]
        if any(t is None for t in toes):
            return None
        return self._sides(pelvis, chest, legs, feet, toes, (a1, a2), hands)

    def _fork(self, b, want, min_reach):
        """``(bone, its long branches)``: the first bone from ``b`` down with ``want`` long branches, or ``(None, [])``."""
        while True:
            br = self._branches(b, min_reach)
            if len(br) >= want:
                return b, br
            if len(br) != 1:
                return None, []
            b = br[0]

    def _limb_end(self, first):
        """``(hand or foot, the bone after it)`` down a limb: the joint after its two longest consecutive
        segments (None where there is none)."""
        h = self.rig.head
        chain = self._chain_down(first)
        seg = [float(np.linalg.norm(h[chain[k + 1]] - h[chain[k]])) for k in range(len(chain) - 1)]
        if len(seg) < 2:
            return None, None
        k = max(range(len(seg) - 1), key=lambda k: seg[k] + seg[k + 1])
        end = chain[k + 2] if k + 2 < len(chain) else None
        after = chain[k + 3] if k + 3 < len(chain) else None
        return end, after

    def _sides(self, pelvis, chest, legs, feet, toes, arms, hands):
        """The anchors by side (left = up x forward, forward from the feet to the toes), or None."""
        h = self.rig.head
        up = h[chest] - h[pelvis]
        forward = np.mean([h[t] - h[f] for (f, _), t in zip(feet, toes)], axis=0)
        left = np.cross(up, forward)
        if not np.linalg.norm(left) > 0:
            return None

        def side(b):
            return "L" if float(np.dot(h[b] - h[pelvis], left)) > 0 else "R"

        out = {"hand": {}, "foot": {}, "toe": {}}
        for (f, t), c in zip(feet, legs):
            out["foot"][side(c)] = f
            out["toe"][side(c)] = t
        for hd, c in zip(hands, arms):
            out["hand"][side(c)] = hd
        if set(out["hand"]) != {"L", "R"} or set(out["foot"]) != {"L", "R"}:
            return None
        return out
