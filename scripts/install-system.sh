#!/usr/bin/env bash
# Installs the system packages the tests use, only when missing: Debian's chromium (browser tests),
# nats-server (NATS transport tests), a Java 17 JDK (Spark, and javac for the JVM journal reader),
# Node.js and npm (the JavaScript client's build and tests), curl (the README's curl lines are tested as printed), wrk (benchmarks) and a C
# compiler with zlib's headers (the C accelerators).
# Idempotent; needs root or sudo.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)  # the JavaScript client's build (clients/js)
command -v wrk >/dev/null 2>&1 || need+=(wrk)  # make bench: the HTTP load generator
# A C compiler and zlib's headers: the C accelerators (bus/native/_speedups.c, bus/native/_journalscan.c),
# which tests/test_package.py builds from the sdist.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -f /usr/include/stdio.h ] || need+=(libc6-dev)
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
command -v curl >/dev/null 2>&1 || need+=(curl)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
