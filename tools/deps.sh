#!/usr/bin/env bash
# Installs the Debian packages fleetbench needs, when missing, in two sets:
#   tools/deps.sh demo   what `make demo` uses: libgomp1 (GCC's OpenMP runtime, which Paddle's CPU
#                        wheels load and do not ship: without it no cell runs), and iproute2 (ip, tc)
#                        for its emulated-network cells, which need root too. A user who is not root
#                        without iproute2 is told those cells are skipped and the demo goes on (exit 0);
#                        without libgomp1, one line names the command and it stops (exit 1)
#   tools/deps.sh test   what `make test` uses (the default): besides those, sshd and ssh for the SSH
#                        executor and the emulated cluster's nodes, Slurm and munge for the Slurm executor,
#                        iperf3 for raw link rates, Chromium and its driver for the HTML report's test in
#                        a real browser (tests/unit/test_html_report.py), PostgreSQL for the results
#                        database's tests (a throwaway server each session, tests/pgserver.py)
# Nothing already installed is reinstalled, and no system service is started or enabled: fleetbench
# starts its own sshd/slurmd/munged per emulated node and never uses the system's.
set -euo pipefail
set_name=${1:-test}
PADDLE_NEEDS=(libgomp1)
case "$set_name" in
  demo) PACKAGES=("${PADDLE_NEEDS[@]}" iproute2) ;;
  test) PACKAGES=("${PADDLE_NEEDS[@]}" openssh-server openssh-client slurm-wlm slurm-client munge iperf3 iproute2
                  chromium chromium-driver postgresql) ;;
  *) echo "tools/deps.sh: $set_name: expected demo or test" >&2; exit 2 ;;
esac
# Ubuntu ships Chromium as a snap, with the driver in chromium-chromedriver (which needs snapd): asked
# for by that name there; where snapd cannot run (a container) the browser test skips, saying why.
ubuntu=$( (. /etc/os-release 2>/dev/null && echo "${ID:-}") )
if [ "$ubuntu" = ubuntu ] && [ "$set_name" = test ]; then
  kept=()
  for p in "${PACKAGES[@]}"; do case "$p" in chromium|chromium-driver) ;; *) kept+=("$p") ;; esac; done
  PACKAGES=("${kept[@]}" chromium-chromedriver)  # it depends on chromium-browser, the snap's package
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  paddle_missing=()
  for p in "${missing[@]}"; do case " ${PADDLE_NEEDS[*]} " in *" $p "*) paddle_missing+=("$p") ;; esac; done
  if [ "$set_name" = demo ] && [ ${#paddle_missing[@]} -eq 0 ]; then  # the local cells run: say what is skipped, go on
    echo "fleetbench: ${missing[*]} not installed and not root: the demo's emulated-network cells will be skipped; 'sudo make demo' runs them" >&2
    exit 0
  fi
  if [ "$set_name" = demo ]; then
    echo "fleetbench: Paddle needs ${paddle_missing[*]} (not installed): run 'sudo make deps-demo' or 'sudo apt-get install ${missing[*]}'" >&2
    exit 1
  fi
  echo "fleetbench: missing Debian packages ${missing[*]}: run 'sudo apt-get install ${missing[*]}' (the SSH, Slurm and emulated-cluster paths and their tests need them)" >&2
  exit 1
fi

echo "fleetbench: installing ${missing[*]} (apt-get; no service is started or enabled)"
case " ${missing[*]} " in *" chromium-chromedriver "*)
  echo "fleetbench: on Ubuntu Chromium is a snap (chromium-chromedriver brings it, through snapd); without snapd the HTML report's browser test is skipped" ;;
esac
# policy-rc.d exit 101 is Debian's documented way to forbid maintainer scripts to start services
# (invoke-rc.d reads it). Only ours is removed afterwards; an existing one is left as it was.
policy=/usr/sbin/policy-rc.d
ours=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && ours=1
fi
trap 'if [ -n "$ours" ]; then rm -f "$policy"; fi' EXIT
wanted_units() { find /etc/systemd/system -path '*.wants/*' 2>/dev/null | sort; }
mapfile -t wants_before < <(wanted_units)
export DEBIAN_FRONTEND=noninteractive
# An empty package list (a fresh image) cannot resolve names: update once, then install.
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}
# Maintainer scripts enable their units for the next boot: remove the links this install added.
comm -13 <(printf '%s\n' "${wants_before[@]}") <(wanted_units) | xargs -r rm -f
echo "fleetbench: installed ${missing[*]}"
