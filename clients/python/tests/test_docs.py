"""docs/clients.md's Python example, run as it is written against a real
svc serve on examples/specs (only the server's address is mapped to the
test's server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO, Server


@pytest.fixture(scope="module")
def examples_server(svc_bin: str) -> Iterator[Server]:
    s = Server(svc_bin, REPO / "examples" / "specs")
    yield s
    s.stop()


def block(file: str, heading: str, lang: str) -> str:
    text = (REPO / file).read_text()
    at = text.index(f"\n{heading}\n")
    m = re.search("```" + lang + r"\n(.*?)\n```", text[at:], re.S)
    assert m, f"{file}: no ```{lang} block under {heading}"
    return m.group(1)


def test_clients_md_python_example(examples_server: Server, tmp_path: Path) -> None:
    code = block("docs/clients.md", "## Python", "python")
    src = code.replace("http://127.0.0.1:8420", examples_server.url)
    assert src != code, "the example names the server"
    f = tmp_path / "example.py"
    f.write_text(src)
    env = {**os.environ, "SVC_AUTH_TOKEN": "", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run([sys.executable, str(f)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "{'text': 'hello'}"
    assert lines[1] == "10000"
    assert lines[2] == "1 agent_started"
    assert re.search(r"^\d+ group_completed$", out.stdout, re.M)
    assert "completed True" in lines
    assert any(re.match(r'^404 unknown agent "nope"', l) for l in lines)
    assert lines[-1] == "64"
