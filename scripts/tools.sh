# Sourced by the scripts that run Python tools: the pinned ones of
# requirements-test.txt, in .venv/ (`make tools` makes it where it is missing
# or older than the file), first on PATH. Nothing goes into the system Python.
tools_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
make -s --no-print-directory -C "$tools_root" tools >&2
export PATH="$tools_root/.venv/bin:$PATH"
hash -r
