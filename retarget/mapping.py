"""Automatic mapping of the canonical joints onto the bones of a target rig.

The mapping is decided with the hierarchy, names only give hints:

1. Every bone name is parsed (:func:`parse_name`): side, core name, role
   hints (:data:`.conventions.ROLE_ALIASES`), and whether it is a twist,
   helper/control or ignored bone (fingers, face, end sites...).
2. Anchors are found by name: per side the *hand* (shallowest ``hand`` /
   ``wrist`` bone) and the *foot* (shallowest ``foot`` / ``ankle``), and the
   head.
3. Limb chains are read by walking up from the anchors, skipping twist,
   segment (``DEF-forearm.L.001``) and helper bones: hand -> forearm ->
   upper arm -> (clavicle); foot -> calf -> thigh. Position in the chain
   decides, so SMPL ``L_Shoulder`` becomes the upper arm while Mixamo
   ``LeftShoulder`` becomes the clavicle. Toes are a toe-named child of the
   foot (optional).
4. The pelvis is the lowest common ancestor of both thighs and the head; the
   bones strictly between pelvis and head form the spine path. Bones up to
   the one the arms hang from are *spine*, the rest *neck*.
   Spine bones: 1 -> spine3; 2 -> spine1, spine3; 3 -> spine1..3;
   n >= 4 -> spine1 = first, spine3 = last, spine2 ~ one third up; the other
   path bones are listed in :attr:`BoneMapping.extra_spine` and receive an
   interpolated rotation (see :mod:`.solve`). Neck: the first neck bone.
5. Twist / segment bones are attached to the nearest mapped limb bone above
   them (:attr:`BoneMapping.twist`).
6. Geometry when names say nothing (``j0``...``j21``, another language):
   :meth:`_Mapper.geometric_anchors` finds the hands, feet and toes from the
   hierarchy's branching and the rest pose (pelvis and chest where three
   long branches meet, the limb's two longest consecutive segments, left =
   up x forward from the toes); steps 3-5 then run as for named bones.
   Joints decided this way get confidence 0.6 ("hierarchy position only").

Two equally good candidates for a hand or a foot (two chains on one side)
are kept in :attr:`BoneMapping.ambiguous` and fail :func:`humanoid_check`.
This is the one mapper of skeletons: target rigs, and sources with a
hierarchy (BVH, FBX, glTF, ``.blend`` and scene armatures) alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


from ..model.skeleton import JOINTS, PARENTS
from .anchors import geometric_anchors
from .bone_names import NUMBERED, ParsedName, parse_name

__all__ = ["BoneMapping", "ParsedName", "parse_name", "auto_map", "humanoid_check", "thumb_end",
           "REQUIRED_JOINTS", "LIMB_JOINTS"]

#: Joints that must be mapped for the rig to count as a humanoid.
REQUIRED_JOINTS: tuple = ("pelvis", "head", "upperarm_l", "forearm_l", "hand_l", "upperarm_r",
                          "forearm_r", "hand_r", "thigh_l", "calf_l", "foot_l", "thigh_r",
                          "calf_r", "foot_r")
#: Limb joints (twist bones attach to these).
LIMB_JOINTS: tuple = tuple(j for j in JOINTS if j.endswith(("_l", "_r")))


@dataclass
class BoneMapping:
    """Canonical joint -> target bone mapping.

    Attributes
    ----------
    entries : dict
        Canonical joint name -> bone name (only mapped joints).
    confidence : dict
        Canonical joint name -> confidence in [0, 1].
    twist : dict
        Canonical joint name -> twist/segment/helper bones of that limb
        (left at rest, or given a share of the twist by the retargeter).
    extra_spine : list
        Bones on the pelvis -> head path that are not mapped (spine bones
        beyond three, neck bones beyond one). They receive a rotation
        interpolated (slerp of world rotations) between the mapped bones
        around them, by their position on the path.
    reasons : dict
        Canonical joint name -> why that bone was chosen.
    ambiguous : dict
        Canonical joint name -> the bones that are equally good candidates
        for it (two hands on one side in separate chains...); such a
        mapping fails :func:`humanoid_check`.
    """

    entries: dict = field(default_factory=dict)
    confidence: dict = field(default_factory=dict)
    twist: dict = field(default_factory=dict)
    extra_spine: list = field(default_factory=list)
    reasons: dict = field(default_factory=dict)
    ambiguous: dict = field(default_factory=dict)

    def unmapped(self) -> list:
        """Canonical joints without a bone, in canonical order."""
        return [j for j in JOINTS if j not in self.entries]

    def bone(self, joint: str):
        """Bone mapped to ``joint`` or ``None``."""
        return self.entries.get(joint)

    def joint_of(self, bone: str):
        """Canonical joint a bone is mapped to, or ``None``."""
        for j, b in self.entries.items():
            if b == bone:
                return j
        return None

    def to_dict(self) -> dict:
        """JSON-friendly dict."""
        return {"entries": dict(self.entries), "confidence": dict(self.confidence),
                "twist": {k: list(v) for k, v in self.twist.items()},
                "extra_spine": list(self.extra_spine), "reasons": dict(self.reasons),
                "ambiguous": {k: list(v) for k, v in self.ambiguous.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "BoneMapping":
        """Inverse of :meth:`to_dict` (missing keys default to empty)."""
        entries = dict(d.get("entries", {}))
        conf = {k: float(v) for k, v in d.get("confidence", {}).items()}
        for k in entries:
            conf.setdefault(k, 1.0)
        return cls(entries, conf, {k: list(v) for k, v in d.get("twist", {}).items()},
                   list(d.get("extra_spine", [])), dict(d.get("reasons", {})),
                   {k: list(v) for k, v in d.get("ambiguous", {}).items()})

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BoneMapping":
        """Parse :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    def validate(self, rig) -> list:
        """Errors of this mapping against a rig (empty list when usable).

        Checks unknown canonical joints, bones missing from the rig, a bone
        used twice, twist/extra bones missing, and that every mapped joint's
        bone descends from the bone of its nearest mapped canonical ancestor.
        """
        errors = []
        seen = {}
        for j, b in self.entries.items():
            if j not in JOINTS:
                errors.append(f"unknown canonical joint {j!r}")
            if not rig.has(b):
                errors.append(f"{j}: bone {b!r} not in the rig")
            if b in seen:
                errors.append(f"bone {b!r} mapped to both {seen[b]} and {j}")
            seen[b] = j
        for j, bones in self.twist.items():
            for b in bones:
                if not rig.has(b):
                    errors.append(f"twist bone {b!r} of {j} not in the rig")
                elif b in seen:
                    errors.append(f"twist bone {b!r} of {j} is also mapped to {seen[b]}")
        for b in self.extra_spine:
            if not rig.has(b):
                errors.append(f"extra spine bone {b!r} not in the rig")
        for j, b in self.entries.items():
            if j not in JOINTS or not rig.has(b):
                continue
            p = PARENTS[JOINTS.index(j)]
            while p >= 0 and JOINTS[p] not in self.entries:
                p = PARENTS[p]
            if p >= 0 and rig.has(self.entries[JOINTS[p]]):
                pb = rig.index(self.entries[JOINTS[p]])
                if not rig.is_ancestor(pb, rig.index(b)):
                    errors.append(f"{j}: bone {b!r} is not below {JOINTS[p]}'s bone "
                                  f"{self.entries[JOINTS[p]]!r}")
        return errors


def thumb_end(rig, hand: int):
    """The last bone of a hand's thumb, or None.

    The hand's one child whose name says ``thumb``, followed one bone after
    another while each has a single child; None where the hand has no such
    child or several, or the chain forks (a thumb is not told apart there).
    """
    thumbs = [c for c in rig.children(hand) if "thumb" in parse_name(rig.names[c]).tokens]
    if len(thumbs) != 1:
        return None
    c = thumbs[0]
    while len(rig.children(c)) == 1:
        c = rig.children(c)[0]
    return None if rig.children(c) else c


def humanoid_check(mapping: BoneMapping) -> list:
    """Errors when the mapping is not a usable humanoid (empty when it is).

    Needed: pelvis, at least one spine bone, head, and per side upper arm,
    forearm, hand, thigh, calf and foot. Clavicles, neck and toes are
    optional.
    """
    errors = [f"no bone for {j}" + (f" ({mapping.reasons[j]})" if mapping.reasons.get(j) else "")
              for j in REQUIRED_JOINTS if j not in mapping.entries]
    if not any(j in mapping.entries for j in ("spine1", "spine2", "spine3")):
        errors.append("no spine bone between pelvis and head")
    for j, bones in getattr(mapping, "ambiguous", {}).items():
        errors.append(f"two candidates for {j}: {', '.join(bones)}")
    return errors


# --------------------------------------------------------------------------
# automatic mapping
# --------------------------------------------------------------------------
class _Mapper:
    def __init__(self, rig):
        self.rig = rig
        self.p = [parse_name(n) for n in rig.names]
        # Blender duplicate segments of a sided bone: DEF-forearm.L.001
        by_name = set(rig.names)
        self.segment_of = {}
        for i, pn in enumerate(self.p):
            if pn.segment and pn.base in by_name and pn.side in ("L", "R"):
                self.segment_of[i] = rig.index(pn.base)
        self.entries, self.conf, self.reasons = {}, {}, {}

    # -- helpers -----------------------------------------------------------
    def usable(self, i):
        """A bone that may be mapped (not a twist/helper/ignored/segment)."""
        return self.p[i].kind == "body" and i not in self.segment_of

    def pick(self, cands):
        """Shallowest; DEF- bones first; then shorter names."""
        if not cands:
            return None
        return min(cands, key=lambda i: (not self.p[i].preferred, self.rig.depth[i], len(self.rig.names[i]), i))

    def candidates(self, role, side):
        sides = (side,) if side in ("L", "R") else ("", "C")
        out = [i for i in range(len(self.p))
               if self.usable(i) and self.p[i].side in sides and role in self.p[i].roles]
        if any(self.p[i].preferred for i in out):
            out = [i for i in out if self.p[i].preferred]
        return out

    def set(self, joint, i, reason):
        role = joint.rsplit("_", 1)[0] if joint.endswith(("_l", "_r")) else joint
        role = {"spine1": "spine", "spine2": "spine", "spine3": "spine"}.get(role, role)
        roles = self.p[i].roles
        if roles and roles[0] == role and len(roles) == 1:
            conf, why = 1.0, "name and hierarchy"
        elif role in roles:
            conf, why = 0.85, "ambiguous name resolved by hierarchy"
        elif role in ("neck", "head") and roles and roles[0] == "spine" and NUMBERED.search(self.rig.names[i]):
            # Rigify's numbered spine (spine.004 the neck, spine.006 the head): one chain, its
            # segments named by number, so the position is the convention, not a guess
            conf, why = 0.85, "segment of a numbered spine chain, placed by hierarchy"
        elif roles:
            conf, why = 0.5, f"hierarchy position (name suggests {'/'.join(roles)})"
        else:
            conf, why = 0.6, "hierarchy position only"
        self.entries[joint] = self.rig.names[i]
        self.conf[joint] = conf
        self.reasons[joint] = f"{reason}; {why}"

    def walk_up(self, i, stop):
        """Usable ancestors of ``i`` (nearest first), before reaching a bone in ``stop``."""
        out = []
        for a in self.rig.ancestors(i):
            if a in stop:
                break
            if self.usable(a):
                out.append(a)
        return out

    # -- main --------------------------------------------------------------
    def run(self) -> BoneMapping:
        rig = self.rig
        hands = {s: self.pick(self.candidates("hand", s)) for s in "LR"}
        feet = {s: self.pick(self.candidates("foot", s)) for s in "LR"}
        self.ambiguous = {}
        for role, picked in (("hand", hands), ("foot", feet)):
            for s in "LR":
                rivals = self.rivals(self.candidates(role, s), picked[s])
                if rivals:
                    self.ambiguous[f"{role}_{s.lower()}"] = [rig.names[i] for i in [picked[s]] + rivals]
        self.geo_toes = {}
        if None in hands.values() or None in feet.values():
            geo = self.geometric_anchors()
            if geo is not None:
                for s in "LR":
                    if hands[s] is None and feet[s] is None:
                        hands[s], feet[s] = geo["hand"][s], geo["foot"][s]
                        self.geo_toes[s] = geo["toe"][s]
        arms = {s: self.limb_chain(hands, s) for s in "LR"}
        legs = {s: self.limb_chain(feet, s) for s in "LR"}
        head = self.pick(self.candidates("head", "C"))
        head_reason = "head name"
        if head is None:
            head, head_reason = self.head_from_hierarchy(arms), "top of the chain above the arms"
        thighs = [legs[s][1] for s in "LR" if len(legs[s]) >= 2]
        pelvis = rig.lca(*thighs, head) if thighs and head is not None else -1
        path = rig.path(pelvis, head) if pelvis >= 0 and head is not None else []

        if pelvis >= 0:
            self.set("pelvis", pelvis, "common ancestor of thighs and head")
        elif thighs and head is not None:
            self.reasons["pelvis"] = ("the legs and the spine are separate root bones: the root bone probably "
                                      "became the armature object on import (an FBX whose skeleton root is a "
                                      "node); re-import it with its root as a bone, or add a pelvis bone above "
                                      "them")
        if head is not None:
            self.set("head", head, head_reason)
        for s, sfx in (("L", "_l"), ("R", "_r")):
            if hands.get(s) is not None:
                self.set("hand" + sfx, hands[s], "shallowest hand/wrist bone")
                chain = arms.get(s, [])
                if len(chain) >= 1:
                    self.set("forearm" + sfx, chain[0], "parent of the hand")
                if len(chain) >= 2:
                    self.set("upperarm" + sfx, chain[1], "second above the hand")
                if len(chain) >= 3:
                    rest = chain[2:]
                    named = [i for i in rest if "clavicle" in self.p[i].roles]
                    self.set("clavicle" + sfx, named[0] if named else rest[0], "above the upper arm")
            if feet.get(s) is not None:
                self.set("foot" + sfx, feet[s], "shallowest foot/ankle bone")
                chain = legs.get(s, [])
                if len(chain) >= 1:
                    self.set("calf" + sfx, chain[0], "parent of the foot")
                if len(chain) >= 2:
                    self.set("thigh" + sfx, chain[1], "second above the foot")
                toe = self.find_toe(feet[s], s)
                if toe is not None:
                    self.set("toe" + sfx, toe, "toe-named child of the foot")
                elif self.geo_toes.get(s) is not None:
                    self.set("toe" + sfx, self.geo_toes[s], "the foot's child (skeleton geometry)")
        extra = self.map_spine(path, pelvis, head)
        twist = self.find_twist(set(path))
        return BoneMapping(self.entries, self.conf, twist, [rig.names[i] for i in extra], self.reasons,
                           self.ambiguous)

    def rivals(self, cands, picked):
        """Candidates as shallow as the picked one, in another chain (neither above the other)."""
        if picked is None:
            return []
        depth = self.rig.depth[picked]
        return [i for i in cands if i != picked and self.rig.depth[i] == depth
                and not self.rig.is_ancestor(i, picked) and not self.rig.is_ancestor(picked, i)]

    def geometric_anchors(self):
        """Hands, feet and toes from the rest geometry alone (:func:`.anchors.geometric_anchors`)."""
        return geometric_anchors(self.rig, self.p)

    def limb_chain(self, anchors, side):
        """Usable ancestors of a hand/foot up to where the other side's limb joins."""
        a = anchors.get(side)
        if a is None:
            return []
        other = anchors["R" if side == "L" else "L"]
        stop = set(self.rig.ancestors(other)) if other is not None else set()
        out = []
        for b in self.rig.ancestors(a):
            pn = self.p[b]
            if b in stop or (pn.side in ("", "C") and set(pn.roles) & {"spine", "pelvis", "neck", "head"}):
                break
            if self.usable(b):
                out.append(b)
        return out

    def head_from_hierarchy(self, arms):
        """No head name (Rigify spine.006): follow usable centre bones up from the arms' joint."""
        tops = [c[-1] for c in arms.values() if c]
        if not tops:
            return None
        b = self.rig.parents[tops[0]] if len(tops) == 1 else self.rig.lca(*tops)
        if b is None or b < 0:
            return None
        in_arms = {i for c in arms.values() for i in c}
        while True:
            kids = [c for c in self.rig.children(b) if self.usable(c) and self.p[c].side in ("", "C")
                    and c not in in_arms]
            if not kids:
                return b
            b = max(kids, key=lambda c: len(self.rig.descendants(c)))

    def find_toe(self, foot, side):
        stack = list(self.rig.children(foot))
        found = []
        while stack:
            c = stack.pop()
            if self.usable(c) and self.p[c].side == side and \
                    ("toe" in self.p[c].roles or "foot" in self.p[c].roles):
                found.append(c)
            elif not self.usable(c) and self.p[c].kind != "ignore":
                stack.extend(self.rig.children(c))  # look through helpers
        return self.pick(found)

    def map_spine(self, path, pelvis, head):
        rig = self.rig
        if not path:
            return []
        tops = [self.entries.get(j) for j in ("clavicle_l", "clavicle_r")]
        tops = [self.entries.get(a) if t is None else t
                for t, a in zip(tops, ("upperarm_l", "upperarm_r"))]
        tops = [rig.index(t) for t in tops if t is not None]
        attach = rig.lca(*tops) if tops else -1
        if attach in path:
            k = path.index(attach) + 1
        else:  # arms not on the path: split by names
            k = len(path)
            for n, b in enumerate(path):
                if "neck" in self.p[b].roles:
                    k = n
                    break
        spine, neck = path[:k], path[k:]
        if not spine and neck:  # arms hang from the pelvis: keep one spine bone
            spine, neck = neck[:1], neck[1:]
        n = len(spine)
        used = []
        if n == 1:
            self.set("spine3", spine[0], "only spine bone (chest)")
            used = [spine[0]]
        elif n == 2:
            self.set("spine1", spine[0], "first of 2 spine bones")
            self.set("spine3", spine[1], "last of 2 spine bones (spine2+spine3)")
            used = list(spine)
        elif n >= 3:
            mid = min(max(int(round((n - 1) / 3.0)), 1), n - 2)
            self.set("spine1", spine[0], f"first of {n} spine bones")
            self.set("spine2", spine[mid], f"spine bone {mid + 1} of {n}")
            self.set("spine3", spine[-1], f"last of {n} spine bones (arms attach)")
            used = [spine[0], spine[mid], spine[-1]]
        if neck:
            self.set("neck", neck[0], f"first of {len(neck)} neck bones")
            used.append(neck[0])
        return [b for b in path if b not in used]

    def find_twist(self, path):
        rig = self.rig
        bone_joint = {rig.index(b): j for j, b in self.entries.items()}
        twist = {}
        for i, pn in enumerate(self.p):
            if i in bone_joint or i in path:
                continue
            if not (pn.kind == "twist" or i in self.segment_of):
                continue
            for a in rig.ancestors(i):
                if a in bone_joint:
                    j = bone_joint[a]
                    if j in LIMB_JOINTS:
                        twist.setdefault(j, []).append(rig.names[i])
                    break
        return twist


def auto_map(rig) -> BoneMapping:
    """Map the canonical joints onto a rig's bones from names and hierarchy.

    Parameters
    ----------
    rig : RigDescription

    Returns
    -------
    BoneMapping
        Check it with :func:`humanoid_check` and :meth:`BoneMapping.validate`.
        A bake target is mapped by :func:`.rigify.map_target` (a generated
        Rigify rig onto its FK controls).
    """
    return _Mapper(rig).run()
