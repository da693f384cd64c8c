"""Add-on preferences: compute device, dependency status and the dependency installer.

This module is registered even when PyTorch does not import, so the user can
always see what is missing and install it from the preferences. Drawing never
imports torch (:func:`.deps.status_line` only looks it up).
"""

import os
import subprocess
import sys
import threading

import bpy
from bpy.props import EnumProperty, StringProperty

from . import deps

#: PyTorch version installed by "Install PyTorch"; matches ``requirements.txt``.
TORCH_VERSION = deps.RUNTIME_REQUIREMENTS["torch"]

_DEVICE_ITEMS = (
    ("AUTO", "Auto", "Use CUDA when available, otherwise the CPU"),
    ("CPU", "CPU", "Always run the network on the CPU"),
    ("CUDA", "CUDA", "Run the network on an NVIDIA GPU (falls back to the CPU when unavailable)"),
)


def site_packages_dir(create=False):
    """Return the folder "Install PyTorch" installs into.

    Parameters
    ----------
    create : bool
        Create the folder when missing.

    Returns
    -------
    str or None
        ``bpy.utils.extension_path_user(__package__, path="site-packages")``,
        or ``None`` when the package is not installed as an extension (for
        example when it runs through ``./neural-ik``).
    """
    try:
        path = bpy.utils.extension_path_user(__package__, path="site-packages", create=create)
    except Exception:
        return None
    return path or None


def get_preferences(context=None):
    """Return this add-on's preferences, or ``None`` when it is not enabled.

    Parameters
    ----------
    context : bpy.types.Context, optional
        Defaults to ``bpy.context``.

    Returns
    -------
    NeuralIKPreferences or None
    """
    context = context or bpy.context
    addon = context.preferences.addons.get(__package__)
    return addon.preferences if addon is not None else None


def device_choice(context=None):
    """Return the compute-device setting as ``"auto"``, ``"cpu"`` or ``"cuda"``.

    Parameters
    ----------
    context : bpy.types.Context, optional
        Defaults to ``bpy.context``.

    Returns
    -------
    str
        ``"auto"`` when the preferences are not available.
    """
    prefs = get_preferences(context)
    return prefs.device.lower() if prefs is not None else "auto"


# -----------------------------------------------------------------------------
# PyTorch installer (background pip process polled by a modal timer)

class _InstallJob:
    """State of the running ``pip install`` commands (run one after the other); read by the preferences."""

    def __init__(self):
        self.process = None
        self.lines = []
        self.reader = None
        self.returncode = None
        self._cancelled = False

    @property
    def running(self):
        return self.reader is not None and self.returncode is None

    @property
    def last_line(self):
        return self.lines[-1] if self.lines else ""

    def start(self, commands):
        """Run ``commands`` (lists of arguments) in order in a background thread; stop at the first failure."""
        self.lines = []
        self.returncode = None
        self._cancelled = False
        self.process = self._popen(commands[0])  # a command that cannot start fails here, on the caller's thread
        self.reader = threading.Thread(target=self._read, args=(commands,), daemon=True)
        self.reader.start()

    @staticmethod
    def _popen(cmd):
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, bufsize=1)

    def _read(self, commands):
        code = 0
        try:
            for i, cmd in enumerate(commands):
                if i:
                    self.process = self._popen(cmd)
                for line in self.process.stdout:
                    line = line.rstrip()
                    if line:
                        self.lines.append(line)
                code = self.process.wait()
                if code != 0 or self._cancelled:
                    break
        except OSError as ex:
            self.lines.append("ERROR: could not start pip: {}".format(ex))
            code = 1
        self.returncode = code if not self._cancelled else (code or 1)

    def cancel(self):
        if self.running:
            self._cancelled = True
            if self.process is not None:
                self.process.kill()


_install_job = _InstallJob()
#: Last result of "Install PyTorch" shown in the preferences ("" while none).
_install_message = ""


def _redraw_preferences():
    for window in getattr(bpy.context.window_manager, "windows", ()):
        for area in window.screen.areas:
            if area.type == 'PREFERENCES':
                area.tag_redraw()


class NEURAL_IK_OT_install_pytorch(bpy.types.Operator):
    """Download and install the missing dependencies (PyTorch, SciPy) for this add-on (needs internet access)"""

    bl_idname = "neural_ik.install_pytorch"
    bl_label = "Install PyTorch"
    bl_options = {'INTERNAL'}

    variant: EnumProperty(
        name="Build",
        items=(
            ("CPU", "CPU", "Smaller download, runs on any machine"),
            ("CUDA", "CUDA", "For NVIDIA GPUs (large download)"),
        ),
        default="CPU",
    )

    _timer = None

    @classmethod
    def poll(cls, context):
        return not _install_job.running

    def execute(self, context):
        global _install_message
        if not bpy.app.online_access:
            self.report({'ERROR'}, "Online access is disabled: enable it in Preferences > System > Network")
            return {'CANCELLED'}
        target = site_packages_dir(create=True)
        if not target:
            self.report({'ERROR'}, "No user folder for this extension; install it as an extension first")
            return {'CANCELLED'}
        try:
            commands = deps.pip_install_commands(target, self.variant)
        except ValueError as ex:
            self.report({'ERROR'}, str(ex))
            return {'CANCELLED'}
        try:
            _install_job.start(commands)
        except OSError as ex:
            self.report({'ERROR'}, "Could not start pip: {}".format(ex))
            return {'CANCELLED'}
        _install_message = ""
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.5, window=context.window)
        wm.modal_handler_add(self)
        return {'RUNNING_MODAL'}

    def modal(self, context, event):
        global _install_message
        if event.type != 'TIMER':
            return {'PASS_THROUGH'}
        _redraw_preferences()
        if _install_job.running:
            return {'PASS_THROUGH'}
        context.window_manager.event_timer_remove(self._timer)
        self._timer = None
        _install_job.reader.join(timeout=5)
        if _install_job.returncode != 0:
            tail = [line for line in _install_job.lines if "ERROR" in line] or _install_job.lines[-3:]
            _install_message = "Install failed: " + " | ".join(tail)
            self.report({'ERROR'}, _install_message)
            return {'CANCELLED'}
        add_site_packages_to_path()
        deps.forget_torch_import()
        if _register_dependent is not None and _register_dependent():
            _install_message = "Installed: " + deps.status_line(device_choice(context))
            self.report({'INFO'}, _install_message)
        else:
            _install_message = "PyTorch installed; restart Blender to use it"
            self.report({'WARNING'}, _install_message)
        return {'FINISHED'}

    def cancel(self, context):
        if self._timer is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None


class NeuralIKPreferences(bpy.types.AddonPreferences):
    """Preferences of the Neural IK add-on."""

    bl_idname = __package__

    device: EnumProperty(
        name="Compute Device",
        description="Where the network runs",
        items=_DEVICE_ITEMS,
        default="AUTO",
    )

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "device")
        draw_dependencies(layout.box(), self.device.lower())


def draw_dependencies(layout, choice="auto"):
    """The dependency status and the install buttons (preferences and sidebar); imports nothing heavy."""
    state, _detail = deps.torch_state()
    missing = deps.missing()
    line = deps.status_line(choice)
    if state in ("ok", "found"):
        layout.label(text=line, icon='CHECKMARK')
    else:
        layout.label(text=line, icon='ERROR')
        layout.label(text="Solving, baking and the sidebar need PyTorch")
    if "scipy" in missing and "torch" not in missing:
        layout.label(text="SciPy is not installed: smoothing and refinement use slower numpy fallbacks",
                     icon='INFO')
    if "c3d" in missing and "torch" not in missing:
        layout.label(text="The C3D reader is not installed: .c3d files cannot be read", icon='INFO')
    if missing or state == "broken":
        if not bpy.app.online_access:
            layout.label(text="Online access is disabled (Preferences > System > Network)", icon='INFO')
        names = ", ".join(deps.PACKAGE_TITLES.get(n, n) for n in missing) or "PyTorch"
        row = layout.row(align=True)
        row.enabled = not _install_job.running and bpy.app.online_access
        if "torch" in missing or state == "broken":
            row.operator(NEURAL_IK_OT_install_pytorch.bl_idname, text="Install {} (CPU)".format(names)).variant = 'CPU'
            if deps.cuda_wheels_available():
                row.operator(NEURAL_IK_OT_install_pytorch.bl_idname,
                             text="Install {} (CUDA)".format(names)).variant = 'CUDA'
        else:
            row.operator(NEURAL_IK_OT_install_pytorch.bl_idname, text="Install " + names).variant = 'CPU'
        target = site_packages_dir()
        if target:
            layout.label(text="Installs into: " + target)
    if _install_job.running:
        layout.label(text="Installing: " + _install_job.last_line[:120], icon='SORTTIME')
    elif _install_message:
        layout.label(text=_install_message[:200], icon='INFO')


class VIEW3D_PT_neural_ik_setup(bpy.types.Panel):
    """The Neural IK tab while PyTorch is missing: what is missing and the Install button."""

    bl_idname = "VIEW3D_PT_neural_ik_setup"
    bl_label = "Neural IK"
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = "Neural IK"

    @classmethod
    def poll(cls, context):
        return not dependent_registered()

    def draw(self, context):
        draw_dependencies(self.layout, device_choice(context))


def dependent_registered() -> bool:
    """Whether the operators and panels that need PyTorch are registered (phase 2)."""
    package = sys.modules.get(__package__)
    return bool(getattr(package, "_dependent", None))


classes = [
    NeuralIKPreferences,
    NEURAL_IK_OT_install_pytorch,
    VIEW3D_PT_neural_ik_setup,
]

_added_path = None


def add_site_packages_to_path():
    """Put the "Install PyTorch" folder on ``sys.path`` when it exists.

    Returns
    -------
    str or None
        The folder added, or ``None``.
    """
    global _added_path
    path = site_packages_dir()
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)
        _added_path = path
        import importlib
        importlib.invalidate_caches()
    return _added_path


#: The package's phase-2 registration (``register_dependent``), handed over by :func:`register`: the
#: package imports this module, so this module does not import the package.
_register_dependent = None


def register(register_dependent=None):
    """Register the preferences; ``register_dependent()`` runs after "Install PyTorch" succeeds."""
    global _register_dependent
    _register_dependent = register_dependent
    add_site_packages_to_path()
    for cls in classes:
        bpy.utils.register_class(cls)


def unregister():
    global _added_path, _install_message, _register_dependent
    _register_dependent = None
    _install_job.cancel()
    _install_message = ""
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)
    if _added_path is not None and _added_path in sys.path:
        sys.path.remove(_added_path)
    _added_path = None
