#!/usr/bin/env bash
# Vendor the service's web assets from the npm registry into lib/dkmsks/service/static/ (the
# machines that run dkm serve have no internet, so /docs and /map must not load them from a CDN):
# Swagger UI for /docs; Leaflet, topojson-client and the outlines of world-atlas (Natural Earth)
# and us-atlas (US Census) for the live map. Every package's LICENSE is kept beside its files.
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
  ["leaflet@1.9.4"]="dist/leaflet.js dist/leaflet.css dist/images/layers.png dist/images/layers-2x.png
                     dist/images/marker-icon.png dist/images/marker-icon-2x.png dist/images/marker-shadow.png LICENSE"
  ["topojson-client@3.1.0"]="dist/topojson-client.min.js LICENSE"
  ["world-atlas@2.0.2"]="countries-50m.json LICENSE"
  ["us-atlas@3.0.1"]="states-10m.json LICENSE"
)
declare -A FOLDERS=(["swagger-ui-dist@5.36.0"]="swagger-ui" ["leaflet@1.9.4"]="leaflet"
                    ["topojson-client@3.1.0"]="topojson-client" ["world-atlas@2.0.2"]="world-atlas"
                    ["us-atlas@3.0.1"]="us-atlas")

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
    mkdir -p "$(dirname "$folder/$file")"
    cp "$work/unpacked/package/$file" "$folder/$file"
  done
  echo "$spec" > "$folder/VERSION"
  rm -rf "$work/unpacked" "$tarball"
done
(cd "$static" && find . -type f ! -name MANIFEST.sha256 | sort | xargs sha256sum > MANIFEST.sha256)
echo "vendor_web: wrote $static and $manifest"
