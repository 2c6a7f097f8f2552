#!/usr/bin/env bash
# Installs what framepack needs on a Debian machine:
#   ffmpeg           MP4 output (libx264), as FramePack writes it
#   libopenblas0     the CPU backend's GEMM, loaded at run time
#   clang-19, lld-19 offline compile check of the GPU kernels for gfx1100/gfx1151
#   clang-tools-19   clang-offload-bundler, which clang-19 runs for every
#                    --offload-arch build (only a Recommends of clang-19)
#   libamdhip64-5    the HIP runtime, so CI checks our AMD symbol table against it
#   curl             fetches librccl1 (below)
# librccl1, Debian trixie's RCCL (ROCm's NCCL), unpacked under
# ~/.cache/framepack/librccl1 so CI checks our RCCL symbol table against it
# (bookworm has no RCCL, and a trixie package does not install on bookworm),
# and Go when it is missing (the go.mod toolchain line fetches the exact version).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

pkgs="ffmpeg libopenblas0 clang-19 clang-tools-19 lld-19 libamdhip64-5 ca-certificates curl"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
have_go=1
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || { have_go=0; missing="$missing golang-go"; }
if [ -n "$missing" ]; then
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends $missing
fi

# Debian's Go is older than go.mod asks for: fetch the exact toolchain as a
# module through the configured module proxy and install it to /usr/local/go.
if [ "$have_go" = 0 ]; then
	want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(dirname "$0")/../go.mod")
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

# RCCL: the package's file, checked against the hash trixie's index gives,
# unpacked (not installed) where the symbol test finds it through
# FRAMEPACK_RCCL. Done once per machine.
rccl_deb=librccl1_5.4.3-3+b1_amd64.deb
rccl_sha256=735e8e0a69f88489bdbd0a8b69bc75a376da92f1129b9ed80a38c99726bfe3a7
rccl_dir="${XDG_CACHE_HOME:-$HOME/.cache}/framepack/librccl1"
if [ ! -e "$rccl_dir/usr/lib/x86_64-linux-gnu/librccl.so.1" ]; then
	tmp=$(mktemp -d)
	curl -fsSL --retry 3 -o "$tmp/$rccl_deb" "https://deb.debian.org/debian/pool/main/r/rccl/$rccl_deb"
	echo "$rccl_sha256  $tmp/$rccl_deb" | sha256sum -c --quiet
	rm -rf "$rccl_dir.partial"
	mkdir -p "$rccl_dir.partial"
	dpkg-deb -x "$tmp/$rccl_deb" "$rccl_dir.partial"
	rm -rf "$rccl_dir" "$tmp"
	mv "$rccl_dir.partial" "$rccl_dir"
fi
