"""normd through NVIDIA's tritonclient[http]: the KServe v2 protocol as existing clients speak it.

Every operator x FP32/FP16/BF16 x binary/JSON tensors (BF16 only binary, as in Triton), parameter
tensors as inputs, eps and axis as request parameters, output selection, 64 concurrent async
requests, and errors surfaced by the client. Answers are checked against the float64 numpy
references of nd_common.py, with the project's tolerance rule (tests/util/nd_testutil.h):
  FP32:       |got - ref| <= 1e-5 * max(1, |ref|)
  FP16, BF16: got within 1 ulp of ref rounded to the dtype, or |got - ref| <= 1e-5
The daemon is build/normd (or $NORMD_BIN) on a free port, backend $NORMD_BACKEND (default cpu).
"""

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from nd_common import (assert_close, ref_layernorm, ref_prelu, ref_rmsnorm, ref_softmax,
                       start_daemon, storage)

OPS = ["layernorm", "rmsnorm", "softmax", "log_softmax", "prelu"]
DTYPES = ["FP32", "FP16", "BF16"]


# ---------------------------------------------------------------- the daemon

@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    yield from start_daemon(tmp_path_factory, "test_v2_tritonclient.log", [])


@pytest.fixture(scope="module")
def client(daemon):
    c = httpclient.InferenceServerClient(daemon, concurrency=8)
    yield c
    c.close()


# ---------------------------------------------------------------- one case

def make_case(op, dt, rng, shape=(3, 5, 12), axis=None, eps=None):
    x = storage(rng.normal(0.5, 2.0, size=shape), dt)
    xd = x.astype(np.float64)
    c = shape[-1]
    inputs = {"x": x}
    outs = {}
    if op == "layernorm":
        g = storage(rng.normal(1.0, 0.5, size=c), dt)
        b = storage(rng.normal(0.0, 0.5, size=c), dt)
        inputs.update(gamma=g, beta=b)
        y, mean, rstd = ref_layernorm(xd, g.astype(np.float64), b.astype(np.float64),
                                      1e-5 if eps is None else eps)
        outs = {"y": y, "mean": mean, "rstd": rstd}
    elif op == "rmsnorm":
        w = storage(rng.normal(1.0, 0.5, size=c), dt)
        inputs.update(weight=w)
        y, rstd = ref_rmsnorm(xd, w.astype(np.float64), 1e-6 if eps is None else eps)
        outs = {"y": y, "rstd": rstd}
    elif op in ("softmax", "log_softmax"):
        outs = {"y": ref_softmax(xd, -1 if axis is None else axis, op == "log_softmax")}
    else:
        a = storage(rng.uniform(0.05, 0.5, size=shape[1]), dt)
        inputs.update(alpha=a)
        outs = {"y": ref_prelu(xd, a.astype(np.float64))}
    return inputs, outs


def infer_inputs(inputs, dt, binary):
    out = []
    for name, arr in inputs.items():
        t = httpclient.InferInput(name, list(arr.shape), dt)
        t.set_data_from_numpy(arr, binary_data=binary)
        out.append(t)
    return out


# ---------------------------------------------------------------- tests

def test_server_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "normd"
    assert {"binary_tensor_data", "statistics", "model_configuration"} <= set(meta["extensions"])
    for op in OPS:
        assert client.is_model_ready(op)
        assert client.is_model_ready(op, "1")
        m = client.get_model_metadata(op)
        assert m["name"] == op and m["versions"] == ["1"]
        assert m["inputs"][0]["name"] == "x" and m["outputs"][0]["name"] == "y"
        cfg = client.get_model_config(op)
        assert cfg["name"] == op


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_every_op_dtype_and_form(client, op, dt, binary):
    if dt == "BF16" and not binary:
        pytest.skip("BF16 travels only as binary")
    rng = np.random.default_rng(hash((op, dt, binary)) % 2**32)
    inputs, ref = make_case(op, dt, rng)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ref]
    res = client.infer(op, infer_inputs(inputs, dt, binary), outputs=outputs,
                       request_id="case-7")
    assert res.get_response()["id"] == "case-7"
    assert res.get_response()["model_name"] == op
    for name, r in ref.items():
        got = res.as_numpy(name)
        assert got is not None, f"output {name} missing"
        assert_close(got, r, dt if name == "y" else "FP32", f"{op} {dt} {name}")


@pytest.mark.parametrize("dt", ["FP32", "FP16"])
def test_eps_and_axis_parameters(client, dt):
    rng = np.random.default_rng(11)
    inputs, ref = make_case("layernorm", dt, rng, shape=(4, 9), eps=0.5)
    res = client.infer("layernorm", infer_inputs(inputs, dt, True), parameters={"eps": 0.5})
    assert_close(res.as_numpy("y"), ref["y"], dt, "layernorm eps=0.5")
    for axis in (0, 1, -3):
        inputs, ref = make_case("log_softmax", dt, rng, shape=(3, 4, 5), axis=axis)
        res = client.infer("log_softmax", infer_inputs(inputs, dt, False),
                           parameters={"axis": axis})
        assert_close(res.as_numpy("y"), ref["y"], dt, f"log_softmax axis={axis}")


def test_output_selection(client):
    rng = np.random.default_rng(5)
    inputs, ref = make_case("layernorm", "FP32", rng)
    res = client.infer("layernorm", infer_inputs(inputs, "FP32", True),
                       outputs=[httpclient.InferRequestedOutput("rstd")])
    names = [o["name"] for o in res.get_response()["outputs"]]
    assert names == ["rstd"]
    assert res.as_numpy("y") is None
    assert_close(res.as_numpy("rstd"), ref["rstd"], "FP32", "rstd alone")
    # with no outputs named, every output of the model comes back (as Triton does)
    res = client.infer("rmsnorm", infer_inputs(make_case("rmsnorm", "FP32", rng)[0], "FP32",
                                               True))
    assert sorted(o["name"] for o in res.get_response()["outputs"]) == ["rstd", "y"]


def test_without_parameter_tensors(client):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 7)).astype(np.float32)
    res = client.infer("layernorm", infer_inputs({"x": x}, "FP32", True))
    y, _, _ = ref_layernorm(x.astype(np.float64), 1.0, 0.0, 1e-5)
    assert_close(res.as_numpy("y"), y, "FP32", "layernorm without gamma/beta")


def test_64_concurrent_async_requests(client):
    rng = np.random.default_rng(64)
    cases, pending = [], []
    for i in range(64):
        inputs, ref = make_case("rmsnorm", "FP16", rng, shape=(1 + i % 4, 33))
        inputs["weight"] = cases[0][0]["weight"] if cases else inputs["weight"]
        ref["y"], ref["rstd"] = ref_rmsnorm(inputs["x"].astype(np.float64),
                                            inputs["weight"].astype(np.float64), 1e-6)
        cases.append((inputs, ref))
        pending.append(client.async_infer("rmsnorm", infer_inputs(inputs, "FP16", True),
                                          request_id=str(i)))
    for i, p in enumerate(pending):
        res = p.get_result(timeout=60)
        assert res.get_response()["id"] == str(i)
        assert_close(res.as_numpy("y"), cases[i][1]["y"], "FP16", f"async request {i}")


def test_statistics_count_requests(client):
    before = client.get_inference_statistics("softmax")["model_stats"][0]
    rng = np.random.default_rng(3)
    for _ in range(3):
        client.infer("softmax", infer_inputs(make_case("softmax", "FP32", rng)[0], "FP32", True))
    after = client.get_inference_statistics("softmax")["model_stats"][0]
    succ = lambda s: int(s["inference_stats"]["success"]["count"])
    assert succ(after) == succ(before) + 3
    assert int(after["execution_count"]) >= int(before["execution_count"]) + 1
    assert int(after["inference_stats"]["compute_infer"]["ns"]) > 0
    everything = client.get_inference_statistics()["model_stats"]
    assert sorted(s["name"] for s in everything) == sorted(OPS)


def test_errors_reach_the_client(client):
    x = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException, match="(?i)model"):
        client.infer("batchnorm", infer_inputs({"x": x}, "FP32", True))
    with pytest.raises(InferenceServerException, match="(?i)version"):
        client.infer("softmax", infer_inputs({"x": x}, "FP32", True), model_version="2")
    with pytest.raises(InferenceServerException, match="bias"):
        client.infer("layernorm", infer_inputs({"x": x, "bias": x[0]}, "FP32", True))
    with pytest.raises(InferenceServerException, match="gamma"):
        client.infer("layernorm", infer_inputs({"x": x, "gamma": x[0, :3]}, "FP32", True))
    with pytest.raises(InferenceServerException, match='unknown input "gamma"'):
        client.infer("softmax", infer_inputs({"gamma": x}, "FP32", True))
    with pytest.raises(InferenceServerException, match='no input named "x"'):
        client.infer("softmax", [])
    t = httpclient.InferInput("x", [2, 4], "INT32")
    t.set_data_from_numpy(np.ones((2, 4), dtype=np.int32))
    with pytest.raises(InferenceServerException, match="INT32"):
        client.infer("softmax", [t])
    with pytest.raises(InferenceServerException, match="axis"):
        client.infer("softmax", infer_inputs({"x": x}, "FP32", True), parameters={"axis": 5})
    with pytest.raises(InferenceServerException, match="(?i)no parameter set"):
        client.infer("rmsnorm", infer_inputs({"x": x}, "FP32", True),
                     parameters={"params": "nosuchset"})
    # the daemon still answers after all of that
    assert client.is_server_ready()


def test_compressed_request_and_answer(client):
    rng = np.random.default_rng(21)
    inputs, ref = make_case("softmax", "FP32", rng, shape=(16, 64))
    for algo in ("gzip", "deflate"):
        res = client.infer("softmax", infer_inputs(inputs, "FP32", True),
                           request_compression_algorithm=algo,
                           response_compression_algorithm=algo)
        assert_close(res.as_numpy("y"), ref["y"], "FP32", f"softmax over {algo}")
