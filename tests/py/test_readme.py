"""README.md stays true to the daemon: its options table lists exactly the flags `normd --help`
prints, each with its environment variable."""
import os
import re
import subprocess


def help_flags():
    binary = os.environ.get("NORMD_BIN", "build/normd")
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    flags = {}
    for line in out.splitlines():
        m = re.match(r"  --(\S+)\s+(NORMD_\S+)?", line)
        if m:
            flags[m.group(1)] = m.group(2) or ""
    return flags


def readme_flags():
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    section = text.split("### Options", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `--([^`]+)` \| (?:`(NORMD_[^`]+)`)? \|", section, re.M):
        rows[m.group(1)] = m.group(2) or ""
    return rows


def test_readme_lists_every_flag_of_help_and_no_other():
    h, r = help_flags(), readme_flags()
    assert len(h) > 10, f"--help printed too few flags: {h}"
    assert set(h) - set(r) == set(), f"flags missing from README: {sorted(set(h) - set(r))}"
    assert set(r) - set(h) == set(), f"README flags normd does not have: {sorted(set(r) - set(h))}"
    for flag, env in h.items():
        assert r[flag] == env, f"--{flag}: README says {r[flag]!r}, --help says {env!r}"
