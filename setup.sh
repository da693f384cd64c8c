#!/usr/bin/env bash
# Create the pinned Python 3.11 environment in .venv (when missing or when
# requirements.txt changed), then run the main job.
#
#   ./setup.sh            set up, then run `./neural-ik demo` (or `./neural-ik info`
#                         while the demo subcommand does not exist)
#   ./setup.sh --no-run   set up only (used by .ci/run)
#
# PYTHON=/path/to/python3.11 ./setup.sh picks the interpreter explicitly.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

RUN_MAIN=1
for arg in "$@"; do
    case "$arg" in
        --no-run) RUN_MAIN=0 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

need_python() {
    cat >&2 <<MSG
setup.sh: Python 3.11 is required (the bpy==5.0.1 wheel is built for Python 3.11 only).
Install it, then run ./setup.sh again:
  Debian/Ubuntu:  sudo apt install python3.11 python3.11-venv   (older releases: the deadsnakes PPA)
  Fedora:         sudo dnf install python3.11
  macOS:          brew install python@3.11
  Windows/other:  https://www.python.org/downloads/  (or: pyenv install 3.11)
or point PYTHON at an existing interpreter: PYTHON=/path/to/python3.11 ./setup.sh
MSG
    exit 1
}

is_py311() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' >/dev/null 2>&1
}

VENV_PY="$ROOT/.venv/bin/python"
if [ -x "$VENV_PY" ] && ! is_py311 "$VENV_PY"; then
    echo "setup.sh: .venv is not a Python 3.11 environment; remove it (rm -rf .venv) and run again" >&2
    exit 1
fi

if [ ! -x "$VENV_PY" ]; then
    PY="${PYTHON:-}"
    if [ -z "$PY" ]; then
        for candidate in python3.11 python3 python; do
            if command -v "$candidate" >/dev/null 2>&1 && is_py311 "$candidate"; then
                PY="$candidate"
                break
            fi
        done
    fi
    if [ -z "$PY" ] || ! is_py311 "$PY"; then
        need_python
    fi
    echo "setup.sh: creating .venv with $("$PY" -c 'import sys; print(sys.executable)')"
    "$PY" -m venv "$ROOT/.venv" || {
        echo "setup.sh: 'python3.11 -m venv' failed; on Debian/Ubuntu install python3.11-venv" >&2
        exit 1
    }
fi

# Install the pinned requirements when they changed since the last install.
STAMP="$ROOT/.venv/.requirements.sha256"
WANT="$("$VENV_PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$ROOT/requirements.txt")"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "setup.sh: installing requirements.txt into .venv"
    "$VENV_PY" -m pip install --disable-pip-version-check -q -r "$ROOT/requirements.txt"
    echo "$WANT" > "$STAMP"
fi

if [ "$RUN_MAIN" = 1 ]; then
    if "$ROOT/neural-ik" demo --help >/dev/null 2>&1; then
        exec "$ROOT/neural-ik" demo
    else
        exec "$ROOT/neural-ik" info
    fi
fi
