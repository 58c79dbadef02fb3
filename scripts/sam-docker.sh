#!/usr/bin/env bash
# Run a command with what `sam local` needs from the machine, then undo
# what this script changed, whatever the command's exit status:
#
#   scripts/sam-docker.sh ARCH COMMAND...     (ARCH: arm64 or x86_64)
#
# - Debian's docker.io, busybox-static and, for a foreign ARCH,
#   qemu-user-static and binfmt-support, installed with apt-get when missing.
# - A Docker daemon: one already answering is used and left running;
#   otherwise dockerd is started here and stopped, by its PID, on exit, with
#   its containers. It runs with --userland-proxy=false --ip-forward=false:
#   a published port is then a NAT rule, which refuses a connection until
#   the container's emulator listens, so SAM CLI's wait for the socket
#   waits. With docker-proxy the port accepts at once and SAM CLI gives up
#   after 0.7 s of retries, before an arm64 emulator under qemu is up
#   ("No response from invoke container"). No forwarding is needed: SAM's
#   containers only talk to the host. The iptables rules dockerd adds,
#   net.ipv4.ip_forward, the docker0 bridge and binfmt_misc are compared
#   with what they were before and put back if anything changed them.
# - qemu's binfmt handler for ARCH when it is not the host's (arm64, the
#   deployed architecture, on an x86_64 machine).
# - The Lambda base image SAM CLI builds its invoke image from,
#   public.ecr.aws/lambda/provided:al2023-ARCH: the real one if it is
#   present or can be pulled, else a stand-in built here (said loudly).
#
# SAM_DOCKER_SKIP_OK=1 (the SAM test) turns "this machine cannot run
# containers at all" (not root and no daemon; no apt-get and no dockerd)
# into exit 0 after saying why; anything else that fails is a failure.
# The command sees SAM_BASE_IMAGE=real|stand-in.
set -euo pipefail

arch=${1:?usage: $0 arm64|x86_64 COMMAND...}
shift
[[ $# -gt 0 ]] || { echo "usage: $0 arm64|x86_64 COMMAND..." >&2; exit 2; }
case "$arch" in
  arm64) platform=linux/arm64 qemu=aarch64 ;;
  x86_64) platform=linux/amd64 qemu=x86_64 ;;
  *) echo "sam-docker: architecture $arch: want arm64 or x86_64" >&2; exit 2 ;;
esac
case "$(uname -m)" in
  x86_64) host_arch=x86_64 ;;
  aarch64 | arm64) host_arch=arm64 ;;
  *) host_arch=$(uname -m) ;;
esac
image=public.ecr.aws/lambda/provided:al2023-$arch
standin_label=dev.chargeonce.standin

say() { echo "sam-docker: $*" >&2; }
cannot() {
  if [[ "${SAM_DOCKER_SKIP_OK:-}" == 1 ]]; then
    say "SKIP: this machine cannot run containers: $*"
    exit 0
  fi
  say "this machine cannot run containers: $*"
  exit 1
}

# ---- What we change, and how to put it back ----
state=$(mktemp -d)
dockerd_pid=""
mounted_binfmt=""
enabled_binfmt=""
ip_forward_before=$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null || echo "")
had_docker0=""
ip link show docker0 >/dev/null 2>&1 && had_docker0=1

snapshot_iptables() {
  # What the rules do: the rules, user chains and policies other than ACCEPT,
  # per table. An empty table with ACCEPT policies does what no table does.
  { iptables-save 2>/dev/null || true; } |
    awk '/^\*/ { t = $0 } /^-A / || /^:[^ ]+ -/ || (/^:/ && $2 != "ACCEPT") { sub(/ \[[0-9]*:[0-9]*\]/, ""); print t, $0 }'
}

# Put back the tables dockerd writes (filter and nat): the saved table where
# there was one, else an empty one, which does what no table does.
restore_iptables() {
  local t
  for t in filter nat; do
    if grep -qx "\*$t" "$state/iptables.full"; then
      iptables-restore -T "$t" <"$state/iptables.full"
    else
      iptables -t "$t" -F && iptables -t "$t" -X
    fi
  done
}

cleanup() {
  local rc=$?
  set +e
  if [[ -n "$dockerd_pid" ]]; then
    ids=$(docker ps -aq 2>/dev/null)
    [[ -n "$ids" ]] && docker rm -f $ids >/dev/null 2>&1
    kill -TERM "$dockerd_pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$dockerd_pid" 2>/dev/null; then
      say "dockerd ($dockerd_pid) still running after 20 s: killing it"
      kill -KILL "$dockerd_pid" 2>/dev/null
    fi
    wait "$dockerd_pid" 2>/dev/null
    say "stopped dockerd ($dockerd_pid)"
    if [[ -z "$had_docker0" ]] && ip link show docker0 >/dev/null 2>&1; then
      ip link delete docker0 && say "removed the docker0 bridge"
    fi
  fi
  if [[ -f "$state/iptables" ]] && ! diff -q "$state/iptables" <(snapshot_iptables) >/dev/null; then
    restore_iptables
    if diff -q "$state/iptables" <(snapshot_iptables) >/dev/null; then
      say "removed the iptables rules dockerd added"
    else
      say "iptables rules differ from before and could not be put back:"
      diff "$state/iptables" <(snapshot_iptables) >&2
      rc=1
    fi
  fi
  if [[ -n "$ip_forward_before" && "$(cat /proc/sys/net/ipv4/ip_forward)" != "$ip_forward_before" ]]; then
    echo "$ip_forward_before" >/proc/sys/net/ipv4/ip_forward && say "net.ipv4.ip_forward back to $ip_forward_before"
  fi
  if [[ -n "$enabled_binfmt" ]]; then
    update-binfmts --disable "qemu-$qemu" >/dev/null 2>&1 && say "disabled the qemu-$qemu binfmt handler again"
  fi
  if [[ -n "$mounted_binfmt" ]]; then
    umount /proc/sys/fs/binfmt_misc && say "unmounted binfmt_misc again"
  fi
  rm -rf "$state"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- Packages ----
if ! docker info >/dev/null 2>&1; then
  [[ "$(id -u)" == 0 ]] || cannot "no Docker daemon answers and this user is not root, so none can be started here"
fi
want=()
command -v dockerd >/dev/null || want+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || want+=(busybox-static)
if [[ "$arch" != "$host_arch" ]]; then
  dpkg -s qemu-user-static >/dev/null 2>&1 || want+=(qemu-user-static)
  dpkg -s binfmt-support >/dev/null 2>&1 || want+=(binfmt-support)
fi
if [[ ${#want[@]} -gt 0 ]]; then
  if ! command -v apt-get >/dev/null; then
    command -v dockerd >/dev/null || docker info >/dev/null 2>&1 || cannot "no dockerd, no Docker daemon and no apt-get to install docker.io"
    say "cannot install ${want[*]}: no apt-get"
    exit 1
  fi
  say "installing ${want[*]} (Debian packages)"
  start=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${want[@]}" >"$state/apt.log" 2>&1 ||
    { apt-get update -qq >>"$state/apt.log" 2>&1 && apt-get install -y -qq --no-install-recommends "${want[@]}" >>"$state/apt.log" 2>&1; } ||
    { tail -20 "$state/apt.log" >&2; say "apt-get install ${want[*]} failed"; exit 1; }
  say "installed in $((SECONDS - start)) s"
fi

# ---- The daemon ----
if docker info >/dev/null 2>&1; then
  say "using the Docker daemon already running (it is left running)"
else
  command -v iptables-save >/dev/null || { say "no iptables, which dockerd's published ports need"; exit 1; }
  snapshot_iptables >"$state/iptables"
  iptables-save >"$state/iptables.full" 2>/dev/null
  dockerd --userland-proxy=false --ip-forward=false --ip-masq=false >"$state/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 150); do
    docker info >/dev/null 2>&1 && break
    if ! kill -0 "$dockerd_pid" 2>/dev/null; then
      tail -20 "$state/dockerd.log" >&2
      dockerd_pid=""
      say "dockerd exited at start (its log is above)"
      exit 1
    fi
    sleep 0.2
  done
  docker info >/dev/null 2>&1 || { tail -20 "$state/dockerd.log" >&2; say "dockerd not answering after 30 s"; exit 1; }
  say "started dockerd ($dockerd_pid): $(docker info --format '{{.ServerVersion}}, {{.Driver}}, cgroup v{{.CgroupVersion}}' 2>/dev/null)"
fi

# ---- qemu for a foreign architecture ----
if [[ "$arch" != "$host_arch" ]]; then
  if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || { say "cannot mount binfmt_misc for qemu"; exit 1; }
    mounted_binfmt=1
  fi
  if [[ "$(head -1 "/proc/sys/fs/binfmt_misc/qemu-$qemu" 2>/dev/null)" != enabled ]]; then
    update-binfmts --enable "qemu-$qemu" || { say "cannot enable the qemu-$qemu binfmt handler"; exit 1; }
    enabled_binfmt=1
  fi
  grep -q '^flags:.*F' "/proc/sys/fs/binfmt_misc/qemu-$qemu" ||
    { say "the qemu-$qemu binfmt handler lacks the F flag: it would not run inside containers"; exit 1; }
  say "$arch functions run under qemu-$qemu (binfmt_misc)"
fi

# ---- The base image ----
standin() { [[ "$(docker image inspect -f "{{index .Config.Labels \"$standin_label\"}}" "$image" 2>/dev/null)" == true ]]; }
base=""
if docker image inspect "$image" >/dev/null 2>&1 && ! standin; then
  base=real
  say "base image $image: the real one, already present"
elif timeout 300 docker pull -q --platform "$platform" "$image" >"$state/pull.log" 2>&1; then
  base=real
  say "base image $image: the real one, pulled"
elif standin; then
  base=stand-in
  say "cannot pull $image: $(tail -1 "$state/pull.log")"
  say "STAND-IN BASE IMAGE: using the one an earlier run built (not Amazon Linux 2023; docs/sam-local.md says what it lacks)"
else
  say "cannot pull $image: $(tail -1 "$state/pull.log")"
  rootfs=$state/rootfs
  mkdir -p "$rootfs"/{bin,etc/ssl/certs,opt,tmp,var/runtime,var/task}
  chmod 1777 "$rootfs/tmp"
  # The shell and the two commands SAM's image build runs (RUN mv && chmod),
  # as the host's static busybox: a container runs it natively whatever
  # architecture the image is labelled with.
  cp /bin/busybox "$rootfs/bin/busybox"
  for applet in sh mv chmod cp rm mkdir ls cat; do ln -s busybox "$rootfs/bin/$applet"; done
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
  echo 'root:x:0:' >"$rootfs/etc/group"
  tar -C "$rootfs" -cf "$state/rootfs.tar" .
  cat >"$state/Dockerfile" <<EOF
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin:/usr/bin:/bin LAMBDA_TASK_ROOT=/var/task LAMBDA_RUNTIME_DIR=/var/runtime
WORKDIR /var/task
LABEL $standin_label=true
EOF
  DOCKER_BUILDKIT=0 docker build -q --platform "$platform" -t "$image" "$state" >/dev/null 2>"$state/build.log" ||
    { cat "$state/build.log" >&2; say "building the stand-in base image failed"; exit 1; }
  base=stand-in
  cat >&2 <<EOF

######################################################################
# STAND-IN BASE IMAGE: $image is NOT Amazon's.
# No registry answered, so sam-docker built a 2 MB stand-in under that
# name (label $standin_label=true). Compared with Amazon Linux 2023's
# provided.al2023 image it has no glibc or other shared libraries, no
# package manager, no /lambda-entrypoint.sh or built-in RIE (SAM adds
# its own), no /usr/share/zoneinfo, and only the host's busybox for a
# shell, with the host's CA bundle. The functions are static Go binaries
# that need none of it, but a deployed function runs on the real image:
# a difference there is not caught here.
######################################################################

EOF
fi

SAM_BASE_IMAGE=$base "$@"
