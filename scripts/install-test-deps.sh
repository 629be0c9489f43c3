#!/bin/sh
# Installs the programs the test suite starts for real, when they are
# missing: redis-server and redis-cli (the Redis store and cluster tests),
# nginx (the auth_request end-to-end test) and chromium (the dashboard's
# browser test). Debian and Ubuntu packages; elsewhere, install them
# yourself and put them on PATH.
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx-light"
# The names the browser test looks for, or the binary SLUICE_CHROMIUM names.
has_chromium() {
	[ -n "${SLUICE_CHROMIUM:-}" ] && return 0
	for name in chromium chromium-browser google-chrome-stable google-chrome; do
		command -v "$name" >/dev/null 2>&1 && return 0
	done
	return 1
}
has_chromium || missing="$missing chromium fonts-dejavu-core"

if [ -z "$missing" ]; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-test-deps: please install:$missing" >&2
	exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
echo "install-test-deps: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
