"""Finding and running the `tpusim` command-line program from Python."""

import glob
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_tpusim(path=None):
    """The tpusim binary: `path`, else $TPUSIM, else build/release/tpusim (what `make` builds), else the newest
    build/*/tpusim of this checkout, else None."""
    if path:
        return path
    if os.environ.get("TPUSIM"):
        return os.environ["TPUSIM"]
    release = os.path.join(REPO, "build", "release", "tpusim")
    if os.access(release, os.X_OK):
        return release
    found = [p for p in glob.glob(os.path.join(REPO, "build", "*", "tpusim")) if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def run(tpusim, args, check=True, timeout=600):
    """Runs `tpusim ARGS...`; returns the CompletedProcess (text output). check: raise on a non-zero exit."""
    p = subprocess.run([tpusim] + list(args), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("tpusim %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def has_option(tpusim, command, option):
    """Whether `tpusim COMMAND --help` mentions OPTION (for features that land later, e.g. train --lr-find)."""
    try:
        p = subprocess.run([tpusim, command, "--help"], capture_output=True, text=True, timeout=60)
    except OSError:
        return False
    return option in (p.stdout + p.stderr)
