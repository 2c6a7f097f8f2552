#!/usr/bin/env bash
# Installs what framepack needs on a Debian machine:
#   ffmpeg           MP4 output (libx264), as FramePack writes it
#   libopenblas0     the CPU backend's GEMM, loaded at run time
#   clang-19, lld-19 offline compile check of the GPU kernels for gfx1100/gfx1151
#   clang-tools-19   clang-offload-bundler, which clang-19 runs for every
#                    --offload-arch build (only a Recommends of clang-19)
#   libamdhip64-5    the HIP runtime, so CI checks our AMD symbol table against it
# and Go when it is missing (the go.mod toolchain line fetches the exact version).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

pkgs="ffmpeg libopenblas0 clang-19 clang-tools-19 lld-19 libamdhip64-5 ca-certificates"
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
