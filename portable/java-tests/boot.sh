#!/usr/bin/env bash
# Prints the path of Beam's Java SDK boot program (what Beam's Java container runs as its
# entry point: it asks the provision service for options and dependencies, fetches the staged
# jars, and starts the Java harness). Built once with Go from Beam's own module on the Go
# module proxy, at the Beam version the Java tests use, into ~/.cache/weir-java-boot.
set -euo pipefail
version="${WEIR_BEAM_BOOT_VERSION:-v2.65.0}"
out="${WEIR_JAVA_BOOT_DIR:-$HOME/.cache/weir-java-boot}/$version"
if [ ! -x "$out/boot" ]; then
  command -v go >/dev/null || { echo "boot.sh: Go is needed to build Beam's Java boot" >&2; exit 1; }
  mkdir -p "$out/src"
  cd "$out/src"
  [ -f go.mod ] || go mod init weir-java-boot >/dev/null 2>&1
  go get "github.com/apache/beam/sdks/v2/java/container@$version" >&2
  go build -mod=mod -o "$out/boot.tmp" github.com/apache/beam/sdks/v2/java/container >&2
  mv "$out/boot.tmp" "$out/boot"
fi
echo "$out/boot"
