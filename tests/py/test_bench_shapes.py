"""bench_gpu.cu and bench/torch_bench.py time the same shapes: plot.py joins their CSVs by (op,
dtype, shape), so a width in one list and not the other drops out of the x torch.compile column.

The lists in bench_gpu.cu are read from its source (the row widths, the long rows, the widths
suite); torch_bench.py's from its make_shapes(), imported with stand-in torch modules (its shape
list needs no GPU)."""
import importlib.util
import pathlib
import re
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]


def torch_bench():
    if importlib.util.find_spec("torch") is None:  # stand-ins: make_shapes uses none of torch
        stubs = {n: types.ModuleType(n) for n in ("torch", "torch.nn", "torch.nn.functional")}
        for dt in ("float32", "float16", "bfloat16"):
            setattr(stubs["torch"], dt, dt)
        for name, mod in stubs.items():
            sys.modules.setdefault(name, mod)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import torch_bench as tb
    finally:
        sys.path.pop(0)
    return tb


def cu_list(src, pattern):
    m = re.search(pattern, src, re.S)
    assert m, pattern
    return [int(x.rstrip("LL")) for x in re.findall(r"\d+(?:LL)?", m.group(1))]


def test_bench_gpu_and_torch_bench_time_the_same_row_shapes():
    src = (ROOT / "bench" / "bench_gpu.cu").read_text()
    cols = cu_list(src, r"std::vector<int64_t> cols = \{([^}]*)\};")
    long_cols = cu_list(src, r"for \(int64_t c : \{([^}]*)\}\)")
    widths = cu_list(src, r"const int64_t widths\[\] = \{([^}]*)\};")
    assert len(cols) == 18 and len(widths) == 36 and long_cols == [65536, 262144, 1048576]

    shapes = torch_bench().make_shapes(False)
    ops = ("layernorm", "rmsnorm", "softmax", "log_softmax")
    for op in ops:
        rows = [s for s in shapes if s[0] == "rows" and s[1] == op]
        assert [s[3][1] for s in rows] == cols + long_cols, op
        assert [s[2] for s in rows] == [f"49152x{c}" for c in cols] + \
            [f"{(128 << 20) // c}x{c}" for c in long_cols], op
        wide = [s for s in shapes if s[0] == "widths" and s[1] == op]
        assert [s[3] for s in wide] == [(49152, c) for c in widths], op
    # no width of the survey is in the goals' list: "all" leaves the survey out
    assert not set(widths) & set(cols)
