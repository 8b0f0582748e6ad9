#!/usr/bin/env bash
# Installs everything the testbed needs on Debian 12, as root, idempotently:
# the Debian packages, then a virtual environment at .venv/ holding the project
# (editable) and its test tools. Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")"

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: run as root (the emulation needs network namespaces, tc and cgroups)" >&2
    exit 1
fi

DEBS=(python3 python3-venv python3-dev mininet bridge-utils iproute2 iptables ethtool
      iputils-ping iperf iperf3 net-tools docker.io openvswitch-switch openvswitch-common procps
      opencv-doc
      chromium
      util-linux psmisc kmod
      gcc libc6-dev)

missing=()
for pkg in "${DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup.sh: installing Debian packages: ${missing[*]}"
    # Keep package scripts from starting system services (a system Docker engine would
    # install its default FORWARD DROP firewall rules; the testbed runs its own engine).
    policy=/usr/sbin/policy-rc.d
    restore=""
    if [[ -e $policy ]]; then restore=$(mktemp); cp -p "$policy" "$restore"; fi
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"
    trap 'if [[ -n $restore ]]; then mv "$restore" "$policy"; else rm -f "$policy"; fi' EXIT
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # On machines with systemd the engine may still be enabled by socket activation:
    # stop and disable only units that this installation brought in.
    if [[ " ${missing[*]} " == *" docker.io "* ]] && command -v systemctl >/dev/null \
            && [[ -d /run/systemd/system ]]; then
        systemctl disable --now docker.socket docker.service >/dev/null 2>&1 || true
    fi
    if [[ " ${missing[*]} " == *" openvswitch-switch "* ]] && command -v systemctl >/dev/null \
            && [[ -d /run/systemd/system ]]; then
        systemctl disable --now openvswitch-switch.service >/dev/null 2>&1 || true
    fi
fi

# The frame and face workloads read opencv-doc's sample media. Minimal images often tell
# dpkg to drop /usr/share/doc/* (path-exclude): then the package is "installed" without its
# files, so check the files and reinstall with that folder re-included.
media=/usr/share/doc/opencv-doc/examples/data
if [[ ! -f $media/vtest.avi || ! -f $media/messi5.jpg ]]; then
    echo "setup.sh: opencv-doc's sample media missing from $media; reinstalling it"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --no-install-recommends \
        -o Dpkg::Options::="--path-include=/usr/share/doc/opencv-doc/*" opencv-doc >/dev/null
    if [[ ! -f $media/vtest.avi || ! -f $media/messi5.jpg ]]; then
        echo "setup.sh: $media/vtest.avi still missing after reinstalling opencv-doc" >&2
        exit 1
    fi
fi

# Debian's Python, so containers that bind-mount the host's /usr run the same interpreter.
if [[ ! -x .venv/bin/python ]]; then
    /usr/bin/python3 -m venv .venv
fi
stamp=.venv/.installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test]'
    touch "$stamp"
fi
# The compiled link shaper (the delayer's fast data path). A failed build is not fatal:
# it prints one line and the delayer relays frames in Python.
.venv/bin/python -m testbed.emulation.shaper.build | sed 's/^/setup.sh: /' || true
echo "setup.sh: ready (.venv/bin/testbed)"
