package qemu

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// egressPolicy parses a policy of allow and deny entries.
func egressPolicy(t *testing.T, allow, deny []string) *vm.Egress {
	t.Helper()
	m := map[string]any{}
	for k, list := range map[string][]string{"allow": allow, "deny": deny} {
		var l []any
		for _, s := range list {
			l = append(l, s)
		}
		m[k] = l
	}
	_, e, err := vm.ParseNetwork("network", m)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// fakeNames is a name cache answering from a table, counting lookups.
func fakeNames(table map[string][]netip.Addr, lookups *int) *nameCache {
	c := newNameCache()
	c.lookup = func(_ context.Context, name string) ([]netip.Addr, error) {
		*lookups++
		if a, ok := table[name]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	return c
}

// TestNetPolicyEgress: under a policy, connections and datagrams pass only to what it permits;
// a datagram to a resolver passes only as a query about an allowed name (whichever address of
// the resolver the guest names); DNS over TCP needs an IP entry; the host's loopback stays
// closed whatever the policy says; a wildcard reaches the addresses the host resolves the
// names the guest looked up to.
func TestNetPolicyEgress(t *testing.T) {
	var lookups int
	p := &netPolicy{
		dns:       []netip.AddrPort{netip.MustParseAddrPort("127.0.0.53:53")},
		resolvers: []netip.Addr{netip.MustParseAddr("127.0.0.53"), netip.MustParseAddr("10.255.255.53")},
		egress:    []*vm.Egress{egressPolicy(t, []string{"192.0.2.2:8080", "*.example.com:443", "127.0.0.1:80", "198.51.100.53"}, []string{"bad.example.com"})},
		names:     fakeNames(map[string][]netip.Addr{"api.example.com": {netip.MustParseAddr("203.0.113.10")}}, &lookups),
	}
	q := func(name string) func() []byte {
		return func() []byte {
			var labels []string
			for l := range splitDots(name) {
				labels = append(labels, l)
			}
			return query(0x0100, 1, 0, 0, labels...)
		}
	}
	for _, c := range []struct {
		what    string
		ap      string
		stream  bool
		payload func() []byte
		want    bool
	}{
		{"allowed address and port", "192.0.2.2:8080", true, nil, true},
		{"another port", "192.0.2.2:8081", true, nil, false},
		{"an address no entry names", "203.0.113.1:443", true, nil, false},
		{"the host's loopback, though allowed", "127.0.0.1:80", true, nil, false},
		{"a wildcard's address before any lookup", "203.0.113.10:443", true, nil, false},
		{"an allowed name at the resolver", "10.255.255.53:53", false, q("api.example.com"), true},
		{"an allowed name at the loopback resolver", "127.0.0.53:53", false, q("api.example.com"), true},
		{"a wildcard's address once looked up", "203.0.113.10:443", true, nil, true},
		{"its other port", "203.0.113.10:80", true, nil, false},
		{"a denied name", "10.255.255.53:53", false, q("bad.example.com"), false},
		{"a name no entry allows", "10.255.255.53:53", false, q("example.org"), false},
		{"the same at the loopback resolver", "127.0.0.53:53", false, q("example.org"), false},
		{"a malformed query", "10.255.255.53:53", false, func() []byte { return []byte("probe") }, false},
		{"an unreadable datagram", "10.255.255.53:53", false, nil, false},
		{"an allowed name at a resolver no entry names", "8.8.8.8:53", false, q("api.example.com"), false},
		{"an allowed name at a resolver an IP entry names", "198.51.100.53:53", false, q("api.example.com"), true},
		{"DNS over TCP to the resolver", "10.255.255.53:53", true, nil, false},
		{"DNS over TCP to an IP entry", "198.51.100.53:53", true, nil, true},
		{"the resolver on another port", "10.255.255.53:54", false, nil, false},
		{"a private address", "10.1.1.1:443", true, nil, false},
	} {
		ap := netip.MustParseAddrPort(c.ap)
		if got := p.permitsCall(sockaddr4(ap), c.stream, c.payload); got != c.want {
			t.Errorf("%s (%s): permitted %v, want %v", c.what, c.ap, got, c.want)
		}
	}
	if lookups != 2 {
		t.Errorf("the host made %d lookups, want 2 (api.example.com and the denied name, each once)", lookups)
	}
}

// splitDots yields the labels of a dotted name.
func splitDots(name string) func(func(string) bool) {
	return func(yield func(string) bool) {
		start := 0
		for i := 0; i <= len(name); i++ {
			if i == len(name) || name[i] == '.' {
				if !yield(name[start:i]) {
					return
				}
				start = i + 1
			}
		}
	}
}

// TestNameCache: answers are kept for nameTTL, failures for nameFailTTL; an exact rule resolves
// its own name, a wildcard only the names learned under it.
func TestNameCache(t *testing.T) {
	var lookups int
	now := time.Unix(1000, 0)
	c := fakeNames(map[string][]netip.Addr{"a.example.com": {netip.MustParseAddr("::ffff:203.0.113.1")}, "example.com": {netip.MustParseAddr("203.0.113.2")}}, &lookups)
	c.now = func() time.Time { return now }
	exact, _ := vm.ParseEgressRule("a.example.com")
	wild, _ := vm.ParseEgressRule("*.example.com")
	if got := c.Addrs(exact); len(got) != 1 || got[0] != netip.MustParseAddr("203.0.113.1") {
		t.Fatalf("exact: %v", got)
	}
	if got := c.Addrs(wild); len(got) != 0 {
		t.Fatalf("a wildcard before any lookup: %v", got)
	}
	c.learn("example.com") // not under the wildcard
	c.learn("a.example.com")
	if got := c.Addrs(wild); len(got) != 1 || got[0] != netip.MustParseAddr("203.0.113.1") {
		t.Fatalf("wildcard: %v", got)
	}
	if lookups != 2 {
		t.Fatalf("%d lookups, want 2", lookups)
	}
	c.resolve("nx.example.com")
	c.resolve("nx.example.com")
	now = now.Add(nameFailTTL + time.Second)
	c.resolve("nx.example.com")
	c.resolve("a.example.com")
	now = now.Add(nameTTL)
	c.resolve("a.example.com")
	if lookups != 5 {
		t.Fatalf("%d lookups, want 5", lookups)
	}
}
