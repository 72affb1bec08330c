# shellcheck shell=bash
# Docker engine for the docker sandbox suites (test/sandbox-docker*.test.ts).
#
# Sourced by .ci/run (which then exports INFRADEV_REQUIRE_DOCKER=1, so those suites FAIL rather than
# skip when the engine is missing); also runnable on its own: `bash .ci/docker-setup.sh`.
#   1. installs Debian's docker.io when dockerd is missing;
#   2. starts dockerd itself when no engine answers (no systemd in CI), and waits for `docker info`;
#   3. builds the local test image infradev-test-base:local (no registry needed: `docker import` of an
#      empty root; the suites bind the host's /usr and /etc read-only for python3 + torch + pytest).
# Safe to source under `set -euo pipefail`: it defines one function, runs it, and changes no options.

infradev_docker_setup() {
  local log=/tmp/infradev-dockerd.log
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    echo "[docker-setup] installing docker.io"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io
  fi

  if docker info >/dev/null 2>&1; then
    echo "[docker-setup] engine already running ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
  elif [ -n "${DOCKER_HOST:-}" ]; then
    echo "[docker-setup] DOCKER_HOST=${DOCKER_HOST} is set but no engine answers there; not starting a local dockerd" >&2
    return 1
  else
    # First the defaults; inside a container without overlay support, fall back to vfs and no iptables.
    local attempt args
    for attempt in 1 2; do
      if [ "$attempt" = 1 ]; then args=(); else args=(--storage-driver=vfs --iptables=false); fi
      echo "[docker-setup] starting dockerd ${args[*]:-} (log: $log)"
      nohup dockerd "${args[@]}" >"$log" 2>&1 &
      local pid=$! i
      for i in $(seq 1 60); do
        if docker info >/dev/null 2>&1; then break; fi
        if ! kill -0 "$pid" 2>/dev/null; then break; fi
        sleep 1
      done
      if docker info >/dev/null 2>&1; then break; fi
      echo "[docker-setup] dockerd did not come up (attempt $attempt); last log lines:" >&2
      tail -n 15 "$log" >&2 || true
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      rm -f /var/run/docker.pid
    done
    if ! docker info >/dev/null 2>&1; then
      echo "[docker-setup] no docker engine: see $log" >&2
      return 1
    fi
    echo "[docker-setup] dockerd up ($(docker version --format '{{.Server.Version}}'))"
  fi

  # One source of truth for the image layout: the suites' own helper (idempotent).
  if [ -x node_modules/.bin/tsx ]; then
    node_modules/.bin/tsx test/helpers/docker-image.ts
  else
    echo "[docker-setup] node_modules not installed yet: the docker suites build infradev-test-base:local themselves"
  fi
  echo "[docker-setup] set INFRADEV_REQUIRE_DOCKER=1 so the docker suites fail instead of skipping without an engine"
}

infradev_docker_setup
