#!/usr/bin/env bash
# Fetches and unpacks rdma-core's source as Debian trixie ships it (56.1 when this was
# written) into a scratch folder, and prints the path of the unpacked tree.
#
#   tests/parity/fetch-rdma-core.sh [SCRATCH]     (default: target/parity)
#
# Nothing of rdma-core enters the repository: the tarball and its tree live in SCRATCH.
# This machine's apt sources are bookworm's, whose rdma-core 44 tarball is no longer served;
# trixie's is, so a private apt configuration (its own sources list, lists and cache under
# SCRATCH) reads trixie's signed source index, and the tarball is checked against the SHA-256
# that index gives. Needs root or a writable SCRATCH, and Debian's archive keyring.
set -euo pipefail
cd "$(dirname "$0")/../.."
SCRATCH=$(realpath -m "${1:-target/parity}")
for tree in "$SCRATCH"/rdma-core-*/; do
  if [[ -f "$tree/providers/mlx5/qp.c" ]]; then
    echo "${tree%/}"
    exit 0
  fi
done
APT="$SCRATCH/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  > "$APT/sources.list"
opts=(-o "Dir::Etc::sourcelist=$APT/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "APT::Get::List-Cleanup=0"
  -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" -qq update >&2
index=$(ls "$APT"/lists/*_source_Sources*)
/usr/lib/apt/apt-helper cat-file "$index" > "$APT/Sources"
read -r want orig < <(awk '/^Package: rdma-core$/{p=1} p&&/^$/{exit} p' "$APT/Sources" |
  awk '/^Checksums-Sha256:/{s=1;next} /^[^ ]/{s=0} s&&$3~/^rdma-core_.*\.orig\.tar\.gz$/{print $1, $3}') || true
if [[ -z "${want:-}" ]]; then
  echo "fetch-rdma-core: trixie's source index lists no rdma-core orig tarball" >&2
  exit 1
fi
VERSION=${orig#rdma-core_}
VERSION=${VERSION%.orig.tar.gz}
# The .dsc is not served (404) while the tarballs are, so apt-get exits non-zero here;
# what counts is the tarball and its checksum, checked below.
(cd "$APT/src" && apt-get "${opts[@]}" -qq source --download-only rdma-core >/dev/null 2>&1) || true
tarball="$APT/src/rdma-core_$VERSION.orig.tar.gz"
if [[ ! -f "$tarball" ]]; then
  echo "fetch-rdma-core: could not download rdma-core_$VERSION.orig.tar.gz" >&2
  exit 1
fi
got=$(sha256sum "$tarball" | cut -d' ' -f1)
if [[ "$got" != "$want" ]]; then
  echo "fetch-rdma-core: $tarball has SHA-256 $got, the signed index says $want" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$SCRATCH"
echo "$SCRATCH/rdma-core-$VERSION"
