import subprocess
import sys


def test_kernels_do_not_import_pymc_or_pytensor():
    code = (
        "import sys, pymc_minibatch_mh.kernels\n"
        "bad = [m for m in ('pymc', 'pytensor') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
