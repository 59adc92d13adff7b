package cm

import (
	"net/netip"

	"github.com/goverbs/goverbs/verbs"
)

// AHAttr is the address vector from the agent's device to peer (the address of a
// Request's Remote, say): the destination GID is peer's (verbs.GIDFromAddr), the source
// the agent's own GID, port 1, hop limit 64. The source's GID index is 0 on a software
// device, but on a kernel device it is the table entry of the agent's address (rxe
// lists an IPv6 link-local GID at 0 and the IPv4 RoCE v2 GID at 1), which is why a
// program answering a CM peer's datagrams should make its AH from this rather than by
// hand. The AHs and QPs the CM itself makes already use it.
func (a *Agent) AHAttr(peer netip.Addr) verbs.AHAttr {
	return verbs.AHAttr{DGID: verbs.GIDFromAddr(peer.Unmap()), SGIDIndex: a.gidIndex, Port: 1, HopLimit: hopLimit}
}
