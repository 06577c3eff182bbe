#!/usr/bin/env bash
# device_py.sh - the tritonclient shared memory tests (tests/py/test_v2_shm_tritonclient.py and
# test_v2_cudashm_tritonclient.py) against --backend cuda, on a GPU machine without network: unpacks
# the wheels that `make device-wheels` put in build/whl into /tmp/pylib (wheels are zip files; no
# pip or venv needed), then runs pytest with the machine's own python3 and numpy.
# Environment: NORMD_BIN (build/normd), WHEELS (build/whl). Run from the repository root, after
# `source bench/device_env.sh` when libmicrohttpd comes from .deb/.
set -euo pipefail
WHEELS=${WHEELS:-build/whl}
ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "device_py.sh: no wheels in $WHEELS (make device-wheels)" >&2; exit 1; }
mkdir -p /tmp/pylib
python3 - "$WHEELS" <<'PY'
import glob, sys, zipfile
for w in glob.glob(sys.argv[1] + "/*.whl"):
    zipfile.ZipFile(w).extractall("/tmp/pylib")
PY
export PYTHONPATH=/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}
export NORMD_BIN=${NORMD_BIN:-build/normd} NORMD_BACKEND=cuda
exec python3 -m pytest -q -p no:cacheprovider tests/py/test_v2_shm_tritonclient.py \
    tests/py/test_v2_cudashm_tritonclient.py
