"""normd's CUDA shared memory extension through NVIDIA's tritonclient[http] and its
tritonclient.utils.cuda_shared_memory helpers: device memory this process allocates and exports by
CUDA IPC handle, as a model server beside normd would.

What is tested, on a daemon started with --allow-client-shm and the cuda backend:
  - every operator x FP32/FP16/BF16 with x and the parameter tensors read from one registered
    device region (at non-zero offsets) and y, mean and rstd written to another; the output region
    is poisoned (all bytes 0xFF, a NaN in every float type) before each request, and the bytes
    around and between the outputs must still be poison afterwards; the inputs are unchanged;
  - the status of registered regions (name, device_id, byte_size), unregistering one by name and
    all, and a region refused once unregistered;
  - 32 concurrent async_infer requests writing to their own offsets of one output region (they
    share batches, whose tensors the daemon copies device to device);
  - a byte_size past the allocation, refused with a message that says so.

Answers are checked against the float64 numpy references of nd_common.py with the project's
tolerance rule. Only with NORMD_BACKEND=cuda and the CUDA Python bindings that tritonclient's
CUDA helpers import (tritonclient[cuda]); skipped elsewhere, so `make test` on a machine without
a GPU skips this file. Region names carry this process's id.
"""
import os

import numpy as np
import pytest

if os.environ.get("NORMD_BACKEND") != "cuda":
    pytest.skip("CUDA shared memory needs NORMD_BACKEND=cuda", allow_module_level=True)
cudashm = pytest.importorskip("tritonclient.utils.cuda_shared_memory")

import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from nd_common import assert_close, start_daemon  # noqa: E402
from test_v2_shm_tritonclient import (DTYPES, OPS, layout, make_case, out_spec,  # noqa: E402
                                      rng_for)

PID = os.getpid()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    yield from start_daemon(tmp_path_factory, "test_v2_cudashm_tritonclient.log",
                            ["--allow-client-shm"])


@pytest.fixture(scope="module")
def client(daemon):
    c = httpclient.InferenceServerClient(daemon, concurrency=8)
    yield c
    c.close()


class GpuRegion:
    """size bytes of device memory on CUDA device 0, registered with the daemon as name-PID."""

    def __init__(self, client, name, size):
        self.name, self.size = f"{name}-{PID}", size
        self.handle = cudashm.create_shared_memory_region(self.name, size, 0)
        client.register_cuda_shared_memory(self.name, cudashm.get_raw_handle(self.handle), 0,
                                           size)

    def fill(self, blob):
        """The region's bytes from 0 (uint8 array)."""
        cudashm.set_shared_memory_region(self.handle, [np.ascontiguousarray(blob)])

    def bytes(self):
        return cudashm.get_contents_as_numpy(self.handle, np.uint8, [self.size]).copy()


@pytest.fixture
def regions(client):
    """make(name, size) -> GpuRegion; every region is unregistered and freed at the end."""
    made = []

    def make(name, size):
        made.append(GpuRegion(client, name, size))
        return made[-1]

    yield make
    try:
        for r in made:
            client.unregister_cuda_shared_memory(r.name)  # not registered: not an error
    finally:
        for r in made:
            cudashm.destroy_shared_memory_region(r.handle)


def packed(arrays, offsets, size):
    """A uint8 blob of size bytes (0x00 elsewhere) with each array's bytes at its offset."""
    blob = np.zeros(size, dtype=np.uint8)
    for a, off in zip(arrays, offsets):
        blob[off:off + a.nbytes] = np.ascontiguousarray(a).view(np.uint8).ravel()
    return blob


def gpu_input(name, arr, dt, region, offset):
    t = httpclient.InferInput(name, list(arr.shape), dt)
    t.set_shared_memory(region.name, arr.nbytes, offset=offset)
    return t


def gpu_output(name, region, byte_size, offset):
    o = httpclient.InferRequestedOutput(name)
    o.set_shared_memory(region.name, byte_size, offset=offset)
    return o


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", DTYPES)
def test_every_op_and_dtype_through_cuda_shared_memory(client, regions, op, dt):
    inputs, ref = make_case(op, dt, rng_for("cuda", op, dt))
    x = inputs["x"]
    in_off, in_end = layout([a.nbytes for a in inputs.values()], 64, 32)
    rin = regions("in", in_end + 64)
    blob = packed(inputs.values(), in_off, rin.size)
    rin.fill(blob)
    specs = {n: out_spec(n, x, dt) for n in ref}
    out_off, out_end = layout([s[2] for s in specs.values()], 128, 48)
    rout = regions("out", out_end + 128)
    rout.fill(np.full(rout.size, 0xFF, dtype=np.uint8))

    res = client.infer(op, [gpu_input(n, a, dt, rin, off)
                            for (n, a), off in zip(inputs.items(), in_off)],
                       outputs=[gpu_output(n, rout, specs[n][2], off)
                                for n, off in zip(ref, out_off)])
    for o in res.get_response()["outputs"]:
        assert "data" not in o and o["parameters"]["shared_memory_region"] == rout.name, o
    got = rout.bytes()
    written = np.zeros(rout.size, dtype=bool)
    for (name, r), off in zip(ref.items(), out_off):
        np_type, shape, nbytes = specs[name]
        assert_close(got[off:off + nbytes].view(np_type).reshape(shape), r,
                     dt if name == "y" else "FP32", f"{op} {dt} {name} from CUDA shm")
        written[off:off + nbytes] = True
    assert (got[~written] == 0xFF).all(), "bytes of the output region outside the outputs written"
    assert np.array_equal(rin.bytes(), blob), "the input region changed"


def test_status_and_unregistering(client, regions):
    a, b = regions("sa", 4096), regions("sb", 8192)
    status = {s["name"]: s for s in client.get_cuda_shared_memory_status()}
    assert status[a.name]["byte_size"] == 4096 and status[b.name]["byte_size"] == 8192
    assert int(status[a.name]["device_id"]) == 0
    assert client.get_system_shared_memory_status() == [], "CUDA regions are not system ones"
    client.unregister_cuda_shared_memory(a.name)
    with pytest.raises(InferenceServerException, match="no CUDA shared memory region named"):
        client.get_cuda_shared_memory_status(region_name=a.name)
    x = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException, match="no shared memory region named"):
        client.infer("softmax", [gpu_input("x", x, "FP32", a, 0)])
    client.unregister_cuda_shared_memory()
    assert client.get_cuda_shared_memory_status() == []


def test_a_byte_size_past_the_allocation_is_refused(client):
    h = cudashm.create_shared_memory_region(f"small-{PID}", 4096, 0)
    try:
        # cudaMalloc rounds up to its granularity: ask for far more than any rounding
        with pytest.raises(InferenceServerException, match="the allocation the handle names"):
            client.register_cuda_shared_memory(f"small-{PID}", cudashm.get_raw_handle(h), 0,
                                               64 << 20)
    finally:
        cudashm.destroy_shared_memory_region(h)


def test_concurrent_requests_write_their_own_windows(client, regions):
    n, shape = 32, (4, 256)
    rng = rng_for("cuda concurrent")
    xs = [rng.normal(0, 3, size=shape).astype(np.float16) for _ in range(n)]
    xb = xs[0].nbytes
    rin = regions("cin", n * xb)
    rin.fill(packed(xs, [i * xb for i in range(n)], rin.size))
    rout = regions("cout", n * 2 * xb)
    rout.fill(np.full(rout.size, 0xFF, dtype=np.uint8))
    pending = [client.async_infer("softmax", [gpu_input("x", xs[i], "FP16", rin, i * xb)],
                                  outputs=[gpu_output("y", rout, xb, 2 * i * xb)])
               for i in range(n)]
    for p in pending:
        p.get_result()
    got = rout.bytes()
    for i, x in enumerate(xs):
        xd = x.astype(np.float64)
        e = np.exp(xd - xd.max(axis=-1, keepdims=True))
        assert_close(got[2 * i * xb:(2 * i + 1) * xb].view(np.float16).reshape(shape),
                     e / e.sum(axis=-1, keepdims=True), "FP16", f"request {i}")
        assert (got[(2 * i + 1) * xb:(2 * i + 2) * xb] == 0xFF).all(), f"past request {i}'s y"
