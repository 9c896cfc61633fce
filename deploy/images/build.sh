#!/usr/bin/env bash
# Build Firn's images from what this machine reaches (Debian's mirror, PyPI, Maven
# Central), never from Docker Hub:
#
#   firn/debian:bookworm   a minimal Debian made with debootstrap and `docker import`
#   firn/postgres:15       Debian's postgresql, configured like the official image
#   firn/kafka:<version>   the broker jars the local runner uses, on Debian's Java 17
#   firn:dev               deploy/Dockerfile (the four services) on firn/debian
#
# Cached: the base is made only when missing, the rest is docker's layer cache, so a
# second run with nothing changed takes seconds. Needs root (debootstrap), docker, and
# the project's .venv (`make setup`) to fetch the Kafka jars.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=firn/debian:bookworm
mirror=${FIRN_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if ! docker image inspect "$base" > /dev/null 2>&1; then
    command -v debootstrap > /dev/null || {
        echo "debootstrap is missing (Debian: apt-get install debootstrap)" >&2
        exit 1
    }
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    echo "making $base with debootstrap from $mirror"
    debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" > /dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # The images trust what this host trusts: a site's own CAs (a TLS-inspecting
    # proxy in front of PyPI, say) go into the base, as on the host.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates > /dev/null
    fi
    tar -C "$rootfs" -c . | docker import -c 'CMD ["bash"]' - "$base" > /dev/null
fi

# The Kafka image's context: the broker jars (fetched once into .firn/cache, as the
# local runner does), its entrypoint and the local runner's logging.
python=${FIRN_PYTHON:-.venv/bin/python}
version=$("$python" -c 'from firn_localstack import KAFKA_VERSION; print(KAFKA_VERSION)')
libs=$("$python" -c '
from pathlib import Path
from firn_localstack.kafka import broker_jars
print(broker_jars(Path(".firn/cache")))')
context=.firn/images/kafka
rm -rf "$context"
mkdir -p "$context"
cp -r "$libs" "$context/libs"
cp deploy/images/kafka.Dockerfile deploy/images/kafka-entrypoint.sh "$context/"
cp deploy/localstack/kafka-log4j2.properties "$context/"

build() {
    local tag=$1
    shift
    echo "building $tag"
    docker build --quiet --build-arg "BASE_IMAGE=$base" \
        --build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt -t "$tag" "$@" > /dev/null
}
build firn/postgres:15 -f deploy/images/postgres.Dockerfile deploy/images
build "firn/kafka:$version" -f "$context/kafka.Dockerfile" "$context"
build firn:dev -f deploy/Dockerfile .
docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E '^firn[/:]'
