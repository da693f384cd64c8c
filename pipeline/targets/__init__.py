"""What the rig-space solve aims at, built from the source (no ``bpy``).

Every position here is in the target rig's armature space, armature units.
The source is brought there by ``x -> s * src_m``: ``src_m`` are the source's
world points in the armature's axes (metres, origin at the armature's origin:
the object transform undone), ``s`` the rig's size per source metre (leg
length ratio, or ``BakeOptions.scale``); this is also where the root goes.

Dense sources (:func:`dense_targets`)
    - **bone directions** of the source: for each canonical bone whose joint
      and child joint are mapped (or the next joint down the chain both have,
      where the source lacks one), ``head(child) - head(joint)`` on the rig
      points along the source's direction (only the error across it counts,
      so a rig with other proportions, or a segment whose length changes
      with bones in between, still moves like the performer); plus
      the left-right directions of the hips and clavicles (the pelvis and
      chest orientation); from keypoints, the hands along the hand tips and
      turned about themselves to the thumbs (:func:`_rig_thumb`);
    - **effectors** relative to their chain roots at the rig's scale: hands
      from the upper arms, feet from the thighs, the head from the pelvis,
      each scaled by the chain's length ratio (rig / source; the head's chain
      along the spine joints both have);
    - **contacts**: where the source's ankle or ball of the foot rests on its
      floor, the rig's ankle or ball goes where the source's is (at the rig's
      scale) with the rig's own foot height: the rig's feet stand on the
      rig's floor and stay planted where the source's are;
    - **heights**: on every frame, weakly, each ankle as high above the
      rig's floor as the source's above its own (scaled, flat-foot heights
      matched), so the body sits right in flight and on raised ground too;
    - the **root** near the scaled source root (the middle of its hip joints
      where it gives both: conventions agree on those, not on the pelvis
      joint), weakly, vertically shifted by
      the median contact correction (the median height correction without
      contacts) so the body does not pop between contacts and flight: how far
      the source's planted points move to stand on the rig's floor, not how
      far the start pose's feet are from them (that is the start pose's own
      error: a network start pose 8 cm too high lowered the body's root
      target as much).
Sparse sources (:func:`sparse_targets`)
    The effectors (pelvis, head, hands, feet) where they are, elbow and knee
    hints weakly.
"""

from .. import tuning
from .common import CHAIN_ROOTS, TargetInfo, floor_normal
from .common import _blend_frames, _bone, _nearest, _ramp, _ramp_within, _rig_thumb, _run_means  # noqa: F401 (tests)
from .dense import dense_targets
from .feet import (foot_corrections, foot_pitch_corrections, foot_points, pitch_down, planted_height, rest_floor_gap,
                   rig_sole, stance, stands_at_rest)
from .settle import hinge_axes, settle_clavicles, settle_hinges, unbend_backwards
from .sparse import sparse_targets

WEIGHTS = tuning.WEIGHTS

__all__ = ["stance", "dense_targets", "sparse_targets", "TargetInfo", "foot_points", "floor_normal", "planted_height",
           "rig_sole", "rest_floor_gap", "hinge_axes", "settle_hinges", "settle_clavicles", "unbend_backwards",
           "foot_corrections", "foot_pitch_corrections", "pitch_down", "stands_at_rest", "CHAIN_ROOTS", "WEIGHTS"]
