#!/bin/sh
# Builds firn-spark.jar (the JVM merge reader and loader) with javac against the
# jars of the installed pyspark: no Maven, no download. Usage: jvm/build.sh [python]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${1:-"$here/../.venv/bin/python"}
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
out="$here/../shared/firn/spark/jars"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
javac -nowarn --release 17 -d "$work/classes" -cp "$jars/*" $(find "$here/src" -name '*.java')
cp -r "$here/resources/." "$work/classes/"
mkdir -p "$out"
jar --create --file "$out/firn-spark.jar" -C "$work/classes" .
echo "$out/firn-spark.jar"
