#!/usr/bin/env bash
# Schemathesis drives the built `submit` function from docs/openapi.yaml:
# generated requests, positive and negative, every answer checked against the
# document (status codes, headers, bodies, content types), and no 5xx for any
# input. The function runs as in Lambda, under scripts/api_front.py (a
# runtime API stand-in behind an HTTP front), over the moto S3 that
# scripts/with-moto.sh started. Run it through with-moto.sh:
#   ./scripts/with-moto.sh ./scripts/api-fuzz.sh [EXAMPLES] [SEED|random]
# make test runs it deterministically with few examples; make api-fuzz with
# more, from a fresh random seed (printed, to replay a failure).
set -euo pipefail
cd "$(dirname "$0")/.."

examples="${1:-15}"
seed="${2:-1}"
binary="${SUBMIT_BIN:-target/debug/submit}"
[ -x "$binary" ] || { echo "no $binary: build it first (cargo build --bin submit)" >&2; exit 1; }
. scripts/tools.sh

bucket="api-fuzz-$$"
python3 - "$bucket" <<'PY'
import os, sys, boto3
boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
             aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket=sys.argv[1])
PY

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
log=$(mktemp -t api-front.XXXXXX.log)
# Every documented route is routed: a key reset too (ALLOW_KEY_RESET).
BUCKET_NAME="$bucket" S3_FORCE_PATH_STYLE=true AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
  AWS_REGION=us-east-1 ALLOW_KEY_RESET=on python3 scripts/api_front.py "$binary" "$port" >"$log" 2>&1 &
front=$!
trap 'kill "$front" 2>/dev/null || true; wait "$front" 2>/dev/null || true; rm -f "$log"' EXIT INT TERM
for _ in $(seq 1 100); do
  grep -q "submit on" "$log" && break
  kill -0 "$front" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done

if [ "$seed" = random ]; then
  mode=(--seed "$(date +%s)")
else
  mode=(--seed "$seed" --generation-deterministic)
fi
SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH="scripts${PYTHONPATH:+:$PYTHONPATH}" \
st run docs/openapi.yaml --url "http://127.0.0.1:$port" \
  --checks all --max-examples "$examples" "${mode[@]}" --no-color
