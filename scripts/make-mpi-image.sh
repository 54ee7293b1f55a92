#!/bin/sh
# make-mpi-image.sh - the multinode tests' MPI image (Debian 12, root), built offline from
# Debian's mirror: `mmdebstrap --variant=minbase bookworm` with openmpi-bin, mpich and
# python3-mpi4py (no recommends, no docs), plus scripts/mpi/allreduce.c compiled here against
# each MPI (/usr/local/bin/allreduce-openmpi and allreduce-mpich; install-deps.sh installs
# libopenmpi-dev and libmpich-dev). Packaged as a one-layer OCI layout and pushed to the tests'
# registry.
#
#   scripts/make-mpi-image.sh REGISTRY     prints the pushed reference, REGISTRY/library/mpi:TAG
#
# TAG is the hash of this script and the program, so the image is built once per change (the
# layout is kept under $GANTRY_TEST_DIR/images/mpi-TAG) and pushed only when the registry
# lacks it. Holds its own lock: concurrent test binaries build it once.
set -eu
REG=$1
DIR=${GANTRY_TEST_DIR:-/tmp/gantry-test}
HERE=$(cd "$(dirname "$0")" && pwd)
TAG=$(cat "$0" "$HERE/mpi/allreduce.c" | sha256sum | cut -c1-16)
OCI=$DIR/images/mpi-$TAG
export SOURCE_DATE_EPOCH=1700000000
mkdir -p "$DIR/images"
exec 9>"$DIR/.mpi-image.lock"
flock 9

if [ ! -f "$OCI/.done" ]; then
  for c in mmdebstrap mpicc.openmpi mpicc.mpich jq skopeo; do
    command -v "$c" >/dev/null || { echo "make-mpi-image: $c is missing (scripts/install-deps.sh)" >&2; exit 1; }
  done
  B=$DIR/images/mpi-build.$$
  rm -rf "$B" "$OCI"; mkdir -p "$B/bin"
  trap 'rm -rf "$B"' EXIT
  mpicc.openmpi -O2 -o "$B/bin/allreduce-openmpi" "$HERE/mpi/allreduce.c"
  mpicc.mpich -O2 -o "$B/bin/allreduce-mpich" "$HERE/mpi/allreduce.c"
  mmdebstrap --quiet --variant=minbase --mode=root \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --include=openmpi-bin,mpich,python3-mpi4py \
    --customize-hook="copy-in $B/bin/allreduce-openmpi $B/bin/allreduce-mpich /usr/local/bin/" \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
    bookworm "$B/rootfs.tar"
  mkdir -p "$OCI/blobs/sha256"
  diffid=$(sha256sum "$B/rootfs.tar" | cut -d' ' -f1)
  gzip -n -6 -c "$B/rootfs.tar" > "$B/layer"
  ld=$(sha256sum "$B/layer" | cut -d' ' -f1); ls_=$(stat -c %s "$B/layer")
  mv "$B/layer" "$OCI/blobs/sha256/$ld"
  jq -cnj --arg d "sha256:$diffid" '{architecture:"amd64",os:"linux",
     config:{Env:["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],Cmd:["/bin/sh"]},
     rootfs:{type:"layers",diff_ids:[$d]}}' > "$B/config"
  cd_=$(sha256sum "$B/config" | cut -d' ' -f1); cs=$(stat -c %s "$B/config")
  mv "$B/config" "$OCI/blobs/sha256/$cd_"
  jq -cnj --arg c "sha256:$cd_" --argjson cs "$cs" --arg l "sha256:$ld" --argjson ls "$ls_" '{schemaVersion:2,
     mediaType:"application/vnd.oci.image.manifest.v1+json",
     config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$c,size:$cs},
     layers:[{mediaType:"application/vnd.oci.image.layer.v1.tar+gzip",digest:$l,size:$ls}]}' > "$B/manifest"
  md=$(sha256sum "$B/manifest" | cut -d' ' -f1); ms=$(stat -c %s "$B/manifest")
  mv "$B/manifest" "$OCI/blobs/sha256/$md"
  jq -cn --arg m "sha256:$md" --argjson ms "$ms" --arg t "$TAG" '{schemaVersion:2,manifests:[{
     mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$m,size:$ms,
     annotations:{"org.opencontainers.image.ref.name":$t}}]}' > "$OCI/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$OCI/oci-layout"
  touch "$OCI/.done"
  echo "make-mpi-image: built $OCI ($(du -sh "$OCI" | cut -f1))" >&2
fi
want=$(jq -r '.manifests[0].digest' "$OCI/index.json")
have=$(curl -sI -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://$REG/v2/library/mpi/manifests/$TAG" | tr -d '\r' |
  awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}')
[ "$have" = "$want" ] || skopeo copy -q --dest-tls-verify=false "oci:$OCI:$TAG" "docker://$REG/library/mpi:$TAG" >&2
echo "$REG/library/mpi:$TAG"
