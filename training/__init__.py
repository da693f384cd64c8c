"""Training, dataset building and evaluation of the IK network (not shipped).

The manifest keeps this folder out of the extension zip. Its modules import the
model from the package, which :func:`devpkg.import_package` loads from the
repository root; run them from the root::

    .venv/bin/python -m training.train --steps 6000 --out .cache/train --device cpu
    .venv/bin/python -m training.evaluate --weights weights/neural_ik.pt --device cpu
"""

from devpkg import import_package

import_package()
