#!/usr/bin/env bash
# Docker on a Debian bookworm machine, as CI and deploy/images/build.sh need it:
# Debian's docker.io and debootstrap, Compose v2 from Debian trixie's docker-compose
# package (bookworm has none; it needs only libc6 >= 2.34), and a running dockerd.
# Idempotent: what is there already is left alone.
set -euo pipefail
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

if ! command -v dockerd > /dev/null || ! command -v debootstrap > /dev/null; then
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends docker.io debootstrap
fi

if ! docker compose version > /dev/null 2>&1; then
    # Only this one package comes from trixie: the source is pinned below bookworm's.
    echo "deb http://deb.debian.org/debian trixie main" |
        $sudo tee /etc/apt/sources.list.d/firn-trixie.list > /dev/null
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' |
        $sudo tee /etc/apt/preferences.d/firn-trixie > /dev/null
    $sudo apt-get update -q
    dir=$(mktemp -d)
    (cd "$dir" && apt-get download -q docker-compose/trixie)
    $sudo dpkg -i "$dir"/docker-compose_*.deb
    rm -rf "$dir"
fi

if ! docker info > /dev/null 2>&1; then
    $sudo sh -c 'nohup dockerd > /var/log/dockerd.log 2>&1 &'
    for _ in $(seq 60); do
        docker info > /dev/null 2>&1 && break
        sleep 1
    done
fi
docker info --format 'docker {{.ServerVersion}}, compose '"$(docker compose version --short)"
