#!/usr/bin/env bash
# The base images of docker-compose.yml, made from Debian's packages only (no image registry):
#
#   dkmsks-debian:bookworm    debootstrap --variant=minbase, imported with `docker import`
#   dkmsks-base:bookworm      + python3.11 (venv, pip), openjdk-17-jre-headless, procps, ...  (docker/base/Dockerfile)
#   dkmsks-postgres:15        + postgresql-15 and an entrypoint that initialises the cluster   (docker/postgres/)
#   dkmsks-objectstore:VER    + curl, tini and the Versity S3 Gateway at the version scripts/objectstore.sh
#                             pins, a static binary built on this host with Go (docker/objectstore/)
#
#   docker/build-base.sh            # builds the images that do not exist yet; a no-op afterwards
#   docker rmi dkmsks-base:bookworm && docker/build-base.sh    # rebuild one of them
#
# Needs root (debootstrap), a running Docker daemon and a reachable Debian mirror:
# DKMSKS_DEBIAN_MIRROR (default http://deb.debian.org/debian) and DKMSKS_DEBIAN_SECURITY
# (default http://deb.debian.org/debian-security); for the object store's image, Go and its module
# proxy (`scripts/objectstore.sh install`, ~3 min once). The project's own image (Dockerfile) is
# built FROM dkmsks-base:bookworm by `docker-compose build`.
set -euo pipefail
cd "$(dirname "$0")"

suite=bookworm
mirror=${DKMSKS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DKMSKS_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
debian_image=dkmsks-debian:$suite

exists() { docker image inspect "$1" >/dev/null 2>&1; }

if exists "$debian_image"; then
  echo "build-base: $debian_image exists"
else
  command -v debootstrap >/dev/null || { echo "build-base: debootstrap not found (apt-get install debootstrap)" >&2; exit 1; }
  rootfs=$(mktemp -d /var/tmp/dkmsks-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  echo "build-base: debootstrap $suite from $mirror into $rootfs"
  started=$SECONDS
  debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" > "$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; exit 1; }
  rm -f "$rootfs.log"
  # The point releases and the security archive too: debootstrap writes only the suite itself.
  rm -f "$rootfs/etc/apt/sources.list"
  cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Container conventions: no recommended packages, no service starts while installing (a
  # package's postinst must not launch a daemon during `docker build`), no package caches.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    > "$rootfs/etc/apt/apt.conf.d/90container"
  printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"
  chmod 755 "$rootfs/usr/sbin/policy-rc.d"
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log \
         "$rootfs"/var/log/apt/* "$rootfs"/tmp/* "$rootfs"/root/.bash_history
  # debootstrap unmounts /proc and /sys of the target when it ends; never archive a live mount.
  if grep -q " $rootfs/" /proc/mounts; then echo "build-base: $rootfs still has mounts" >&2; exit 1; fi
  tar -C "$rootfs" --numeric-owner -c . \
    | docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - "$debian_image" >/dev/null
  echo "build-base: $debian_image imported in $((SECONDS - started)) s"
  rm -rf "$rootfs"
  trap - EXIT
fi

build() {  # build IMAGE FOLDER: docker build unless the image exists
  if exists "$1"; then
    echo "build-base: $1 exists"
    return
  fi
  echo "build-base: building $1 from docker/$2"
  local started=$SECONDS
  docker build --build-arg "DEBIAN_IMAGE=$debian_image" -t "$1" "$2"
  echo "build-base: $1 built in $((SECONDS - started)) s"
}

build dkmsks-base:$suite base
build dkmsks-postgres:15 postgres

# The object store: its context is docker/objectstore/ plus the gateway's binary, in a folder of
# its own (the binary is never written into the checkout).
versitygw_version=$(sed -n 's/^VERSITYGW_VERSION=//p' ../scripts/objectstore.sh)
objectstore_image=dkmsks-objectstore:$versitygw_version
if exists "$objectstore_image"; then
  echo "build-base: $objectstore_image exists"
else
  bin=$(../scripts/objectstore.sh install | tail -n 1)
  if ldd "$bin" > /dev/null 2>&1; then  # built before the script made static binaries
    echo "build-base: $bin is linked dynamically; building a static one"
    rm -f "$bin"
    bin=$(../scripts/objectstore.sh install | tail -n 1)
  fi
  context=$(mktemp -d)
  trap 'rm -rf "$context"' EXIT
  cp objectstore/Dockerfile objectstore/entrypoint.sh objectstore/.dockerignore "$context/"
  cp "$bin" "$context/versitygw"
  echo "build-base: building $objectstore_image from docker/objectstore"
  started=$SECONDS
  docker build --build-arg "DEBIAN_IMAGE=$debian_image" -t "$objectstore_image" "$context"
  echo "build-base: $objectstore_image built in $((SECONDS - started)) s"
  rm -rf "$context"
  trap - EXIT
fi
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E '^dkmsks-(debian|base|postgres|objectstore):' || true
