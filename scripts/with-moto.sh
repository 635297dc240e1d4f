#!/usr/bin/env bash
# Runs a command with a moto S3 server on a free loopback port (or on
# MOTO_PORT), with the pinned Python tools (.venv/, scripts/tools.sh) first
# on PATH; stops the server afterwards. The command sees S3_TEST_ENDPOINT
# (for the tests) and AWS_ENDPOINT_URL_S3.
set -euo pipefail

. "$(dirname "$0")/tools.sh"

# MOTO_PORT where given (make run's fixed one), else a free port.
port=${MOTO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')}
log=$(mktemp -t moto.XXXXXX.log)
# moto's S3 served one request at a time, so that its conditional writes are
# atomic as S3's are (scripts/moto_serial.py says why).
python3 "$(dirname "$0")/moto_serial.py" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto_pid=$!
trap 'kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; rm -f "$log"' EXIT INT TERM

for _ in $(seq 1 100); do
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$moto_pid" 2>/dev/null; then
    echo "moto_server exited:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 0.1
done

export S3_TEST_ENDPOINT="http://127.0.0.1:$port"
export AWS_ENDPOINT_URL_S3="$S3_TEST_ENDPOINT"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}" S3_FORCE_PATH_STYLE=true
echo "moto S3 at $S3_TEST_ENDPOINT" >&2
"$@"
