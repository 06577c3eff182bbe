"""normd's system shared memory extension through NVIDIA's tritonclient[http] and its
tritonclient.utils.shared_memory helpers (POSIX shared memory objects, as Triton's clients make).

What is tested, on a daemon started with --allow-client-shm:
  - every operator x FP32/FP16/BF16 with x and the parameter tensors read from one registered input
    region (at non-zero offsets, in a region registered at an offset of its object) and y, mean and
    rstd written to an output region at offsets; the output region is poisoned (all bytes 0xFF, a
    NaN in every float type) before each request, so a stale or missing write cannot pass, and the
    bytes between the outputs must still be poison afterwards (nothing written past an output);
    the answer's outputs carry the region's name and no data;
  - the status of registered regions (key, offset, byte_size), unregistering one by name and all;
  - errors the client raises as InferenceServerException, each with a message naming the problem;
  - shared memory mixed with tensors in the body (binary and JSON) and answers in the body;
  - y written over its own x in the same region;
  - 64 concurrent async_infer requests writing to their own offsets of one output region;
and on a second daemon started without --allow-client-shm, that the extension is refused and not
announced in the server metadata.

Answers are checked against the float64 numpy references of nd_common.py, with the project's
tolerance rule (tests/util/nd_testutil.h):
  FP32:       |got - ref| <= 1e-5 * max(1, |ref|)
  FP16, BF16: got within 1 ulp of ref rounded to the dtype, or |got - ref| <= 1e-5
The daemons are build/normd (or $NORMD_BIN) on free ports, backend $NORMD_BACKEND (default cpu).
Shared memory keys carry this process's id, so concurrent runs do not collide; every object made
here is unregistered and unlinked when its test ends.
"""
import itertools
import os
import re
import zlib

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from nd_common import (assert_close, ref_layernorm, ref_prelu, ref_rmsnorm, ref_softmax,
                       start_daemon, storage)

OPS = ["layernorm", "rmsnorm", "softmax", "log_softmax", "prelu"]
DTYPES = ["FP32", "FP16", "BF16"]
NP_TYPE = {"FP32": np.float32, "FP16": np.float16, "BF16": ml_dtypes.bfloat16}
PID = os.getpid()


# ---------------------------------------------------------------- the daemons

@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    yield from start_daemon(tmp_path_factory, "test_v2_shm_tritonclient.log",
                            ["--allow-client-shm"])


@pytest.fixture(scope="module")
def plain_daemon(tmp_path_factory):
    yield from start_daemon(tmp_path_factory, "test_v2_shm_tritonclient_noshm.log", [])


@pytest.fixture(scope="module")
def client(daemon):
    c = httpclient.InferenceServerClient(daemon, concurrency=8)
    yield c
    c.close()


@pytest.fixture(scope="module")
def plain_client(plain_daemon):
    c = httpclient.InferenceServerClient(plain_daemon)
    yield c
    c.close()


# ---------------------------------------------------------------- shared memory regions

_serial = itertools.count()


class Region:
    """One POSIX shared memory object of at + window + tail bytes, and (once registered) the
    daemon's region name for its window [at, at + window). Offsets below are the window's."""

    def __init__(self, name, window, at=0, tail=0):
        self.name, self.window, self.at, self.tail = f"{name}-{PID}", window, at, tail
        self.key = f"/normd_pytest_{PID}_{next(_serial)}"
        self.handle = shm.create_shared_memory_region(self.name, self.key, at + window + tail,
                                                      create_only=True)

    def write(self, arr, offset):
        """Copies arr to the window's byte offset."""
        shm.set_shared_memory_region(self.handle, [np.ascontiguousarray(arr)],
                                     offset=self.at + offset)

    def read(self, dtype, shape, offset):
        """A copy of the window's bytes at offset as an array (no view of the mapping survives,
        so that the object can be closed whatever happens)."""
        return shm.get_contents_as_numpy(self.handle, dtype, list(shape),
                                         offset=self.at + offset).copy()

    def poison(self):
        """Every byte of the window and the tail 0xFF: a NaN in FP32, FP16 and BF16 alike."""
        self.write(np.full(self.window + self.tail, 0xFF, dtype=np.uint8), 0)

    def is_poison(self, start, end):
        return bool((self.read(np.uint8, [end - start], start) == 0xFF).all())


@pytest.fixture
def regions(client):
    """make(name, window, at=0, tail=0, register=True) -> Region; every region is unregistered
    and every object unlinked when the test ends."""
    made = []

    def make(name, window, at=0, tail=0, register=True):
        r = Region(name, window, at, tail)
        made.append(r)
        if register:
            client.register_system_shared_memory(r.name, r.key, r.window, offset=r.at)
        return r

    yield make
    try:
        for r in made:
            client.unregister_system_shared_memory(r.name)  # not registered: not an error
    finally:
        for r in made:
            shm.destroy_shared_memory_region(r.handle)


def layout(sizes, start, gap):
    """Byte offsets for tensors of these sizes: the first at start, each next gap bytes after
    the end of the one before; and the end of the last."""
    offsets, at = [], start
    for s in sizes:
        offsets.append(at)
        at += s + gap
    return offsets, at - gap


# ---------------------------------------------------------------- one case

def rng_for(*what):
    """A generator seeded from the test's own words: random inputs, the same in every run."""
    return np.random.default_rng(zlib.crc32(repr(what).encode()))


def make_case(op, dt, rng, shape=(3, 5, 12)):
    """Random inputs {name: array} in dt and the float64 reference {output: array}."""
    x = storage(rng.normal(0.5, 2.0, size=shape), dt)
    xd = x.astype(np.float64)
    c = shape[-1]
    inputs = {"x": x}
    if op == "layernorm":
        g = storage(rng.normal(1.0, 0.5, size=c), dt)
        b = storage(rng.normal(0.0, 0.5, size=c), dt)
        inputs.update(gamma=g, beta=b)
        y, mean, rstd = ref_layernorm(xd, g.astype(np.float64), b.astype(np.float64), 1e-5)
        return inputs, {"y": y, "mean": mean, "rstd": rstd}
    if op == "rmsnorm":
        w = storage(rng.normal(1.0, 0.5, size=c), dt)
        inputs.update(weight=w)
        y, rstd = ref_rmsnorm(xd, w.astype(np.float64), 1e-6)
        return inputs, {"y": y, "rstd": rstd}
    if op in ("softmax", "log_softmax"):
        return inputs, {"y": ref_softmax(xd, -1, op == "log_softmax")}
    a = storage(rng.uniform(0.05, 0.5, size=shape[1]), dt)
    inputs.update(alpha=a)
    return inputs, {"y": ref_prelu(xd, a.astype(np.float64))}


def out_spec(name, x, dt):
    """(numpy type, shape, byte size) of output name for input x: y is x's dtype and shape, the
    statistics FP32 with one value per row."""
    if name == "y":
        return NP_TYPE[dt], x.shape, x.nbytes
    return np.float32, x.shape[:-1], int(np.prod(x.shape[:-1])) * 4


def shm_input(name, arr, dt, region, offset):
    t = httpclient.InferInput(name, list(arr.shape), dt)
    t.set_shared_memory(region.name, arr.nbytes, offset=offset)
    return t


def body_input(name, arr, dt, binary=True):
    t = httpclient.InferInput(name, list(arr.shape), dt)
    t.set_data_from_numpy(arr, binary_data=binary)
    return t


def shm_output(name, region, byte_size, offset):
    o = httpclient.InferRequestedOutput(name)
    o.set_shared_memory(region.name, byte_size, offset=offset)
    return o


def assert_in_region(res, name, region, byte_size):
    """The answer's output name went to region: its name and size are there, no values. (Read
    from the answer's JSON: tritonclient 2.73's as_numpy raises KeyError('data') for an output
    that has neither data nor binary_data_size, as an output in shared memory has.)"""
    out = res.get_output(name)
    assert out is not None, f"output {name} missing from the answer"
    assert "data" not in out, f"output {name} in shared memory, yet the answer has data: {out}"
    params = out.get("parameters", {})
    assert "binary_data_size" not in params, f"output {name} also sent as binary: {out}"
    assert params.get("shared_memory_region") == region.name, out
    assert params.get("shared_memory_byte_size") == byte_size, out


# ---------------------------------------------------------------- tests

def infer_all_in_shm(client, regions, op, dt, inputs, ref, at, start, gap):
    """Runs op with every input read from one region and every output written to another, the
    regions registered at byte `at` of their objects and the tensors `start` bytes into them,
    `gap` bytes apart; checks the answer, the outputs against ref, and that no other byte of the
    output region was written nor any input changed."""
    x = inputs["x"]
    in_off, in_end = layout([a.nbytes for a in inputs.values()], start, gap)
    rin = regions("in", in_end + gap, at=at)
    for (name, arr), off in zip(inputs.items(), in_off):
        rin.write(arr, off)
    specs = {n: out_spec(n, x, dt) for n in ref}
    out_off, out_end = layout([s[2] for s in specs.values()], start, gap)
    rout = regions("out", out_end + gap, at=at)
    rout.poison()

    res = client.infer(op,
                       [shm_input(n, a, dt, rin, off)
                        for (n, a), off in zip(inputs.items(), in_off)],
                       outputs=[shm_output(n, rout, specs[n][2], off)
                                for n, off in zip(ref, out_off)],
                       request_id=f"{op}-{dt}")
    assert res.get_response()["id"] == f"{op}-{dt}"
    assert res.get_response()["model_name"] == op
    assert sorted(o["name"] for o in res.get_response()["outputs"]) == sorted(ref)
    for (name, r), off in zip(ref.items(), out_off):
        np_type, shape, nbytes = specs[name]
        assert_in_region(res, name, rout, nbytes)
        assert_close(rout.read(np_type, shape, off), r, dt if name == "y" else "FP32",
                     f"{op} {dt} {name} from shm")
    # nothing written before, between or after the outputs
    edges = [0] + [p for off, s in zip(out_off, specs.values()) for p in (off, off + s[2])]
    edges.append(rout.window)
    for lo, hi in zip(edges[0::2], edges[1::2]):
        assert rout.is_poison(lo, hi), f"bytes [{lo}, {hi}) of the output region written"
    # the inputs are as they were
    for (name, arr), off in zip(inputs.items(), in_off):
        assert np.array_equal(rin.read(arr.dtype, arr.shape, off).view(np.uint8),
                              arr.view(np.uint8)), f"input {name} changed in its region"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", DTYPES)
def test_every_op_and_dtype_through_shared_memory(client, regions, op, dt):
    inputs, ref = make_case(op, dt, rng_for("every", op, dt))
    # regions at byte 512 of their objects, tensors from byte 24 of them, 40 bytes apart
    infer_all_in_shm(client, regions, op, dt, inputs, ref, at=512, start=24, gap=40)


@pytest.mark.parametrize("dt", DTYPES)
def test_large_tensors_at_odd_offsets(client, regions, dt):
    # a few MB across many pages; regions at an odd byte of their objects, tensors at odd
    # offsets (no alignment is promised to the daemon)
    inputs, ref = make_case("layernorm", dt, rng_for("large", dt), shape=(300, 1000))
    infer_all_in_shm(client, regions, "layernorm", dt, inputs, ref, at=4093, start=3, gap=5)


def test_status_and_unregister(client, regions):
    a = regions("status-a", 4096)
    b = regions("status-b", 1000, at=4096 + 24)
    status = client.get_system_shared_memory_status()
    by_name = {s["name"]: s for s in status}
    assert set(by_name) == {a.name, b.name}, status
    for r in (a, b):
        s = by_name[r.name]
        assert s["key"] == r.key and int(s["offset"]) == r.at, s
        assert int(s["byte_size"]) == r.window, s
    # one region's status alone
    one = client.get_system_shared_memory_status(region_name=b.name)
    assert [s["name"] for s in one] == [b.name]
    # unregister one by name: the other stays, and the first can no longer be named
    client.unregister_system_shared_memory(a.name)
    assert [s["name"] for s in client.get_system_shared_memory_status()] == [b.name]
    with pytest.raises(InferenceServerException, match=re.escape(a.name)):
        client.get_system_shared_memory_status(region_name=a.name)
    # then every region
    client.register_system_shared_memory(a.name, a.key, a.window)
    assert len(client.get_system_shared_memory_status()) == 2
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []
    # a region unregistered cannot be used
    x = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException, match="no shared memory region named"):
        client.infer("softmax", [shm_input("x", x, "FP32", b, 0)])


def test_errors_in_inference_requests(client, regions):
    rng = rng_for("errors")
    x = storage(rng.normal(size=(4, 16)), "FP32")
    rin = regions("err-in", 1024)
    rin.write(x, 0)
    rout = regions("err-out", 4096)
    rout.poison()

    def y_to(region, byte_size, offset=0):
        return [shm_output("y", region, byte_size, offset)]

    # a region name never registered
    t = httpclient.InferInput("x", list(x.shape), "FP32")
    t.set_shared_memory(f"nosuch-{PID}", x.nbytes)
    with pytest.raises(InferenceServerException,
                       match=f'no shared memory region named "nosuch-{PID}"'):
        client.infer("softmax", [t])
    # offset + byte_size past the region's end (1024 bytes)
    with pytest.raises(InferenceServerException,
                       match=f'inputs\\[0\\].*run past region "{rin.name}" of 1024 bytes'):
        client.infer("softmax", [shm_input("x", x, "FP32", rin, 1024 - x.nbytes + 4)])
    # shared_memory_byte_size not the tensor's size
    t = httpclient.InferInput("x", list(x.shape), "FP32")
    t.set_shared_memory(rin.name, x.nbytes - 4)
    with pytest.raises(InferenceServerException,
                       match=rf"shared_memory_byte_size={x.nbytes - 4}: shape \[4,16\] of FP32 "
                             rf"is {x.nbytes} bytes"):
        client.infer("softmax", [t])
    # an output whose shared_memory_byte_size is less than y
    with pytest.raises(InferenceServerException,
                       match=f"outputs\\[0\\].parameters.shared_memory_byte_size={x.nbytes - 4}: "
                             f"y is {x.nbytes} bytes"):
        client.infer("softmax", [shm_input("x", x, "FP32", rin, 0)],
                     outputs=y_to(rout, x.nbytes - 4))
    assert rout.is_poison(0, rout.window), "a refused request wrote to its output region"
    # the daemon still answers, and the same regions work once the request is right
    res = client.infer("softmax", [shm_input("x", x, "FP32", rin, 0)],
                       outputs=y_to(rout, x.nbytes, offset=4096 - x.nbytes))
    assert_in_region(res, "y", rout, x.nbytes)
    assert_close(rout.read(np.float32, x.shape, 4096 - x.nbytes),
                 ref_softmax(x.astype(np.float64), -1, False), "FP32", "softmax after errors")


# An output's window must hold the output, whatever its shared_memory_byte_size claims: a window
# 8 bytes short is refused, and nothing past the region's end (a poisoned tail of the same
# object) is written.
@pytest.mark.parametrize("output", ["y", "rstd"])
def test_output_region_too_small_for_the_output(client, regions, output):
    x = storage(rng_for("too small", output).normal(size=(4, 16)), "FP32")
    rin = regions("small-in", x.nbytes)
    rin.write(x, 0)
    rout = regions("small-out", 1000, tail=3096)
    rout.poison()
    np_type, shape, nbytes = out_spec(output, x, "FP32")
    # the request claims room enough; the region has 8 bytes less after the offset
    offset = rout.window - nbytes + 8
    with pytest.raises(InferenceServerException,
                       match=f'outputs\\[0\\].*run past region "{rout.name}"'):
        client.infer("layernorm", [shm_input("x", x, "FP32", rin, 0)],
                     outputs=[shm_output(output, rout, nbytes, offset)])
    assert rout.is_poison(0, rout.window + rout.tail), "written past the region's end"


def test_errors_in_registration(client, regions):
    r = regions("reg", 256)
    # a key no object has
    missing = f"/normd_pytest_{PID}_missing"
    with pytest.raises(InferenceServerException,
                       match=f'key "{missing}": cannot open the shared memory object'):
        client.register_system_shared_memory(f"reg-missing-{PID}", missing, 64)
    # the same name twice (even for the same window)
    with pytest.raises(InferenceServerException, match=f'"{r.name}" is already registered'):
        client.register_system_shared_memory(r.name, r.key, 256)
    # a window past the object's end
    with pytest.raises(InferenceServerException, match="the object is 256 bytes"):
        client.register_system_shared_memory(f"reg-past-{PID}", r.key, 200, offset=100)
    # none of the failed registrations is listed; the first one still is, unchanged
    status = client.get_system_shared_memory_status()
    assert [(s["name"], int(s["byte_size"])) for s in status] == [(r.name, 256)], status


def test_mixing_shared_memory_and_the_body(client, regions):
    rng = rng_for("mixing")
    dt = "FP16"
    inputs, ref = make_case("layernorm", dt, rng, shape=(6, 40))
    x = inputs["x"]
    rin = regions("mix-in", x.nbytes + 64)
    rin.write(x, 64)
    rout = regions("mix-out", x.nbytes + 32)

    # x from shared memory, gamma and beta in the body; y back as binary in the answer,
    # rstd as JSON
    rout.poison()
    res = client.infer("layernorm",
                       [shm_input("x", x, dt, rin, 64),
                        body_input("gamma", inputs["gamma"], dt),
                        body_input("beta", inputs["beta"], dt)],
                       outputs=[httpclient.InferRequestedOutput("y", binary_data=True),
                                httpclient.InferRequestedOutput("rstd", binary_data=False)])
    assert res.get_output("y")["parameters"]["binary_data_size"] == x.nbytes
    assert "data" in res.get_output("rstd")
    assert_close(res.as_numpy("y"), ref["y"], dt, "y in the body, x from shm")
    assert_close(res.as_numpy("rstd"), ref["rstd"], "FP32", "rstd as JSON, x from shm")
    assert rout.is_poison(0, rout.window), "an output not asked in shm was written there"

    # x sent in the body (binary, then JSON) with y into shared memory and mean as binary
    for binary in (True, False):
        rout.poison()
        res = client.infer("layernorm",
                           [body_input(n, a, dt, binary) for n, a in inputs.items()],
                           outputs=[shm_output("y", rout, x.nbytes, 32),
                                    httpclient.InferRequestedOutput("mean", binary_data=True)])
        assert_in_region(res, "y", rout, x.nbytes)
        assert_close(rout.read(np.float16, x.shape, 32), ref["y"], dt,
                     f"y to shm, x in the body (binary={binary})")
        assert_close(res.as_numpy("mean"), ref["mean"], "FP32", "mean in the body, y to shm")
        assert rout.is_poison(0, 32)


def test_output_over_its_own_input(client, regions):
    # y written where x was read from: the daemon reads x before it writes y
    rng = rng_for("in place")
    for dt in DTYPES:
        inputs, ref = make_case("rmsnorm", dt, rng, shape=(7, 33))
        x, w = inputs["x"], inputs["weight"]
        r = regions(f"inplace-{dt}", x.nbytes + w.nbytes + 16)
        r.write(x, 16)
        r.write(w, 16 + x.nbytes)
        res = client.infer("rmsnorm",
                           [shm_input("x", x, dt, r, 16), shm_input("weight", w, dt, r,
                                                                    16 + x.nbytes)],
                           outputs=[shm_output("y", r, x.nbytes, 16)])
        assert_in_region(res, "y", r, x.nbytes)
        assert_close(r.read(NP_TYPE[dt], x.shape, 16), ref["y"], dt, f"rmsnorm {dt} in place")


def test_64_concurrent_async_requests(client, regions):
    rng = rng_for("async")
    n, dt, width = 64, "BF16", 48
    cases = []
    for i in range(n):
        op = OPS[i % len(OPS)]
        cases.append((op,) + make_case(op, dt, rng, shape=(1 + i % 3, 2 + i % 4, width)))
    # every request's inputs in one region and its y at its own slot of one output region; the
    # slots are as large as the largest y plus a gap, which must stay poison
    slot = max(c[1]["x"].nbytes for c in cases) + 40
    in_sizes = [a.nbytes for c in cases for a in c[1].values()]
    in_off, in_end = layout(in_sizes, 8, 8)
    rin = regions("async-in", in_end)
    rout = regions("async-out", n * slot)
    rout.poison()
    offsets = iter(in_off)
    pending = []
    for i, (op, inputs, ref) in enumerate(cases):
        shm_inputs = []
        for name, arr in inputs.items():
            off = next(offsets)
            rin.write(arr, off)
            shm_inputs.append(shm_input(name, arr, dt, rin, off))
        pending.append(client.async_infer(
            op, shm_inputs, outputs=[shm_output("y", rout, inputs["x"].nbytes, i * slot)],
            request_id=str(i)))
    for i, p in enumerate(pending):
        res = p.get_result(timeout=60)
        assert res.get_response()["id"] == str(i)
        op, inputs, ref = cases[i]
        x = inputs["x"]
        assert_in_region(res, "y", rout, x.nbytes)
        assert_close(rout.read(ml_dtypes.bfloat16, x.shape, i * slot), ref["y"], dt,
                     f"async request {i} ({op})")
        assert rout.is_poison(i * slot + x.nbytes, (i + 1) * slot), f"past request {i}'s y"


def test_extension_off_without_the_flag(client, plain_client):
    # the shm daemon announces the extension; the plain one does not
    assert "system_shared_memory" in client.get_server_metadata()["extensions"]
    assert "system_shared_memory" not in plain_client.get_server_metadata()["extensions"]
    # a real object, that the shm daemon would take: the plain one refuses it
    r = Region("plain", 64)
    try:
        with pytest.raises(InferenceServerException, match="--allow-client-shm"):
            plain_client.register_system_shared_memory(r.name, r.key, 64)
        with pytest.raises(InferenceServerException, match="--allow-client-shm"):
            plain_client.get_system_shared_memory_status()
        x = np.ones((2, 8), dtype=np.float32)
        with pytest.raises(InferenceServerException, match="--allow-client-shm"):
            plain_client.infer("softmax", [shm_input("x", x, "FP32", r, 0)])
        # and it still serves tensors in the body
        res = plain_client.infer("softmax", [body_input("x", x, "FP32")])
        assert_close(res.as_numpy("y"), ref_softmax(x.astype(np.float64), -1, False), "FP32",
                     "softmax on the daemon without shm")
    finally:
        shm.destroy_shared_memory_region(r.handle)
