package qemu

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// sockaddr4 and sockaddr6 build the raw socket addresses qemu hands the kernel.
func sockaddr4(ap netip.AddrPort) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint16(b, afInet)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	a := ap.Addr().As4()
	copy(b[4:], a[:])
	return b
}

func sockaddr6(ap netip.AddrPort) []byte {
	b := make([]byte, 28)
	binary.NativeEndian.PutUint16(b, afInet6)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	a := ap.Addr().As16()
	copy(b[8:], a[:])
	return b
}

// TestNetPolicy: the host's own addresses through loopback, in every spelling, are refused
// unless granted (port included); the outside, the host's other addresses and local sockets
// pass; truncated and unknown addresses are refused.
func TestNetPolicy(t *testing.T) {
	p := &netPolicy{
		grants: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:49134")},
		dns:    []netip.AddrPort{netip.MustParseAddrPort("127.0.0.53:53")},
		lo:     []netip.Addr{netip.MustParseAddr("10.99.0.1")},
	}
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:49134", true},  // granted: the engine of a VM worker
		{"127.0.0.1:49135", false}, // another port of the same address
		{"127.0.0.1:22", false},
		{"127.0.0.2:49134", false},
		{"127.255.255.254:80", false},
		{"0.0.0.0:49134", false},
		{"127.0.0.53:53", true}, // the host's resolver
		{"127.0.0.53:80", false},
		{"10.99.0.1:80", false}, // an address of the loopback interface
		{"192.0.2.2:80", true},  // an address of the host on a network interface
		{"10.0.2.2:80", true},   // a real host of that name outside (slirp translates before connecting)
		{"93.184.216.34:443", true},
		{"8.8.8.8:53", true},
	} {
		ap := netip.MustParseAddrPort(c.addr)
		if got := p.permits(sockaddr4(ap)); got != c.want {
			t.Errorf("AF_INET %s: permits %v, want %v", c.addr, got, c.want)
		}
		m := netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port()) // ::ffff:a.b.c.d
		if got := p.permits(sockaddr6(m)); got != c.want {
			t.Errorf("AF_INET6 %s: permits %v, want %v", m, got, c.want)
		}
	}
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"[::1]:80", false},
		{"[::1]:49134", false}, // the grant is for 127.0.0.1
		{"[::]:80", false},
		{"[::127.0.0.1]:80", false}, // IPv4-compatible
		{"[2001:db8::1]:443", true},
	} {
		if got := p.permits(sockaddr6(netip.MustParseAddrPort(c.addr))); got != c.want {
			t.Errorf("AF_INET6 %s: permits %v, want %v", c.addr, got, c.want)
		}
	}
	unix := make([]byte, 110)
	binary.NativeEndian.PutUint16(unix, afUnix)
	copy(unix[2:], "/tmp/ctrl.sock")
	if !p.permits(unix) {
		t.Error("AF_UNIX refused")
	}
	if p.permits(sockaddr4(netip.MustParseAddrPort("127.0.0.1:80"))[:6]) || p.permits(nil) {
		t.Error("truncated address permitted")
	}
	other := make([]byte, 16)
	binary.NativeEndian.PutUint16(other, 17) // AF_PACKET
	if p.permits(other) {
		t.Error("AF_PACKET permitted")
	}
}

// TestNewNetPolicy: a machine's grants are its HostAccess alone; loopback resolvers of a
// resolv.conf are found.
func TestNewNetPolicy(t *testing.T) {
	sandbox := newNetPolicy(vm.Spec{Network: true})
	if len(sandbox.grants) != 0 || sandbox.permits(sockaddr4(netip.MustParseAddrPort("127.0.0.1:49134"))) {
		t.Fatalf("a sandbox's policy grants %v", sandbox.grants)
	}
	worker := newNetPolicy(vm.Spec{Network: true, HostAccess: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:49134")}})
	if !worker.permits(sockaddr4(netip.MustParseAddrPort("127.0.0.1:49134"))) || worker.permits(sockaddr4(netip.MustParseAddrPort("127.0.0.1:49135"))) {
		t.Fatalf("a VM worker's policy: grants %v", worker.grants)
	}
	conf := t.TempDir() + "/resolv.conf"
	if err := os.WriteFile(conf, []byte("# comment\nnameserver 127.0.0.53\nnameserver 10.255.255.53\nnameserver ::1%lo\nsearch example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := resolvConfLoopback(conf)
	if len(got) != 2 || got[0] != netip.MustParseAddr("127.0.0.53") || got[1] != netip.MustParseAddr("::1") {
		t.Fatalf("loopback resolvers %v", got)
	}
}
