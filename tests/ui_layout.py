"""A recording stand-in for ``UILayout`` so panel and operator ``draw`` methods run headless.

Blender in background mode has no regions to draw into; the tests call a
``draw(self, context)`` with ``SimpleNamespace(layout=RecordingLayout(log))``.
Every ``prop`` must name a real property, every ``operator`` a registered
operator, every ``menu`` a registered menu; ``log`` collects ``(kind, value)`` pairs (labels' text, props,
operators).
"""

import bpy


def operator_registered(idname):
    """Whether ``"cat.name"`` is a registered operator (``hasattr(bpy.ops.cat, name)`` is always true)."""
    cat, name = idname.split(".")
    try:
        getattr(getattr(bpy.ops, cat), name).get_rna_type()
    except (KeyError, AttributeError):
        return False
    return True


class RecordingLayout:
    """Records what a ``draw`` puts into the layout; checks that props and operators exist."""

    def __init__(self, log):
        object.__setattr__(self, "log", log)

    def __getattr__(self, name):
        if name in ("row", "column", "box", "split", "column_flow", "grid_flow"):
            return lambda *a, **k: RecordingLayout(self.log)
        if name == "prop":
            def prop(data, attr, **k):
                assert attr in data.bl_rna.properties, (data, attr)
                self.log.append(("prop", attr))
            return prop
        if name == "prop_search":
            def prop_search(data, attr, search_data, search_attr, **k):
                assert attr in data.bl_rna.properties and hasattr(search_data, search_attr)
                self.log.append(("prop_search", attr))
            return prop_search
        if name == "operator":
            def operator(idname, **k):
                assert operator_registered(idname), idname
                self.log.append(("operator", idname))
                self.log.append(("operator_text", k.get("text", "")))
                return type("Props", (), {})()
            return operator
        if name == "menu":
            def menu(idname, **k):
                assert hasattr(bpy.types, idname), idname
                self.log.append(("menu", idname))
            return menu
        if name == "label":
            def label(**k):
                self.log.append(("label", k.get("text", "")))
                if "icon" in k:
                    self.log.append(("label_icon", (k.get("text", ""), k["icon"])))
            return label
        if name == "separator":
            return lambda *a, **k: None
        raise AttributeError(name)

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)

    def labels(self):
        """Text of every label drawn so far."""
        return [entry[1] for entry in self.log if entry[0] == "label"]
