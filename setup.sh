#!/usr/bin/env bash
# Create the pinned Python 3.11 environment in .venv (when missing or when
# requirements.txt changed), then run the main job.
#
#   ./setup.sh            set up, then run `./neural-ik demo` (or `./neural-ik info`
#                         while the demo subcommand does not exist)
#   ./setup.sh --no-run   set up only
#   ./setup.sh --lts      also create .venv-4.2 and .venv-4.5 (Blender 4.2 and 4.5 LTS as
#                         bpy 4.2.23 / 4.5.15, requirements-4.2.txt / requirements-4.5.txt) for
#                         the test matrix of .ci/run; NEURAL_IK_VENV=.venv-4.2 ./neural-ik ...
#
# PYTHON=/path/to/python3.11 ./setup.sh picks the interpreter explicitly.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

RUN_MAIN=1
LTS=0
for arg in "$@"; do
    case "$arg" in
        --no-run) RUN_MAIN=0 ;;
        --lts) LTS=1 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

find_python() {
    local py="${PYTHON:-}"
    if [ -z "$py" ]; then
        for candidate in python3.11 python3 python; do
            if command -v "$candidate" >/dev/null 2>&1 && is_py311 "$candidate"; then
                py="$candidate"
                break
            fi
        done
    fi
    if [ -z "$py" ] || ! is_py311 "$py"; then
        need_python
    fi
    echo "$py"
}

# make_venv DIR REQUIREMENTS: create DIR (Python 3.11) when missing and install REQUIREMENTS
# into it when they changed since the last install.
make_venv() {
    local dir="$1" reqs="$2"
    local venv_py="$ROOT/$dir/bin/python"
    if [ -x "$venv_py" ] && ! is_py311 "$venv_py"; then
        echo "setup.sh: $dir is not a Python 3.11 environment; remove it (rm -rf $dir) and run again" >&2
        exit 1
    fi
    if [ ! -x "$venv_py" ]; then
        local py
        py="$(find_python)"
        echo "setup.sh: creating $dir with $("$py" -c 'import sys; print(sys.executable)')"
        "$py" -m venv "$ROOT/$dir" || {
            echo "setup.sh: 'python3.11 -m venv' failed; on Debian/Ubuntu install python3.11-venv" >&2
            exit 1
        }
    fi
    local stamp="$ROOT/$dir/.requirements.sha256" want
    want="$("$venv_py" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$ROOT/$reqs")"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "setup.sh: installing $reqs into $dir"
        "$venv_py" -m pip install --disable-pip-version-check -q -r "$ROOT/$reqs"
        echo "$want" > "$stamp"
    fi
}

make_venv .venv requirements.txt
if [ "$LTS" = 1 ]; then
    make_venv .venv-4.2 requirements-4.2.txt
    make_venv .venv-4.5 requirements-4.5.txt
fi

if [ "$RUN_MAIN" = 1 ]; then
    if "$ROOT/neural-ik" demo --help >/dev/null 2>&1; then
        exec "$ROOT/neural-ik" demo
    else
        exec "$ROOT/neural-ik" info
    fi
fi
