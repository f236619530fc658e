#!/usr/bin/env bash
# Check that wmrl works as an installed package, away from the checkout: install it into a fresh virtual
# environment outside the repository, then, from a folder outside it, import it and plan a bench from a
# shipped preset (package data read with importlib.resources).
#
#   scripts/check-wheel.sh [VENV_DIR]
#
# VENV_DIR: where to create the environment (must not exist; default: a new temporary folder, removed at the
# end). Offline: nothing is downloaded (pip install --no-deps --no-build-isolation). wmrl's dependencies and
# the build backend (setuptools) come from the environment of $PYTHON (default: the checkout's .venv, else
# python3): the new environment sees that environment's packages after its own, and the system's
# (--system-site-packages). Exit status 0 when every step passed; the failing step's output otherwise.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON="python3"; fi
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wmrl-wheel-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
VENV="${1:-$WORK/venv}"
case "$VENV" in
  "$REPO"|"$REPO"/*) echo "error: VENV_DIR $VENV is inside the checkout $REPO; give a folder outside it" >&2; exit 2 ;;
esac
if [[ -e "$VENV" ]]; then
  echo "error: VENV_DIR $VENV exists; give a new folder (the check needs a fresh environment)" >&2
  exit 2
fi

echo "== environment: $VENV (packages of $PYTHON visible after its own)"
"$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
DEPS="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
OWN="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# A path line of a .pth file is appended to sys.path after the environment's own site-packages; the .pth
# files inside DEPS (an editable install of the checkout, say) are not processed.
echo "$DEPS" > "$OWN/wmrl-check-deps.pth"

# Build from a copy of the working tree (tracked and untracked files, not the ignored ones), so that the
# build writes nothing into the checkout.
SRC="$WORK/src"
mkdir -p "$SRC"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --) | tar -xf - -C "$SRC"
else
  cp -a "$REPO/." "$SRC/"
fi

echo "== pip install --no-deps --no-build-isolation (the working tree of $REPO)"
# --ignore-installed: a wmrl of $PYTHON's environment is neither uninstalled nor taken for this install.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --ignore-installed "$SRC"
rm -rf "$SRC"

cd "$WORK"
export WMRL_HOME="$WORK/home"
echo "== import from $PWD"
"$VENV/bin/python" - "$OWN" <<'EOF'
import sys
from pathlib import Path

import wmrl
from wmrl.bench.presets import list_presets, preset_dir
from wmrl.tasks.build import LEADERBOARD_DIR

own = Path(sys.argv[1]).resolve()
where = Path(wmrl.__file__).resolve()
if own not in where.parents:
    sys.exit(f"error: wmrl was imported from {where}, not from the installed package under {own}")
if not list_presets():
    sys.exit(f"error: no bench presets in {preset_dir()} (the YAML package data was not installed)")
if not any(LEADERBOARD_DIR.glob("*.csv")):
    sys.exit(f"error: no committed leaderboards in {LEADERBOARD_DIR} (the CSV package data was not installed)")
print(f"wmrl {where.parent}; presets {', '.join(list_presets())}; "
      f"{len(list(LEADERBOARD_DIR.glob('*.csv')))} leaderboard files")
EOF

echo "== wmrl bench --preset cpu-small --dry-run"
"$VENV/bin/wmrl" bench --preset cpu-small --dry-run --out "$WORK/bench"
echo "wheel check passed"
