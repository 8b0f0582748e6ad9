"""Keep another engine's firewall from dropping traffic across the harness's bridges.

With ``br_netfilter`` loaded and ``net.bridge.bridge-nf-call-iptables = 1``, frames
switched by a Linux bridge traverse the iptables FORWARD chain. A default Docker engine
(not the harness's own) sets that chain's policy to DROP, so a Linux-bridge switch
silently stops forwarding IPv4. :func:`guard_bridges` detects that state and inserts one
ACCEPT rule per harness bridge, at the top of FORWARD, matching only traffic that
enters and leaves that same bridge. Each rule is written in the run ledger (kind
``iptables``) and removed at teardown; nothing else in the firewall is touched.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.emulation.ledger import Entry, Ledger
from testbed.errors import EmulationError

BRIDGE_NF_SYSCTL = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True,
                          check=False)


def bridges_filtered() -> bool:
    """True when bridged IPv4 frames pass through iptables (br_netfilter is active)."""
    try:
        return BRIDGE_NF_SYSCTL.read_text().strip() == "1"
    except OSError:
        return False


def forward_may_drop() -> bool:
    """True when the FORWARD chain may drop forwarded traffic: a non-ACCEPT policy, or a
    DROP/REJECT rule in the chain itself."""
    listed = _iptables("-t", "filter", "-S", "FORWARD")
    if listed.returncode != 0:
        raise EmulationError(f"cannot read the FORWARD chain: {listed.stderr.strip()}")
    for line in listed.stdout.splitlines():
        words = line.split()
        if words[:2] == ["-P", "FORWARD"] and words[2:3] != ["ACCEPT"]:
            return True
        if words[:1] == ["-A"] and any(words[i:i + 2] in (["-j", "DROP"], ["-j", "REJECT"])
                                       for i in range(len(words))):
            return True
    return False


def bridge_rule(bridge: str, run_id: str) -> list[str]:
    """The rule (argv after ``-I FORWARD``) that lets traffic cross ``bridge``."""
    return ["-i", bridge, "-o", bridge, "-m", "comment", "--comment",
            f"edge-testbed {run_id}", "-j", "ACCEPT"]


def guard_bridges(ledger: Ledger, bridge_names: list[str]) -> list[Entry]:
    """Insert ACCEPT rules for exactly ``bridge_names`` when the firewall would drop
    their traffic; return the ledger entries (empty when no rule was needed)."""
    if not bridge_names or not (bridges_filtered() and forward_may_drop()):
        return []
    entries = []
    for bridge in bridge_names:
        rule = bridge_rule(bridge, ledger.run_id)
        if _iptables("-t", "filter", "-C", "FORWARD", *rule).returncode == 0:
            continue  # this run guarded that bridge already
        inserted = _iptables("-t", "filter", "-I", "FORWARD", "1", *rule)
        if inserted.returncode != 0:
            raise EmulationError(f"cannot insert FORWARD ACCEPT rule for bridge {bridge}: "
                                 f"{inserted.stderr.strip()}")
        entries.append(ledger.record("iptables", table="filter", chain="FORWARD",
                                     rule=rule))
    return entries
