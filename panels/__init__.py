"""Panels of the add-on (registered only when PyTorch imports).

The "Neural IK" tab in the 3D viewport sidebar is :class:`VIEW3D_PT_neural_ik`.
Add a panel module ``panels/foo.py`` exporting ``classes = [...]`` (use
``bl_parent_id = "VIEW3D_PT_neural_ik"`` for a sub-panel of the tab, and
optionally ``register()`` / ``unregister()``), then add ``"foo"`` to
:data:`MODULE_NAMES`.
"""

import importlib

import bpy

from .. import deps, preferences

#: Panel modules in this package, registered in this order (after the tab).
MODULE_NAMES = [
    "main",
]


class VIEW3D_PT_neural_ik(bpy.types.Panel):
    """The "Neural IK" tab of the 3D viewport sidebar."""

    bl_idname = "VIEW3D_PT_neural_ik"
    bl_label = "Neural IK"
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = "Neural IK"

    def draw(self, context):
        layout = self.layout
        layout.label(text=deps.status_line(preferences.device_choice(context)), icon='INFO')


modules = [importlib.import_module("." + name, __name__) for name in MODULE_NAMES]

classes = [VIEW3D_PT_neural_ik] + [cls for module in modules for cls in module.classes]
