#!/usr/bin/env bash
# Installs what framepack needs on a Debian machine, in two parts.
#
# ./scripts/setup.sh          what a video needs:
#   ffmpeg           MP4 output (libx264), as FramePack writes it
#   libopenblas0     the CPU backend's GEMM, loaded at run time
#   Go               when it is missing (the go.mod toolchain line fetches the exact version)
#
# ./scripts/setup.sh --tests  that, and what the tests need on top:
#   clang-19, lld-19 offline compile check of the GPU kernels for gfx1100/gfx1151
#   clang-tools-19   clang-offload-bundler, which clang-19 runs for every
#                    --offload-arch build (only a Recommends of clang-19)
#   libamdhip64-5    the HIP runtime, so the tests check our AMD symbol table against it
#   curl, xz-utils   fetch the ROCm libraries whose symbols the tests check (below)
#   chromium         the browser test of framepack serve's page (headless, through chromedp)
#   nats-server      the farm's cluster tests, built from the module go.mod pins
#   librccl1 (Debian trixie's RCCL) and libhipblaslt1, librocblas4 and
#   libmiopen1 (unstable's), unpacked under ~/.cache/framepack so the tests
#   check our symbol tables against them (bookworm has none of them, and their
#   packages do not install on bookworm). Nothing framepack runs uses them.
#
# Each part prints what it fetches and how big it is; what is there already
# is skipped.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

tests=0
case "${1:-}" in
"") ;;
--tests) tests=1 ;;
*)
	echo "usage: $0 [--tests]" >&2
	exit 2
	;;
esac

say() { echo "setup: $*" >&2; }

pkgs="ffmpeg libopenblas0 ca-certificates"
[ "$tests" = 0 ] || pkgs="$pkgs clang-19 clang-tools-19 lld-19 libamdhip64-5 curl xz-utils chromium"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
have_go=1
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || { have_go=0; missing="$missing golang-go"; }
if [ -n "$missing" ]; then
	say "installing with apt:$missing"
	$sudo apt-get update -qq
	# Only apt's totals are shown; a failed install is caught below.
	$sudo apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends $missing |
		grep -E '^(Need to get|After this operation)' >&2 || true
	for p in $missing; do
		[ "$p" = golang-go ] && continue
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			{ say "apt did not install $p"; exit 1; }
	done
fi

# Debian's Go is older than go.mod asks for: fetch the exact toolchain as a
# module through the configured module proxy and install it to /usr/local/go.
if [ "$have_go" = 0 ]; then
	want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(dirname "$0")/../go.mod")
	say "fetching Go $want (about 75 MB) through the Go module proxy"
	tmp=$(mktemp -d)
	(cd "$tmp" && GOPATH="$tmp/gopath" GOFLAGS=-modcacherw go mod download "golang.org/toolchain@v0.0.1-go${want}.linux-amd64")
	$sudo rm -rf /usr/local/go
	$sudo cp -r "$tmp/gopath/pkg/mod/golang.org/toolchain@v0.0.1-go${want}.linux-amd64" /usr/local/go
	$sudo chmod -R u+w,a+rX /usr/local/go
	$sudo chmod a+x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
	rm -rf "$tmp"
	# On PATH for the command that follows this script on the same line.
	$sudo ln -sf /usr/local/go/bin/go /usr/local/go/bin/gofmt /usr/local/bin/
fi

[ "$tests" = 1 ] || exit 0

# nats-server for the farm's cluster tests (three server processes on
# loopback), built from the nats-server module go.mod pins: the version the
# embedded server runs.
if ! command -v nats-server >/dev/null; then
	ver=$(sed -n 's|^\s*github.com/nats-io/nats-server/v2 \(v[0-9.]*\).*|\1|p' "$(dirname "$0")/../go.mod")
	say "building nats-server $ver from its Go module (about 15 MB of sources) for the cluster tests"
	tmp=$(mktemp -d)
	(cd "$(dirname "$0")/.." && go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2)
	$sudo install -m 755 "$tmp/nats-server" /usr/local/bin/nats-server
	rm -rf "$tmp"
fi

# Vendor libraries the tests check our symbol tables against, from Debian
# packages this Debian cannot install: the package's file is checked against
# the hash Debian's index gives, then unpacked (not installed) into the cache,
# where the symbol tests find the library. Done once per machine.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/framepack"
# unpack_deb DIR POOLPATH SHA256 SIZE LIB: unpacks the package's LIB (the file
# and its soname links, nothing else) into DIR unless DIR/LIB is there.
unpack_deb() {
	local dir=$1 pool=$2 sha=$3 size=$4 lib=$5 tmp
	[ -e "$dir/$lib" ] && return 0
	say "fetching ${pool##*/} ($((size / 1000000)) MB) for the symbol tests"
	tmp=$(mktemp -d)
	curl -fsSL --retry 3 -o "$tmp/pkg.deb" "https://deb.debian.org/debian/$pool"
	echo "$sha  $tmp/pkg.deb" | sha256sum -c --quiet
	rm -rf "$dir.partial"
	mkdir -p "$dir.partial"
	dpkg-deb --fsys-tarfile "$tmp/pkg.deb" | tar -x -C "$dir.partial" --wildcards "./${lib%.so*}.so*"
	rm -rf "$dir" "$tmp"
	mv "$dir.partial" "$dir"
}
# RCCL (ROCm's NCCL): trixie's librccl1, pinned.
unpack_deb "$cache/librccl1" pool/main/r/rccl/librccl1_5.4.3-3+b1_amd64.deb \
	735e8e0a69f88489bdbd0a8b69bc75a376da92f1129b9ed80a38c99726bfe3a7 125393528 usr/lib/x86_64-linux-gnu/librccl.so.1
# rocBLAS, MIOpen and hipBLASLt as ROCm 6 and 7 ship them: Debian unstable's,
# whose versions move, so each is read from unstable's package index.
sid_index=""
# unpack_sid PACKAGE LIB: unpacks unstable's PACKAGE into the cache unless
# its LIB is there.
unpack_sid() {
	local pkg=$1 lib=$2 entry pool sha size
	[ -e "$cache/$pkg/$lib" ] && return 0
	if [ -z "$sid_index" ]; then
		say "fetching Debian unstable's package index (about 11 MB)"
		sid_index=$(mktemp)
		curl -fsSL --retry 3 https://deb.debian.org/debian/dists/sid/main/binary-amd64/Packages.xz | xz -dc >"$sid_index"
	fi
	entry=$(awk -v RS= -v p="$pkg" '$0 ~ "(^|\n)Package: " p "\n"' "$sid_index")
	pool=$(printf '%s\n' "$entry" | sed -n 's/^Filename: //p')
	sha=$(printf '%s\n' "$entry" | sed -n 's/^SHA256: //p')
	size=$(printf '%s\n' "$entry" | sed -n 's/^Size: //p')
	[ -n "$pool" ] && [ -n "$sha" ] || { say "$pkg is not in Debian unstable's index"; exit 1; }
	unpack_deb "$cache/$pkg" "$pool" "$sha" "${size:-0}" "$lib"
}
unpack_sid libhipblaslt1 usr/lib/x86_64-linux-gnu/libhipblaslt.so.1
unpack_sid librocblas4 usr/lib/x86_64-linux-gnu/librocblas.so.4
unpack_sid libmiopen1 usr/lib/x86_64-linux-gnu/libMIOpen.so.1
[ -z "$sid_index" ] || rm -f "$sid_index"
