#!/bin/sh
# Installs iii from an iii release tree. Only iii: never iii-worker or iii-init, for any release.
#
#   sh install.sh [VERSION]
#
# Environment:
#   VERSION          release to install: 0.26.0, v0.26.0 or iii/v0.26.0 (default: latest)
#   BIN_DIR          where iii goes (default: $HOME/.local/bin)
#   TARGET           target triple such as x86_64-unknown-linux-gnu (default: this host;
#                    III_TARGET is honoured too)
#   III_RELEASE_URL  the release tree, file:// or http(s):// (default: the iii-go releases)
#   III_DOWNLOADER   curl or wget for http(s) (default: curl when installed, else wget)
#
# The tree holds iii/latest (the latest version) and iii/v<version>/ with the archives,
# their .sha256 sidecars and checksums.txt. The archive's SHA-256 is checked before anything
# is installed; iii is put in place by a rename, so BIN_DIR/iii is never half written.
set -eu

default_release_url="https://github.com/iii-go/iii/releases/download"

say() { printf '%s\n' "$*"; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,17s/^# \{0,1\}//p' "$0" 2>/dev/null || say "usage: sh install.sh [VERSION]"
}

# any_exists PATH...: true when one of the (glob-expanded) paths exists.
any_exists() {
	for p in "$@"; do
		[ -e "$p" ] && return 0
	done
	return 1
}

# detect_target prints the host's triple with the rules iii uses: on Linux, musl when the musl
# loader is present and no glibc loader is.
detect_target() {
	os=$(uname -s)
	arch=$(uname -m)
	case $arch in
	x86_64 | amd64) arch=x86_64 ;;
	aarch64 | arm64) arch=aarch64 ;;
	*) die "unsupported architecture $arch; set TARGET to a triple such as x86_64-unknown-linux-gnu" ;;
	esac
	case $os in
	Linux)
		libc=gnu
		if any_exists /lib/ld-musl-*.so.1 && ! any_exists /lib*/ld-linux*.so.*; then
			libc=musl
		fi
		say "$arch-unknown-linux-$libc"
		;;
	Darwin) say "$arch-apple-darwin" ;;
	*) die "unsupported system $os; this script installs on Linux and macOS (set TARGET to override)" ;;
	esac
}

# fetch URL FILE: copy one file of the release tree to FILE; false when it cannot.
fetch() {
	case $1 in
	file://*) cp "${1#file://}" "$2" 2>/dev/null ;;
	http://* | https://*)
		case $downloader in
		curl) curl -fsSL -o "$2" "$1" 2>/dev/null ;;
		wget) wget -q -O "$2" "$1" 2>/dev/null ;;
		esac
		;;
	*) return 1 ;;
	esac
}

# sha256 FILE prints the file's hex SHA-256.
sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{ print $1 }'
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | awk '{ print $1 }'
	else
		die "need sha256sum or shasum to verify the download"
	fi
}

# list_targets CHECKSUMS prints the targets a release has iii for.
list_targets() {
	awk '$2 ~ /^iii-(x86_64|aarch64|i686|armv7)-/ {
		t = $2; sub(/^iii-/, "", t); sub(/\.(tar\.gz|zip)$/, "", t); print "  " t
	}' "$1"
}

case ${1:-} in
-h | --help)
	usage
	exit 0
	;;
-*) die "unknown option $1 (try --help)" ;;
esac

base=${III_RELEASE_URL:-$default_release_url}
base=${base%/}
case $base in
file://* | http://* | https://*) ;;
*) die "III_RELEASE_URL must be a file://, http:// or https:// URL, not $base" ;;
esac
downloader=${III_DOWNLOADER:-}
case $base in
http://* | https://*)
	if [ -z "$downloader" ]; then
		if command -v curl >/dev/null 2>&1; then
			downloader=curl
		elif command -v wget >/dev/null 2>&1; then
			downloader=wget
		else
			die "need curl or wget to download from $base"
		fi
	fi
	case $downloader in
	curl | wget) command -v "$downloader" >/dev/null 2>&1 || die "III_DOWNLOADER=$downloader is not installed" ;;
	*) die "III_DOWNLOADER must be curl or wget, not $downloader" ;;
	esac
	;;
esac

bin_dir=${BIN_DIR:-$HOME/.local/bin}
target=${TARGET:-${III_TARGET:-}}
if [ -z "$target" ]; then
	target=$(detect_target)
fi
case $target in
*-windows-*) die "iii for $target ships as a .zip; download it from the release page instead" ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/iii-install.XXXXXX")
new=""
trap 'rm -rf "$tmp" ${new:+"$new"}' EXIT
trap 'exit 130' INT TERM

version=${VERSION:-${1:-latest}}
version=${version#iii/}
version=${version#v}
if [ "$version" = latest ]; then
	fetch "$base/iii/latest" "$tmp/latest" || die "cannot read the latest version from $base/iii/latest"
	version=$(tr -d ' \t\r\n' <"$tmp/latest")
	version=${version#v}
fi
case $version in
'' | *[!0-9A-Za-z.+-]*) die "not a version: '$version' (want e.g. 0.26.0 or iii/v0.26.0)" ;;
esac

# Only iii's own asset is fetched, for every release, 0.25 included (req I4).
dir="$base/iii/v$version"
asset="iii-$target.tar.gz"
say "Installing iii v$version for $target from $dir"

if ! fetch "$dir/checksums.txt" "$tmp/checksums.txt"; then
	die "no release iii/v$version in $base"
fi
if ! fetch "$dir/$asset.sha256" "$tmp/$asset.sha256" || ! fetch "$dir/$asset" "$tmp/$asset"; then
	say "iii v$version is published for:" >&2
	list_targets "$tmp/checksums.txt" >&2
	die "no release asset found for target: $target"
fi

want=$(awk 'NR == 1 { print $1 }' "$tmp/$asset.sha256")
got=$(sha256 "$tmp/$asset")
if [ -z "$want" ] || [ "$got" != "$want" ]; then
	die "checksum mismatch for $asset: its sha256 is $got but the release publishes ${want:-nothing}; nothing was installed"
fi
say "Verified $asset (sha256 $got)"

mkdir -p "$tmp/x"
tar -xzf "$tmp/$asset" -C "$tmp/x" || die "$asset is not a readable tar.gz archive; nothing was installed"
# -f follows a symlink: an iii that links to /etc/hostname would install that file.
if [ ! -f "$tmp/x/iii" ] || [ -L "$tmp/x/iii" ]; then
	die "$asset holds no iii binary (a symlink is not one); nothing was installed"
fi

old=""
if [ -x "$bin_dir/iii" ]; then
	old=$("$bin_dir/iii" --version 2>/dev/null | awk 'END { print $NF }') || old=""
	old=${old#v}
fi
if [ -n "$old" ] && [ "$old" = "$version" ]; then
	say "iii is already at v$version in $bin_dir/iii — nothing to do"
else
	mkdir -p "$bin_dir" || die "cannot create $bin_dir"
	new="$bin_dir/.iii.new.$$"
	cp "$tmp/x/iii" "$new" || die "cannot write into $bin_dir"
	chmod 755 "$new"
	# The new iii must run and say it is $version before it replaces the old one. A binary for
	# another system cannot run here, so TARGET set to one skips the check.
	host=$(detect_target 2>/dev/null) || host=""
	if [ "$target" = "$host" ]; then
		ran=$("$new" --version 2>/dev/null | awk 'END { print $NF }') || ran=""
		if [ "${ran#v}" != "$version" ]; then
			die "the iii in $asset does not run here or is not v$version ('iii --version' printed '$ran'); nothing was installed"
		fi
	else
		say "note: not running iii for $target on this host (${host:-unknown}); its --version was not checked"
	fi
	mv -f "$new" "$bin_dir/iii" || {
		rm -f "$new"
		die "cannot install $bin_dir/iii"
	}
	if [ -n "$old" ]; then
		say "Installed iii v$version to $bin_dir/iii (was v$old)"
	else
		say "Installed iii v$version to $bin_dir/iii"
	fi
fi

case $version in
0.[0-9].* | 0.1[0-9].* | 0.2[0-5].*)
	say "note: iii v$version runs VM workers and sandboxes only with iii-worker and iii-init beside it."
	say "      This script installs neither. Download iii-worker-$target.tar.gz and iii-init-$target.tar.gz"
	say "      from $dir/ and put both binaries in $bin_dir."
	;;
esac

found=$(command -v iii 2>/dev/null || true)
if [ -z "$found" ]; then
	say "note: $bin_dir is not on your PATH. Add it: export PATH=\"$bin_dir:\$PATH\""
elif [ "$found" != "$bin_dir/iii" ]; then
	say "note: your shell runs $found, not $bin_dir/iii. Remove that copy (Homebrew: brew uninstall iii) or put $bin_dir first on your PATH."
fi
