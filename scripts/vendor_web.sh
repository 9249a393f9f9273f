#!/usr/bin/env bash
# Vendor the service's web assets from the npm registry into lib/dkmsks/service/static/ (the
# machines that run dkm serve have no internet, so /docs must not load them from a CDN).
#
#   scripts/vendor_web.sh          # fetch the pinned versions, copy the files, write MANIFEST.sha256
#   scripts/vendor_web.sh --check  # verify the vendored files against MANIFEST.sha256 (no network)
#
# The versions are pinned here; `npm pack` checks each tarball against the registry's integrity
# hash. The files are committed, so nothing is fetched at install or run time.
set -euo pipefail
cd "$(dirname "$0")/.."
static=lib/dkmsks/service/static
manifest=$static/MANIFEST.sha256
# package@version  then the files of it to keep (relative to the package root)
declare -A PACKAGES=(
  ["swagger-ui-dist@5.36.0"]="swagger-ui-bundle.js swagger-ui.css favicon-32x32.png LICENSE"
)
declare -A FOLDERS=(["swagger-ui-dist@5.36.0"]="swagger-ui")

if [ "${1:-}" = "--check" ]; then
  (cd "$static" && sha256sum --quiet -c MANIFEST.sha256)
  echo "vendor_web: every vendored file matches $manifest"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for spec in "${!PACKAGES[@]}"; do
  folder=$static/${FOLDERS[$spec]}
  (cd "$work" && npm pack --silent "$spec" > /dev/null)
  tarball=$(ls "$work"/*.tgz)
  mkdir -p "$work/unpacked" "$folder"
  tar -xzf "$tarball" -C "$work/unpacked"
  for file in ${PACKAGES[$spec]}; do
    cp "$work/unpacked/package/$file" "$folder/$file"
  done
  echo "$spec" > "$folder/VERSION"
  rm -rf "$work/unpacked" "$tarball"
done
(cd "$static" && find . -type f ! -name MANIFEST.sha256 | sort | xargs sha256sum > MANIFEST.sha256)
echo "vendor_web: wrote $static and $manifest"
