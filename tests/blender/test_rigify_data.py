"""The stored Rigify meta-rig the pure tests use is the one Blender's Rigify builds."""

import numpy as np

import rigs


def test_stored_metarig_matches_blender():
    stored, live = rigs.rigify_metarig_description(), rigs.rigify_metarig_from_blender()
    hint = "Rigify's meta-rig changed: rewrite tests/data with rigs.save_rigify_metarig() inside bpy"
    assert stored.names == live.names, hint
    assert np.array_equal(stored.parents, live.parents), hint
    for field in ("matrix_local", "head", "tail"):
        np.testing.assert_allclose(getattr(stored, field), getattr(live, field), atol=1e-6, err_msg=hint)
