"""What the tritonclient tests share: a daemon started on a free port, the dtypes' rounding and the
project's tolerance rule, and float64 reference operators written independently of normd.

The tolerance rule (tests/util/nd_testutil.h):
  FP32:       |got - ref| <= 1e-5 * max(1, |ref|)
  FP16, BF16: got within 1 ulp of ref rounded to the dtype, or |got - ref| <= 1e-5
"""
import os
import pathlib
import re
import subprocess

import ml_dtypes
import numpy as np
import pytest


# ---------------------------------------------------------------- the daemon

def start_daemon(tmp_path_factory, logname, extra):
    """Starts normd on a free port with the extra flags; yields "127.0.0.1:port", then stops it
    and checks that it exited cleanly."""
    binary = os.environ.get("NORMD_BIN", "build/normd")
    backend = os.environ.get("NORMD_BACKEND", "cpu")
    # the flags alone decide: no shared memory or admin token switched on from the environment
    env = {k: v for k, v in os.environ.items()
           if k not in ("NORMD_ALLOW_CLIENT_SHM", "NORMD_ADMIN_TOKEN_FILE")}
    # the daemon's log: under $ND_TEST_LOGS (make test: build/test-logs), shown if it fails
    logs = os.environ.get("ND_TEST_LOGS")
    if logs:
        os.makedirs(os.path.join(logs, "py"), exist_ok=True)
        log = pathlib.Path(logs) / "py" / logname
    else:
        log = tmp_path_factory.mktemp("normd") / logname
    with open(log, "w") as logf:
        proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--backend", backend, "--verbose", "1"] + extra,
            stdout=subprocess.PIPE, stderr=logf, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        pytest.fail(f"normd did not start: {line!r}, log: {log.read_text()}")
    yield f"127.0.0.1:{m.group(1)}"
    proc.terminate()
    rc = proc.wait(timeout=30)
    assert rc == 0, f"normd exited {rc}; its log ({log}):\n{log.read_text()}"


# ---------------------------------------------------------------- dtypes and tolerance

def bf16_round(x):
    """float64 -> the nearest bfloat16 value (ties to even, one rounding), as float32."""
    x = np.asarray(x, dtype=np.float64)
    # the two bfloat16 values around x: float32 truncated toward zero to bfloat16, and the next
    t = x.astype(np.float32)
    t = np.where(np.abs(t.astype(np.float64)) > np.abs(x), np.nextafter(t, np.float32(0)), t)
    lo = (t.view(np.uint32) & 0xFFFF0000).astype(np.uint32)
    hi = lo + 0x10000
    lo_v, hi_v = lo.view(np.float32).astype(np.float64), hi.view(np.float32).astype(np.float64)
    dlo, dhi = np.abs(x - lo_v), np.abs(hi_v - x)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & ((lo >> 16) & 1 == 1))
    return np.where(pick_hi, hi, lo).astype(np.uint32).view(np.float32)


def storage(values, dt):
    """Values as the client stores them, in the dtype's numpy type (BF16: ml_dtypes)."""
    if dt == "FP32":
        return values.astype(np.float32)
    if dt == "FP16":
        return values.astype(np.float16)
    return bf16_round(values).astype(ml_dtypes.bfloat16)


def neighbours(r, dt):
    """r rounded to dt, and the values one ulp either side."""
    if dt == "FP16":
        h = r.astype(np.float16)
        return [h.astype(np.float64),
                np.nextafter(h, np.float16(np.inf)).astype(np.float64),
                np.nextafter(h, np.float16(-np.inf)).astype(np.float64)]
    b = bf16_round(r).view(np.uint32).astype(np.int64)
    up = (b + 0x10000).astype(np.uint32).view(np.float32)
    down = (b - 0x10000).astype(np.uint32).view(np.float32)
    return [bf16_round(r).astype(np.float64), up.astype(np.float64), down.astype(np.float64)]


def assert_close(got, ref, dt, what):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    if dt == "FP32":
        ok = np.abs(got - ref) <= 1e-5 * np.maximum(1.0, np.abs(ref))
    else:
        ok = np.abs(got - ref) <= 1e-5
        for n in neighbours(ref, dt):
            ok |= got == n
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, (f"{what}: {bad.size} of {ok.size} off, first at {bad[0]}: "
                           f"got {got.flat[bad[0]]!r}, reference {ref.flat[bad[0]]!r}")


# ---------------------------------------------------------------- float64 reference

def ref_layernorm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    return (x - mean) * rstd * gamma + beta, mean[..., 0], rstd[..., 0]


def ref_rmsnorm(x, weight, eps):
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    return x * rstd * weight, rstd[..., 0]


def ref_softmax(x, axis, log):
    shifted = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted - lse if log else np.exp(shifted - lse)


def ref_prelu(x, alpha):
    a = alpha.reshape((1, -1) + (1,) * (x.ndim - 2)) if alpha.size > 1 else alpha
    return np.where(x >= 0, x, a * x)
