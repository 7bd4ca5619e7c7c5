#!/usr/bin/env bash
# The fresh-machine check: `git clone`, `make test` and `make demo` as a new Debian 12 machine runs them.
#
#   tools/fresh_machine.sh [--runs N] [--steps LIST] [--rev REV] [--dir DIR] [--keep] [--shell CMD]
#
# Each run is a machine of its own: a root filesystem made from nothing with debootstrap (Debian 12,
# minbase, plus what a new machine of this kind has: python3 with venv, git, make, and libgomp1, GCC's
# OpenMP runtime, which every Debian machine with a compiler has), entered with its
# own mount, network, process, UTS and IPC namespaces, so nothing this host holds (Debian packages,
# virtualenvs, pip's cache, keys, /etc/netns, /run, network namespaces and links) leaks in. Its network
# is slirp4netns (user-mode NAT: only the package registries answer, as on a new machine); the kernel,
# its cgroup hierarchies and /dev are the host's, as they would be on any machine of this kind.
# Steps, run in order in the run's root, each timed and printed with its exit code:
#   test        `make test` as root, the install included (Debian packages, both virtualenvs)
#   test-again  `make test` once more in the same root: a used machine now
#   demo-user   `make demo` as a user who is not root, in that user's own clone (no sudo exists)
#   demo        `make demo` as root
#   look        what the machine holds (Debian packages, state directories, links, namespaces, caches)
#   shell       the command given with --shell CMD, as root in the checkout (to look into a failure)
# Defaults: --runs 1 --steps demo-user,test (the demo first, on a machine without the suite's
# packages), the checkout's HEAD, DIR /var/tmp/fleetbench-fresh; a
# run's root is removed at its end unless --keep. Needs root, debootstrap and slirp4netns (installed
# when missing). docs/testing.md says how long it takes.
set -euo pipefail
runs=1 steps=demo-user,test rev=HEAD dir=/var/tmp/fleetbench-fresh keep= shell_cmd=
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rev) rev=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --shell) shell_cmd=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tools/fresh_machine.sh: $1: expected --runs N, --steps LIST, --rev REV, --dir DIR, --keep or --shell CMD" >&2; exit 2 ;;
  esac
done
case "$runs" in ''|*[!0-9]*|0) echo "tools/fresh_machine.sh: --runs $runs: expected a count of 1 or more" >&2; exit 2 ;; esac
IFS=, read -ra step_list <<<"$steps"
for s in "${step_list[@]}"; do
  case "$s" in test|test-again|demo-user|demo|look|shell) ;;
    *) echo "tools/fresh_machine.sh: --steps $steps: $s: expected test, test-again, demo-user, demo, look or shell" >&2; exit 2 ;;
  esac
done
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
sha=$(git -C "$repo" rev-parse -q --verify "$rev^{commit}" 2>/dev/null) \
  || { echo "tools/fresh_machine.sh: --rev $rev: not a commit of $repo" >&2; exit 2; }
case ",$steps," in *,shell,*) [ -n "$shell_cmd" ] || { echo "tools/fresh_machine.sh: --steps shell: expected --shell CMD too" >&2; exit 2; } ;; esac
export FRESH_SHELL=$shell_cmd
[ "$(id -u)" = 0 ] || { echo "tools/fresh_machine.sh: needs root (debootstrap, namespaces)" >&2; exit 2; }

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v slirp4netns >/dev/null || need+=(slirp4netns)
if [ ${#need[@]} -gt 0 ]; then
  echo "fresh: installing ${need[*]} on this host (the check's own tools)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

# The machine's package registries, as this host reaches them: the same sources and settings go in.
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || { echo "tools/fresh_machine.sh: no Debian mirror in /etc/apt/sources.list(.d): cannot debootstrap" >&2; exit 2; }
mkdir -p "$dir"
base=$dir/bookworm-minbase-libgomp1.tgz  # the base system's packages, downloaded once; every run installs them anew
if [ ! -s "$base" ]; then
  echo "fresh: downloading Debian 12's base packages once ($base)"
  debootstrap --variant=minbase --include=python3,python3-venv,git,make,ca-certificates,libgomp1 \
    --make-tarball="$base.part" bookworm "$dir/tarball-work" "$mirror" >"$dir/tarball.log" 2>&1
  mv "$base.part" "$base"
  rm -rf --one-file-system "$dir/tarball-work"
fi

# inside ROOT with its own namespaces: its mounts, then each step in the chroot (run as the namespace's
# pid 1's child: when it ends, every process of the run ends with it)
inner() {
  local root=$1 host=$2
  shift 2
  mount --bind "$root" "$root"  # its / a mount point, as a machine's is (ip netns exec remounts / rslave)
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"  # this network namespace's devices only
  mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup" 2>/dev/null || true
  mount --rbind /dev "$root/dev"
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  mount -t tmpfs -o mode=755 tmpfs "$root/run"
  hostname "$host"
  # pivot_root, not chroot: the root is the mount namespace's own, as on a machine (a chroot's
  # processes in namespaces of their own, such as `ip netns exec`'s, read /proc/PID/exe with the
  # host's path in front); the host's tree is unmounted, so nothing of it is left to see
  mkdir -p "$root/.host"
  cd "$root"
  pivot_root . .host
  cd /
  umount -l /.host
  rmdir /.host
  local logs=/var/log/fresh-check  # copied out by the host once the run ends
  mkdir -p "$logs"
  local keep_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb CI=true)
  for v in PIP_DEFAULT_TIMEOUT PIP_DISABLE_PIP_VERSION_CHECK OPENBLAS_CORETYPE OPENBLAS_L2_SIZE PYTHONDONTWRITEBYTECODE; do
    [ -n "${!v:-}" ] && keep_env+=("$v=${!v}")
  done
  local step rc=0
  for step in "$@"; do
    local t0=$SECONDS cmd
    case "$step" in
      test|test-again) cmd="cd /root/fleetbench && make test" ;;
      demo) cmd="cd /root/fleetbench && make demo" ;;
      shell) cmd="cd /root/fleetbench && $FRESH_SHELL" ;;
      look) cmd="echo \"debian packages: \$(dpkg-query -W | wc -l)\"; for p in /etc/netns /run/fleetbench \
/etc/munge/munge.key /var/lib/postgresql /root/.ssh /root/.cache/pip /root/fleetbench/.venv /usr/sbin/sshd /usr/bin/ip; do \
[ -e \$p ] && echo \"present: \$p\" || echo \"absent: \$p\"; done; ls /sys/class/net | tr '\\n' ' '; echo; \
python3 --version; apt-get update -q >/dev/null && echo 'apt reaches its sources'" ;;
      demo-user) cmd="id fbuser >/dev/null 2>&1 || useradd -m fbuser; rm -rf /home/fbuser/fleetbench; \
git clone -q /root/fleetbench /home/fbuser/fleetbench && chown -R fbuser: /home/fbuser/fleetbench && \
cd /home/fbuser/fleetbench && runuser -u fbuser -- env HOME=/home/fbuser make demo" ;;
    esac
    echo "fresh: $host: $step: $cmd"
    set +e
    /usr/bin/env -i "${keep_env[@]}" bash -c "$cmd" >"$logs/$step.log" 2>&1
    local step_rc=$?
    set -e
    local took=$((SECONDS - t0))
    printf 'fresh: %s: %s: exit %d after %d:%02d\n' "$host" "$step" "$step_rc" $((took / 60)) $((took % 60))
    if [ $step_rc -ne 0 ]; then
      tail -n 25 "$logs/$step.log" | sed "s/^/fresh: $host: $step: | /"
      rc=1
    elif [ "$step" = look ] || [ "$step" = shell ]; then
      sed "s/^/fresh: $host: $step: | /" "$logs/$step.log"
    else
        grep -E '^[0-9]+ passed|^sweep finished|^skipped cell|make demo: not root|tests? sessions?|^make test' "$logs/$step.log" \
        | tail -n 12 | sed "s/^/fresh: $host: $step: | /" || true
    fi
    [ -d /root/fleetbench/log ] && cp -r /root/fleetbench/log "$logs/log-$step" 2>/dev/null || true
  done
  return $rc
}

overall=0
for n in $(seq 1 "$runs"); do
  run_dir=$dir/run-$(date +%Y%m%d-%H%M%S)-$n
  root=$run_dir/root host=fresh$n ns=fbfresh$$-$n
  mkdir -p "$root"
  echo "fresh: run $n of $runs: commit $sha in $root"
  t0=$SECONDS
  debootstrap --unpack-tarball="$base" bookworm "$root" "$mirror" >"$run_dir/debootstrap.log" 2>&1
  rm -f "$root/etc/apt/sources.list"  # debootstrap's; the machine's own sources replace it
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && cp "$f" "$root$f"
  done
  for f in /etc/apt/apt.conf.d/*; do [ -e "$root$f" ] || cp "$f" "$root$f"; done
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
  [ -d /etc/xdg/pip ] && mkdir -p "$root/etc/xdg" && cp -r /etc/xdg/pip "$root/etc/xdg/"
  # the machine's own certificate authorities (its registries' TLS goes through them), as installed here
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
  echo "nameserver 10.0.2.3" >"$root/etc/resolv.conf"  # slirp4netns's DNS
  echo "$host" >"$root/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$host" >"$root/etc/hosts"
  git clone -q --no-hardlinks "$repo" "$root/root/fleetbench"
  git -C "$root/root/fleetbench" checkout -q "$sha"
  printf 'fresh: run %d: root made in %ds\n' "$n" $((SECONDS - t0))

  ip netns add "$ns"
  slirp4netns --configure --mtu=65520 --disable-host-loopback --netns-type=path "/run/netns/$ns" tap0 \
    >"$run_dir/slirp4netns.log" 2>&1 &
  slirp=$!
  cleanup() {
    kill "$slirp" 2>/dev/null || true
    wait "$slirp" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  }
  trap 'cleanup; exit 130' INT TERM
  ip -n "$ns" link set lo up
  for _ in $(seq 50); do ip -n "$ns" addr show tap0 2>/dev/null | grep -q 'inet ' && break; sleep 0.1; done
  set +e
  nsenter --net="/run/netns/$ns" unshare --mount --pid --uts --ipc --fork --kill-child --propagation private \
    bash -c "$(declare -f inner); inner \"\$@\"" inner "$root" "$host" "${step_list[@]}"
  rc=$?
  set -e
  cleanup
  trap - INT TERM
  cp -r "$root/var/log/fresh-check/." "$run_dir/" 2>/dev/null || true
  if grep -q " $root" /proc/self/mountinfo; then  # never remove a tree with a mount in it (/dev)
    echo "fresh: run $n: $root still has mounts; left in place" >&2
  elif [ -z "$keep" ]; then
    rm -rf --one-file-system "$root"
  fi
  printf 'fresh: run %d of %d: %s in %d:%02d (logs in %s)\n' "$n" "$runs" "$([ $rc = 0 ] && echo green || echo RED)" \
    $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)) "$run_dir"
  [ $rc = 0 ] || overall=1
done
exit $overall
