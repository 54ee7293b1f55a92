#!/bin/sh
# test-images.sh - offline test images and local registries for Gantry's tests (Debian 12, root).
#
#   scripts/test-images.sh         build what is missing, start the registries and PostgreSQL if
#                                  they are down, push the images, write $GANTRY_TEST_DIR/env
#   scripts/test-images.sh stop    stop the registries and PostgreSQL this script started (by pid)
#
# Idempotent and safe to run concurrently (it holds a lock). Nothing here needs a public
# registry: images are made from busybox-static, reproducibly (fixed mtimes, gzip -n), so their
# digests are the same on every machine.
#
# Environment: GANTRY_TEST_DIR (default /tmp/gantry-test), GANTRY_TEST_REGISTRY_PORT (5055),
# GANTRY_TEST_AUTH_REGISTRY_PORT (5056, a registry with htpasswd basic auth),
# GANTRY_TEST_PG_PORT (5057, PostgreSQL for the store's second backend: trust on loopback).
#
# Produces, under $GANTRY_TEST_DIR:
#   images/busybox        OCI layout, one gzip layer, ref name "1"
#   images/busybox-zstd   the same rootfs as one zstd layer, ref name "1"
#   images/whiteout       FROM busybox + a layer of test files + a layer that deletes one file
#                         (.wh.gone) and empties a directory (.wh..wh..opq), ref name "1"
#   images/multi          an image index: linux/arm64 (listed first) and busybox as linux/amd64
#   registry/, registry-auth/   config, data, pid and log of each registry
#   pg/                   PostgreSQL's data directory, pid and log (owned by user postgres)
#   env                   KEY=VALUE lines for the tests (see the end of this file)
# Pushed: 127.0.0.1:$PORT/library/busybox:1, library/busybox:1-zstd, library/whiteout:1,
#         library/multi:1;
#         127.0.0.1:$AUTH_PORT/private/busybox:1 (user gantry).
set -eu

DIR=${GANTRY_TEST_DIR:-/tmp/gantry-test}
PORT=${GANTRY_TEST_REGISTRY_PORT:-5055}
AUTH_PORT=${GANTRY_TEST_AUTH_REGISTRY_PORT:-5056}
AUTH_USER=gantry
AUTH_PASSWORD=gantry-test-password
PG_PORT=${GANTRY_TEST_PG_PORT:-5057}
# Debian's server binaries, not on PATH: the newest installed major version.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
IMAGES_VERSION=2 # bump when the images below change, so old builds are redone
export SOURCE_DATE_EPOCH=1700000000
mkdir -p "$DIR"

stop_one() { # NAME
  pidfile=$DIR/$1/registry.pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q docker-registry; then
    kill "$pid" && echo "stopped $1 (pid $pid)"
  fi
  rm -f "$pidfile"
}

stop_pg() {
  pidfile=$DIR/pg/postgres.pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "postgres.*$DIR/pg/data"; then
    # A fast shutdown (clients are disconnected, nothing is lost); pg_ctl returns once the
    # server is down, so a start right after this one starts a new server.
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$DIR/pg/data" -m fast -w -t 60 stop > /dev/null &&
      echo "stopped pg (pid $pid)"
  fi
  rm -f "$pidfile"
}

if [ "${1:-}" = stop ]; then
  stop_one registry
  stop_one registry-auth
  stop_pg
  exit 0
fi

# One run at a time: tests in several binaries may call this at once.
exec 9>"$DIR/.setup.lock"
flock 9

# --- packages ------------------------------------------------------------------------------
MISSING=
need() { command -v "$1" >/dev/null 2>&1 || MISSING="$MISSING $2"; }
need skopeo skopeo; need docker-registry docker-registry; need jq jq; need busybox busybox-static
need zstd zstd; need htpasswd apache2-utils; need curl curl; need runc runc; need flock util-linux
[ -x /usr/bin/tini-static ] || MISSING="$MISSING tini"
[ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || MISSING="$MISSING postgresql"
if [ -n "$MISSING" ]; then
  echo "installing:$MISSING"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $MISSING ||
    { apt-get -o DPkg::Lock::Timeout=600 update &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $MISSING; }
fi

# --- image building ------------------------------------------------------------------------
# A deterministic layer tar of a directory. Ownership comes from the tree itself (the tests
# check that it is kept), so the trees are chowned explicitly.
mk_tar() { # DIR OUT
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --numeric-owner \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -C "$1" -cf "$2" .
}

# An OCI layout with one image made of the given layer tars (bottom first).
mk_image() { # OCI_DIR TAG gzip|zstd TAR...
  oci=$1 tag=$2 comp=$3; shift 3
  rm -rf "$oci"; mkdir -p "$oci/blobs/sha256"
  layers='[]' diffids='[]' history='[]'
  created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  for t in "$@"; do
    diffid=$(sha256sum "$t" | cut -d' ' -f1)
    case $comp in
      gzip) gzip -n -6 -c "$t" > "$oci/layer.tmp"; mt=application/vnd.oci.image.layer.v1.tar+gzip ;;
      zstd) zstd -q -19 --no-progress -c "$t" > "$oci/layer.tmp"; mt=application/vnd.oci.image.layer.v1.tar+zstd ;;
    esac
    d=$(sha256sum "$oci/layer.tmp" | cut -d' ' -f1); s=$(stat -c %s "$oci/layer.tmp")
    mv "$oci/layer.tmp" "$oci/blobs/sha256/$d"
    layers=$(echo "$layers" | jq -c --arg mt "$mt" --arg d "sha256:$d" --argjson s "$s" '. + [{mediaType:$mt,digest:$d,size:$s}]')
    diffids=$(echo "$diffids" | jq -c --arg d "sha256:$diffid" '. + [$d]')
    history=$(echo "$history" | jq -c --arg c "$created" --arg by "$(basename "$t")" '. + [{created:$c,created_by:$by}]')
  done
  jq -cnj --arg c "$created" --argjson ids "$diffids" --argjson h "$history" '{created:$c,architecture:"amd64",os:"linux",
     config:{Env:["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],Cmd:["/bin/sh"]},
     rootfs:{type:"layers",diff_ids:$ids},history:$h}' > "$oci/config.tmp"
  cd_=$(sha256sum "$oci/config.tmp" | cut -d' ' -f1); cs=$(stat -c %s "$oci/config.tmp")
  mv "$oci/config.tmp" "$oci/blobs/sha256/$cd_"
  jq -cnj --arg c "sha256:$cd_" --argjson cs "$cs" --argjson l "$layers" '{schemaVersion:2,
     mediaType:"application/vnd.oci.image.manifest.v1+json",
     config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$c,size:$cs},layers:$l}' > "$oci/m.tmp"
  md=$(sha256sum "$oci/m.tmp" | cut -d' ' -f1); ms=$(stat -c %s "$oci/m.tmp")
  mv "$oci/m.tmp" "$oci/blobs/sha256/$md"
  jq -cn --arg m "sha256:$md" --argjson ms "$ms" --arg t "$tag" '{schemaVersion:2,manifests:[{
     mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$m,size:$ms,
     annotations:{"org.opencontainers.image.ref.name":$t}}]}' > "$oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$oci/oci-layout"
}

manifest_digest() { jq -r '.manifests[0].digest' "$1/index.json"; }

# A multi-platform image: an index listing an arm64 variant first and then the amd64 image of
# SRC (the arm64 one reuses the same layer: only its config says arm64; it is never run).
mk_multi() { # OCI_DIR SRC_LAYOUT TAG
  oci=$1 src=$2 tag=$3
  rm -rf "$oci"; mkdir -p "$oci"; cp -r "$src/blobs" "$oci/"
  amd=$(manifest_digest "$src"); amd_hex=${amd#sha256:}
  cfg=$(jq -r .config.digest "$oci/blobs/sha256/$amd_hex"); cfg_hex=${cfg#sha256:}
  jq -cj '.architecture = "arm64" | .variant = "v8"' "$oci/blobs/sha256/$cfg_hex" > "$oci/c.tmp"
  c2=$(sha256sum "$oci/c.tmp" | cut -d' ' -f1); c2s=$(stat -c %s "$oci/c.tmp"); mv "$oci/c.tmp" "$oci/blobs/sha256/$c2"
  jq -cj --arg c "sha256:$c2" --argjson s "$c2s" '.config.digest = $c | .config.size = $s' \
    "$oci/blobs/sha256/$amd_hex" > "$oci/m.tmp"
  arm=$(sha256sum "$oci/m.tmp" | cut -d' ' -f1); arms=$(stat -c %s "$oci/m.tmp"); mv "$oci/m.tmp" "$oci/blobs/sha256/$arm"
  amds=$(stat -c %s "$oci/blobs/sha256/$amd_hex")
  jq -cnj --arg a "sha256:$arm" --argjson asz "$arms" --arg b "$amd" --argjson bsz "$amds" '{schemaVersion:2,
     mediaType:"application/vnd.oci.image.index.v1+json",manifests:[
     {mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$a,size:$asz,platform:{architecture:"arm64",os:"linux",variant:"v8"}},
     {mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$b,size:$bsz,platform:{architecture:"amd64",os:"linux"}}]}' > "$oci/i.tmp"
  idx=$(sha256sum "$oci/i.tmp" | cut -d' ' -f1); idxs=$(stat -c %s "$oci/i.tmp"); mv "$oci/i.tmp" "$oci/blobs/sha256/$idx"
  jq -cn --arg i "sha256:$idx" --argjson s "$idxs" --arg t "$tag" '{schemaVersion:2,manifests:[{
     mediaType:"application/vnd.oci.image.index.v1+json",digest:$i,size:$s,
     annotations:{"org.opencontainers.image.ref.name":$t}}]}' > "$oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$oci/oci-layout"
}

IMG=$DIR/images
if [ ! -f "$IMG/.done-v$IMAGES_VERSION" ]; then
  rm -rf "$IMG"; mkdir -p "$IMG/build"; B=$IMG/build

  # busybox-static rootfs, as in shared/reference/scripts/make-base-images.sh
  mkdir -p "$B/busybox"
  ( cd "$B/busybox"
    mkdir -p bin sbin usr/bin usr/sbin etc tmp proc sys dev root var run; chmod 1777 tmp
    cp "$(command -v busybox)" bin/busybox
    for a in $(bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > etc/passwd
    printf 'root:x:0:\nnogroup:x:65534:\n' > etc/group )
  chown -R 0:0 "$B/busybox"
  mk_tar "$B/busybox" "$B/busybox.tar"

  # Test files: plain, to-be-deleted, a directory to be made opaque, a hard link, a symlink,
  # and modes/owners that must survive unpacking.
  mkdir -p "$B/files/data/opq"
  ( cd "$B/files/data"
    echo keep > keep; echo gone > gone; echo old > opq/old1; echo old > opq/old2
    ln keep hard; ln -s keep link
    echo owned > owned; chown 1000:1000 owned; chmod 0640 owned
    echo suid > suid; chmod 4755 suid )
  mk_tar "$B/files" "$B/files.tar"

  # The deletions, as OCI expresses them.
  mkdir -p "$B/deletes/data/opq"
  ( cd "$B/deletes/data"
    : > .wh.gone; : > opq/.wh..wh..opq; echo new > opq/new )
  mk_tar "$B/deletes" "$B/deletes.tar"

  mk_image "$IMG/busybox" 1 gzip "$B/busybox.tar"
  mk_image "$IMG/busybox-zstd" 1 zstd "$B/busybox.tar"
  mk_image "$IMG/whiteout" 1 gzip "$B/busybox.tar" "$B/files.tar" "$B/deletes.tar"
  mk_multi "$IMG/multi" "$IMG/busybox" 1
  rm -rf "$B"
  touch "$IMG/.done-v$IMAGES_VERSION"
  echo "built images in $IMG"
fi

# --- registries (CNCF distribution from Debian's docker-registry; no systemd) ----------------
start_registry() { # NAME PORT EXPECTED_HTTP_CODE [AUTH_YAML]
  name=$1 port=$2 code=$3 auth=${4:-}
  R=$DIR/$name; mkdir -p "$R/data"
  up=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" || true)
  if [ "$up" = "$code" ]; then return 0; fi
  if [ "$up" != 000 ]; then
    echo "port $port answers $up, not a registry of ours: set GANTRY_TEST_*REGISTRY_PORT" >&2
    exit 1
  fi
  cat > "$R/config.yml" <<YML
version: 0.1
log: {level: warn, fields: {service: $name}}
storage:
  cache: {blobdescriptor: inmemory}
  filesystem: {rootdirectory: $R/data}
http:
  addr: 127.0.0.1:$port
$auth
YML
  # Own session, stdio off the caller's pipes: the registry outlives this script and must
  # not keep a test runner waiting on its output.
  # The lock's fd is closed for it too, or the lock would live as long as the registry.
  setsid /usr/bin/docker-registry serve "$R/config.yml" > "$R/registry.log" 2>&1 < /dev/null 9>&- &
  echo $! > "$R/registry.pid"
  i=0
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" || true)" = "$code" ]; do
    i=$((i + 1))
    if [ $i -gt 100 ]; then echo "$name did not come up; see $R/registry.log" >&2; exit 1; fi
    sleep 0.1
  done
  echo "$name started on 127.0.0.1:$port (pid $(cat "$R/registry.pid"))"
}

HT=$DIR/registry-auth/htpasswd
mkdir -p "$DIR/registry-auth"
if ! [ -s "$HT" ] || ! htpasswd -vb "$HT" "$AUTH_USER" "$AUTH_PASSWORD" >/dev/null 2>&1; then
  htpasswd -Bbc "$HT" "$AUTH_USER" "$AUTH_PASSWORD" 2>/dev/null
fi
start_registry registry "$PORT" 200
start_registry registry-auth "$AUTH_PORT" 401 "auth:
  htpasswd: {realm: gantry-test, path: $HT}"

# --- PostgreSQL (Debian's server, no systemd): the store's second backend ----------------------
# initdb and the server refuse to run as root, so both run as Debian's `postgres` user, which
# owns $DIR/pg; $DIR must be traversable by it. Trust authentication, on loopback only.
[ -n "$PG_BIN" ] || PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
PG_URL=postgres://postgres@127.0.0.1:$PG_PORT/postgres
pg_ok() { "$PG_BIN/psql" "$PG_URL" -Atqc 'SELECT 1' >/dev/null 2>&1; }
start_pg() {
  P=$DIR/pg
  if pg_ok; then return 0; fi
  if "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
    echo "port $PG_PORT answers, but not as a PostgreSQL of ours: set GANTRY_TEST_PG_PORT" >&2
    exit 1
  fi
  mkdir -p "$P"; chown postgres: "$P"; chmod 700 "$P"
  if ! runuser -u postgres -- test -x "$P"; then
    echo "user postgres cannot reach $P: set GANTRY_TEST_DIR to a directory it can traverse" >&2
    exit 1
  fi
  if [ ! -f "$P/data/PG_VERSION" ]; then
    rm -rf "$P/data"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$P/data" -U postgres -E UTF8 --locale=C.UTF-8 \
      --auth-local=trust --auth-host=trust > "$P/initdb.log" 2>&1 ||
      { echo "initdb failed; see $P/initdb.log" >&2; exit 1; }
  fi
  # Own session and stdio, and the lock's fd closed, as for the registries: the server outlives
  # this script. fsync off: a test database need not survive a power loss, and every test
  # commits often on a small machine.
  setsid runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$P/data" -l "$P/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$P -c fsync=off -c max_connections=200" \
    start > /dev/null 2>&1 < /dev/null 9>&- ||
    { echo "PostgreSQL did not start; see $P/postgres.log" >&2; exit 1; }
  head -n 1 "$P/data/postmaster.pid" > "$P/postgres.pid"
  pg_ok || { echo "PostgreSQL started but refuses $PG_URL; see $P/postgres.log" >&2; exit 1; }
  echo "pg started on 127.0.0.1:$PG_PORT (pid $(cat "$P/postgres.pid"))"
}
start_pg

# Pushes unless the registry already has exactly this manifest under that tag.
push() { # LAYOUT DEST_REGISTRY REPO:TAG [CREDS]
  want=$(manifest_digest "$1"); repo=${3%:*}; tag=${3##*:}; creds=${4:-}
  have=$(curl -sI ${creds:+-u "$creds"} \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json' \
    "http://$2/v2/$repo/manifests/$tag" | tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}')
  [ "$have" = "$want" ] && return 0
  skopeo copy -q --all --dest-tls-verify=false ${creds:+--dest-creds "$creds"} "oci:$1:1" "docker://$2/$3"
  echo "pushed $2/$3 ($want)"
}
REG=127.0.0.1:$PORT
AUTH_REG=127.0.0.1:$AUTH_PORT
push "$IMG/busybox" "$REG" library/busybox:1
push "$IMG/busybox-zstd" "$REG" library/busybox:1-zstd
push "$IMG/whiteout" "$REG" library/whiteout:1
push "$IMG/multi" "$REG" library/multi:1
push "$IMG/busybox" "$AUTH_REG" private/busybox:1 "$AUTH_USER:$AUTH_PASSWORD"

cat > "$DIR/env.tmp" <<ENV
GANTRY_TEST_DIR=$DIR
GANTRY_TEST_REGISTRY=$REG
GANTRY_TEST_AUTH_REGISTRY=$AUTH_REG
GANTRY_TEST_AUTH_USER=$AUTH_USER
GANTRY_TEST_AUTH_PASSWORD=$AUTH_PASSWORD
GANTRY_TEST_OCI_BUSYBOX=$IMG/busybox
GANTRY_TEST_OCI_BUSYBOX_ZSTD=$IMG/busybox-zstd
GANTRY_TEST_OCI_WHITEOUT=$IMG/whiteout
GANTRY_TEST_OCI_MULTI=$IMG/multi
GANTRY_TEST_BUSYBOX_DIGEST=$(manifest_digest "$IMG/busybox")
GANTRY_TEST_INIT=/usr/bin/tini-static
GANTRY_TEST_PG=$PG_URL
ENV
mv "$DIR/env.tmp" "$DIR/env"
echo "test environment ready: $DIR/env"
