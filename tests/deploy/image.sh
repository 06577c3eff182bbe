#!/bin/bash
# tests/deploy/image.sh - builds normd's CPU image from the Dockerfile and proves that it serves.
#
#   tests/deploy/image.sh WORKDIR        (make test-image; needs root, podman, mmdebstrap)
#
# No container registry is reachable here, so the base image is made from Debian's packages
# (mmdebstrap) and imported. Containers cannot be started in this sandbox (the runtime cannot set
# rlimits or cgroups), so the image's filesystem is exported and its entrypoint is run the way the
# image says, under chroot as the image's user, with the image's environment, in a network
# namespace of its own (so that it binds the image's 0.0.0.0:8000 and nothing on the host clashes);
# then it gets real requests, and its HEALTHCHECK command is run inside it.
set -euo pipefail

work=${1:?usage: image.sh WORKDIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
base_tag=localhost/debian:bookworm
image=localhost/normd:test
mkdir -p "$work"
work=$(cd "$work" && pwd)
passed=0 failed=0
check() { # check NAME COMMAND...: runs the command, counts and reports the result
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name"
    fi
}
t0=$SECONDS

# ---------------------------------------------------------------- serve (inside the namespace)
if [ "${2:-}" = --serve ]; then
    rootfs=$work/rootfs
    # What a container runtime would give the process: /dev and /proc, and loopback up.
    mount --bind /dev "$rootfs/dev"
    mount -t proc proc "$rootfs/proc"
    ip link set lo up
    user=$(cat "$work/user")
    mapfile -t env <"$work/env"
    mapfile -t entry <"$work/entrypoint"
    mapfile -t health <"$work/healthcheck"
    in_image() { env -i "${env[@]}" /usr/sbin/chroot --userspec="$user" "$rootfs" "$@"; }
    # env and chroot exec: $! is normd itself.
    env -i "${env[@]}" /usr/sbin/chroot --userspec="$user" "$rootfs" "${entry[@]}" \
        >"$work/normd.log" 2>&1 &
    pid=$!
    url=http://127.0.0.1:8000
    for _ in $(seq 300); do
        curl -fs -o /dev/null "$url/v2/health/ready" && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.2
    done
    cat "$work/normd.log"

    check "runs as the image's user ($user)" \
        test "$(stat -c %u:%g /proc/$pid)" = "$user"
    check "GET /v2/health/ready answers 200" \
        test "$(curl -s -o /dev/null -w '%{http_code}' $url/v2/health/ready)" = 200
    check "GET /v2/health/live answers 200" \
        test "$(curl -s -o /dev/null -w '%{http_code}' $url/v2/health/live)" = 200
    check "GET /healthz: ok on the cpu backend" \
        test "$(curl -s $url/healthz)" = '{"status":"ok","backend":"cpu"}'
    y=$(curl -s $url/v1/layernorm -H 'Content-Type: application/json' \
        -d '{"shape":[1,4],"data":[1,2,3,4]}')
    echo "     /v1/layernorm: $y"
    check "POST /v1/layernorm (JSON) normalizes" python3 -c '
import json, sys
y = json.loads(sys.argv[1])
ref = [-1.3416355, -0.4472118, 0.4472118, 1.3416355]
sys.exit(not (y["shape"] == [1, 4] and all(abs(a - b) < 1e-4 for a, b in zip(y["data"], ref))))' "$y"
    y=$(curl -s $url/v2/models/softmax/infer -H 'Content-Type: application/json' \
        -d '{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[0,0]}]}')
    echo "     /v2/models/softmax/infer: $y"
    check "POST /v2/models/softmax/infer (KServe v2)" python3 -c '
import json, sys
o = json.loads(sys.argv[1])["outputs"][0]
sys.exit(not (o["name"] == "y" and o["data"] == [0.5, 0.5]))' "$y"
    check "GET /metrics has normd_queue_depth" \
        sh -c "curl -s $url/metrics | grep -q '^normd_queue_depth'"
    # The image's HEALTHCHECK, as the runtime would run it (CMD-SHELL: through sh -c).
    if [ "${health[0]:-}" = CMD-SHELL ]; then
        check "HEALTHCHECK passes: ${health[1]}" in_image /bin/sh -c "${health[1]}"
    else
        check "HEALTHCHECK passes: ${health[*]:1}" in_image "${health[@]:1}"
    fi
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    check "SIGTERM: exits 0" test $rc = 0
    echo "$passed $failed" >"$work/serve.result"
    exit 0
fi

# ---------------------------------------------------------------- build, export, then serve
step() { echo "== $* ($((SECONDS - t0)) s)"; }

step "base image: mmdebstrap --variant=minbase bookworm"
if [ ! -s "$work/base.tar" ]; then
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$work/base.tar.tmp"
    mv "$work/base.tar.tmp" "$work/base.tar"
fi
podman import --quiet "$work/base.tar" "$base_tag" >/dev/null

step "podman build --isolation=chroot (CPU image)"
# --format docker keeps the HEALTHCHECK (OCI images have none); --layers=false leaves no
# intermediate images behind.
podman build --isolation=chroot --format docker --layers=false \
    --build-arg BASE="$base_tag" -t "$image" "$src" >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log"; exit 1; }

step "export the image's filesystem"
fmt() { podman image inspect "$image" --format "$1"; }
fmt '{{.Config.User}}' >"$work/user"
fmt '{{range .Config.Env}}{{println .}}{{end}}' | sed '/^$/d' >"$work/env"
fmt '{{range .Config.Entrypoint}}{{println .}}{{end}}{{range .Config.Cmd}}{{println .}}{{end}}' |
    sed '/^$/d' >"$work/entrypoint"
fmt '{{if .Config.Healthcheck}}{{range .Config.Healthcheck.Test}}{{println .}}{{end}}{{end}}' |
    sed '/^$/d' >"$work/healthcheck"
echo "     user $(cat "$work/user"), entrypoint $(tr '\n' ' ' <"$work/entrypoint")," \
     "size $(fmt '{{.Size}}') bytes"
check "the image has a non-root numeric user" grep -Eq '^[1-9][0-9]*(:[0-9]+)?$' "$work/user"
check "the image has a HEALTHCHECK" test -s "$work/healthcheck"
rm -rf "$work/rootfs"
mkdir -p "$work/rootfs"
cid=$(podman create --no-healthcheck "$image") # no systemd here for its timer
# -o, not a pipe: podman 4.3 was seen writing nothing to a non-terminal stdout (exit 0)
podman export -o "$work/rootfs.tar" "$cid"
[ -s "$work/rootfs.tar" ] || { echo "podman export wrote nothing" >&2; exit 1; }
tar -x -C "$work/rootfs" -f "$work/rootfs.tar"
rm -f "$work/rootfs.tar"
podman rm -f "$cid" >/dev/null

step "serve: the entrypoint under chroot, in a network namespace of its own"
rm -f "$work/serve.result"
unshare --net --mount "$0" "$work" --serve
read -r p f <"$work/serve.result"
passed=$((passed + p)) failed=$((failed + f))

podman rmi -f "$image" "$base_tag" >/dev/null 2>&1 || true
rm -rf "$work/rootfs"
step "done"
echo "image: $passed passed, $failed failed"
[ "$failed" = 0 ]
