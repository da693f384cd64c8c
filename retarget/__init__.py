"""Retargeting: canonical skeleton motion onto any humanoid rig (no ``bpy``).

Typical use by the Blender layer::

    from .retarget.rig import RigDescription
    from .retarget.mapping import auto_map, humanoid_check
    from .retarget.plan import plan_retarget
    from .retarget.solve import retarget

    rig = RigDescription.from_foreach(...)          # foreach_get buffers
    mapping = auto_map(rig)                         # or presets.load_preset(...)
    errors = humanoid_check(mapping) + mapping.validate(rig)
    plan = plan_retarget(rig, mapping, twist_share=0.0)
    res = retarget(plan, local_rot, root_pos, source_skeleton, scale="auto")
    # res.quaternions[t, b] -> pose.bones[res.bone_names[b]].rotation_quaternion
    # res.locations[t, b]   -> pose.bones[...].location (root bone only)

Modules: :mod:`.rig` (plain-data armature), :mod:`.conventions` (name data),
:mod:`.mapping` (auto mapping), :mod:`.solve` (maths), :mod:`.rigsolve`
(the rig-space least-squares solve), :mod:`.smoothing`
(filters), :mod:`.metrics` (quality figures), :mod:`.presets` (JSON presets).
"""
