"""Operators of the add-on (registered only when PyTorch imports).

Add an operator module ``operators/foo.py`` exporting ``classes = [...]``
(and optionally ``register()`` / ``unregister()`` for properties, handlers or
timers it owns), then add ``"foo"`` to :data:`MODULE_NAMES`.
"""

import importlib

#: Operator modules in this package, registered in this order.
MODULE_NAMES = [
    "solve",
    "mapping",
    "keypoints",
    "effectors",
    "pose_keys",
    "contact_sheet",
]

modules = [importlib.import_module("." + name, __name__) for name in MODULE_NAMES]

classes = [cls for module in modules for cls in module.classes]
