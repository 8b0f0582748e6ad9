"""The project's SDN controller application: an OpenFlow 1.3 L2 learning switch for os-ken.

Behaviour, per datapath (switch):

* on connection, one table-miss entry (priority 0, match all) sends every packet that no
  other entry matches to the controller, unbuffered;
* every packet-in teaches the controller where its source MAC lives (MAC -> in_port);
* a packet to a known unicast MAC is forwarded there, and an entry matching
  (in_port, src MAC, dst MAC) is installed with an idle timeout so the rest of that
  conversation stays in the switch; stale locations age out with the entries;
* broadcast and multicast destinations (ARP requests, IPv6 neighbour discovery, DHCP)
  and unknown unicast destinations are flooded and never installed, so every new host
  is still seen by the controller. ARP needs nothing more: requests are broadcasts,
  replies are unicast to an already learned MAC.

LLDP frames are dropped (they are link-local, for topology discovery only).
Run it with ``python -m testbed.emulation.controller``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib.packet import ether_types, ethernet, packet
from os_ken.ofproto import ofproto_v1_3

LEARNED_PRIORITY = 10
IDLE_TIMEOUT_S = 30


def is_group_address(mac: str) -> bool:
    """True for broadcast and multicast MACs (the I/G bit of the first octet is set)."""
    return bool(int(mac.split(":", 1)[0], 16) & 1)


class LearningSwitch13(app_manager.OSKenApp):
    """L2 learning switch: learn source locations, install flows for known destinations."""

    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.locations: dict[int, dict[str, int]] = {}
        """Per datapath id: MAC address -> switch port where it was last seen."""

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_switch_features(self, ev: Any) -> None:
        """A switch connected: forget what it knew and install the table-miss entry."""
        datapath = ev.msg.datapath
        parser, ofp = datapath.ofproto_parser, datapath.ofproto
        self.locations[datapath.id] = {}
        to_controller = parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
        self._add_flow(datapath, priority=0, match=parser.OFPMatch(),
                       actions=[to_controller], idle_timeout=0)
        self.logger.info("switch %016x connected", datapath.id)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev: Any) -> None:
        """Learn the source, then forward (and maybe install) or flood the packet."""
        msg = ev.msg
        datapath = msg.datapath
        parser, ofp = datapath.ofproto_parser, datapath.ofproto
        in_port = msg.match["in_port"]
        frame = packet.Packet(msg.data).get_protocol(ethernet.ethernet)
        if frame is None or frame.ethertype == ether_types.ETH_TYPE_LLDP:
            return
        table = self.locations.setdefault(datapath.id, {})
        if not is_group_address(frame.src):
            table[frame.src] = in_port

        out_port = None if is_group_address(frame.dst) else table.get(frame.dst)
        if out_port == in_port:
            return  # the destination sits behind the port it came from: nothing to do
        if out_port is None:
            out_port = ofp.OFPP_FLOOD
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofp.OFPP_FLOOD:
            match = parser.OFPMatch(in_port=in_port, eth_src=frame.src, eth_dst=frame.dst)
            self._add_flow(datapath, LEARNED_PRIORITY, match, actions, IDLE_TIMEOUT_S)
        unbuffered = msg.buffer_id == ofp.OFP_NO_BUFFER
        datapath.send_msg(parser.OFPPacketOut(
            datapath=datapath, buffer_id=msg.buffer_id, in_port=in_port, actions=actions,
            data=msg.data if unbuffered else None))

    @staticmethod
    def _add_flow(datapath: Any, priority: int, match: Any, actions: list[Any],
                  idle_timeout: int) -> None:
        parser, ofp = datapath.ofproto_parser, datapath.ofproto
        instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        datapath.send_msg(parser.OFPFlowMod(
            datapath=datapath, priority=priority, match=match, instructions=instructions,
            idle_timeout=idle_timeout))
