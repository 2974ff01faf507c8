#!/usr/bin/env bash
# Installs everything the test suite needs, then runs it. README.rst gives this as the test
# command and .ci/run runs it: system packages (real Memcached and Redis servers for the
# benchmark harness tests), the package with its test extras, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v memcached >/dev/null 2>&1 || need+=(memcached)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
exec python3 -m pytest "$@"
