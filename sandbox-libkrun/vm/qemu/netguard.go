package qemu

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// netPolicy says which of the host's own loopback destinations a networked machine's qemu may
// reach. qemu's user-mode network (slirp) turns a guest's connection to its gateway 10.0.2.2
// into one from qemu to the host's 127.0.0.1 (and [::1]), and the guest's root can address any
// other loopback address in a crafted packet; qemu 7.2 has no switch to turn that off short of
// `restrict=on`, which cuts the outside too. The driver therefore checks every destination qemu
// itself connects or sends to (netguard_linux.go): a loopback or unspecified address of the host
// is refused unless granted here, and everything else (the outside, and the host's non-loopback
// addresses, which reach only what listens there for the network) is left alone.
type netPolicy struct {
	grants []netip.AddrPort // the machine's Spec.HostAccess
	dns    []netip.AddrPort // the host's resolvers on loopback, port 53
	lo     []netip.Addr     // extra addresses of the host's loopback interface

	// egress are the machine's policies (Spec.Egress): a destination must pass every one. None:
	// the outside is open. Under a policy a datagram to port 53 of one of resolvers (the
	// host's, where slirp forwards the guest's DNS, or the same address named by the guest
	// directly) passes only for a query about a name every policy answers.
	egress    []*vm.Egress
	resolvers []netip.Addr
	names     *nameCache
	queryPort uint16 // the port of DNS datagrams; 0: dnsPort
}

// dnsPort is the resolver port a host resolver on loopback is allowed at.
const dnsPort = 53

// newNetPolicy is the policy of spec: its HostAccess (a VM worker's engine), plus port 53 of each
// resolver of the host's /etc/resolv.conf that is on loopback (slirp forwards the guest's DNS at
// 10.0.2.3 there; a resolver such as systemd-resolved listens on 127.0.0.53).
func newNetPolicy(spec vm.Spec) *netPolicy {
	p := &netPolicy{grants: append([]netip.AddrPort(nil), spec.HostAccess...)}
	for _, a := range resolvConfLoopback("/etc/resolv.conf") {
		p.dns = append(p.dns, netip.AddrPortFrom(a, dnsPort))
	}
	if len(spec.Egress) > 0 {
		p.egress = spec.Egress
		p.resolvers = resolvConfServers("/etc/resolv.conf")
		p.names = newNameCache()
	}
	if lo, err := net.InterfaceByName("lo"); err == nil {
		if addrs, err := lo.Addrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						p.lo = append(p.lo, ip.Unmap())
					}
				}
			}
		}
	}
	return p
}

// resolvConfLoopback returns the loopback nameservers of a resolv.conf.
func resolvConfLoopback(path string) []netip.Addr {
	var out []netip.Addr
	for _, a := range resolvConfServers(path) {
		if a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}

// resolvConfServers returns the nameservers of a resolv.conf.
func resolvConfServers(path string) []netip.Addr {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(strings.SplitN(fields[1], "%", 2)[0])
		if err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// hostOnly reports whether a names the host itself through loopback: 127/8, ::1, the
// unspecified addresses (a connect to 0.0.0.0 reaches the local host), their IPv4-mapped and
// IPv4-compatible forms, and any other address of the loopback interface.
func (p *netPolicy) hostOnly(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	if a.Is6() {
		if b := a.As16(); [12]byte(b[:12]) == [12]byte{} {
			if v4 := netip.AddrFrom4([4]byte(b[12:])); v4.IsLoopback() || v4.IsUnspecified() {
				return true
			}
		}
	}
	for _, l := range p.lo {
		if l == a {
			return true
		}
	}
	return false
}

// The address families a socket address may have (Linux values; sa_family is host-endian).
const (
	afUnspec  = 0
	afUnix    = 1
	afInet    = 2
	afNetlink = 16
	afInet6   = 10
)

// permits reports whether qemu may send a datagram to the raw socket address sa with nothing to
// show of its payload (see permitsCall).
func (p *netPolicy) permits(sa []byte) bool { return p.permitsCall(sa, false, nil) }

// permitsCall reports whether qemu may connect (stream) or send a datagram to the raw socket
// address sa (struct sockaddr as qemu passed it); payload reads the datagram, for the DNS check.
// Local sockets (the agent's port, virtiofsd, the monitor) and netlink pass; an IP address
// passes unless it is the host's own through loopback and not granted, or the machine's
// policies refuse it; a truncated address or any other family is refused.
func (p *netPolicy) permitsCall(sa []byte, stream bool, payload func() []byte) bool {
	if len(sa) < 2 {
		return false
	}
	switch binary.NativeEndian.Uint16(sa) {
	case afUnix, afUnspec, afNetlink:
		return true
	case afInet:
		if len(sa) < 8 {
			return false
		}
		return p.permitsIP(netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), binary.BigEndian.Uint16(sa[2:4])), stream, payload)
	case afInet6:
		if len(sa) < 24 {
			return false
		}
		return p.permitsIP(netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])), binary.BigEndian.Uint16(sa[2:4])), stream, payload)
	}
	return false
}

func (p *netPolicy) permitsIP(ap netip.AddrPort, stream bool, payload func() []byte) bool {
	if len(p.egress) > 0 && ap.Port() == cmp.Or(p.queryPort, dnsPort) && !stream && (slices.Contains(p.resolvers, ap.Addr().Unmap()) || !p.hostOnly(ap.Addr()) && p.egressPermits(ap)) {
		return p.permitsQuery(payload)
	}
	if !p.hostOnly(ap.Addr()) {
		if len(p.egress) == 0 {
			return true
		}
		if ap.Port() == dnsPort && stream {
			for _, e := range p.egress {
				if !e.PermitsTCPDNS(ap, p.names) {
					return false
				}
			}
			return true
		}
		return p.egressPermits(ap)
	}
	a := ap.Addr().Unmap()
	for _, list := range [][]netip.AddrPort{p.grants, p.dns} {
		for _, ok := range list {
			if ok.Addr().Unmap() == a && ok.Port() == ap.Port() {
				return true
			}
		}
	}
	return false
}

// egressPermits reports whether every policy of the machine lets it reach ap.
func (p *netPolicy) egressPermits(ap netip.AddrPort) bool {
	for _, e := range p.egress {
		if !e.Permits(ap, p.names) {
			return false
		}
	}
	return true
}

// permitsQuery reports whether the datagram payload reads is a DNS query about a name every
// policy answers; such a name is then resolved on the host, so that its addresses (for a
// wildcard entry, those of the names under it the guest asked about) are known at the guest's
// connect. A datagram that is not a well-formed query is refused.
func (p *netPolicy) permitsQuery(payload func() []byte) bool {
	if payload == nil {
		return false
	}
	name, ok := dnsQuestion(payload())
	if !ok {
		return false
	}
	for _, e := range p.egress {
		if !e.PermitsName(name) {
			return false
		}
	}
	if name != "" {
		p.names.learn(name)
	}
	return true
}
