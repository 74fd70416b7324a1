#!/usr/bin/env bash
# Fails with a clear message unless a Java runtime >= 17 is available (local Spark needs it).
set -u
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "Error: Java is not installed, and local Spark needs Java 17 or newer." >&2
  echo "Install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17)" >&2
  echo "or set JAVA_HOME to a JDK 17+ installation." >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if ! [ "${major:-0}" -ge 17 ] 2>/dev/null; then
  echo "Error: found Java $version at $(command -v "$java_bin"), but local Spark needs Java 17 or newer." >&2
  echo "Install Java 17 (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) and/or set JAVA_HOME to it." >&2
  exit 1
fi
echo "Java $version: ok"
