"""What a user does: a fresh virtualenv, `pip install` of the package from the
repository, then torchrun (elastic c10d rendezvous, `--standalone`) of the
example on the causeway backend.

The fresh venv borrows torch from the project venv through a .pth file (so the
test does not download and unpack 5 GB of torch again); the `causeway`
package itself is built and installed by pip into the fresh venv, and the
test checks that the fresh copy is the one imported.
"""

import json
import os
import pathlib
import subprocess
import sys
import sysconfig

PACKAGE = pathlib.Path(__file__).resolve().parents[1]
REPO = PACKAGE.parents[1]


def test_fresh_venv_pip_install_then_torchrun_of_the_example(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # torch from the project venv, after the fresh venv's own packages.
    pathlib.Path(site, "torch-from-project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = dict(os.environ)
    # Reuse the repository's build directory: only what changed is compiled.
    env["CARGO_TARGET_DIR"] = str(REPO / "target")
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(PACKAGE)],
        check=True, env=env, timeout=900,
    )
    where = subprocess.run(
        [str(py), "-c", "import causeway, causeway.torch; print(causeway.__file__)"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    assert where.startswith(site), f"causeway imported from {where}, not the fresh venv's {site}"
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    run_env.update(CAUSEWAY_PROBE="0", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [str(py), "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
         str(PACKAGE / "examples" / "train.py"), "--backend", "causeway", "--steps", "6",
         "--hidden", "128", "--eval-every", "3"],
        capture_output=True, text=True, env=run_env, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary = [json.loads(l) for l in done.stdout.splitlines() if l.startswith("{") and '"summary"' in l]
    assert len(summary) == 1, done.stdout[-2000:]
    s = summary[0]
    assert s["backend"] == "causeway" and s["world"] == 2 and s["steps"] == 6, s
    assert s["final_accuracy"] is not None and 0.0 <= s["final_accuracy"] <= 1.0, s
