package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// netProbe is the child of TestNetGuard: for each "kind:address" of targets (space-separated) it
// tries the system call qemu's user-mode network makes and prints "<target> ok" or
// "<target> error: ...".
func netProbe(targets string) int {
	for _, t := range strings.Fields(targets) {
		kind, addr, _ := strings.Cut(t, ":")
		var err error
		switch kind {
		case "tcp": // connect
			var c net.Conn
			if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
				c.Close()
			}
		case "unix": // connect
			var c net.Conn
			if c, err = net.Dial("unix", addr); err == nil {
				c.Close()
			}
		case "dns", "dnsmsg": // a DNS query sent with sendto or sendmsg: dns:NAME@ADDR:PORT
			name, dst, _ := strings.Cut(addr, "@")
			q, to := query(0x0100, 1, 0, 0, strings.Split(name, ".")...), netip.MustParseAddrPort(dst)
			var fd int
			if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err == nil {
				sa := &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}
				if kind == "dns" {
					err = unix.Sendto(fd, q, 0, sa)
				} else {
					_, err = unix.SendmsgBuffers(fd, [][]byte{q[:5], q[5:]}, nil, sa, 0) // the query in two iovecs
				}
				unix.Close(fd)
			}
		case "udp", "udpmsg": // sendto, sendmsg with a destination
			var c *net.UDPConn
			if c, err = net.ListenUDP("udp4", nil); err == nil {
				dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr))
				if kind == "udp" {
					_, err = c.WriteToUDP([]byte("probe"), dst)
				} else {
					_, _, err = c.WriteMsgUDP([]byte("probe"), nil, dst)
				}
				c.Close()
			}
		}
		if err != nil {
			fmt.Printf("%s error: %v\n", t, err)
		} else {
			fmt.Printf("%s ok\n", t)
		}
	}
	return 0
}

// hostAddr4 is an IPv4 address of this host on a network interface, if it has one.
func hostAddr4() (netip.Addr, bool) {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// TestNetGuard starts a process the way the driver starts a networked machine's qemu and checks
// what its system calls reach: the host's loopback is refused (connect: connection refused; UDP
// sendto and sendmsg: permission denied) except for the granted address and port; local sockets
// and the host's address on a network interface are reached.
func TestNetGuard(t *testing.T) {
	listen := func(addr string) string { return acceptAll(t, addr) }
	denied, granted := listen("127.0.0.1:0"), listen("127.0.0.1:0")
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	sock := filepath.Join(t.TempDir(), "s.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()

	want := map[string]string{
		"tcp:" + denied:                      "connection refused",
		"tcp:" + granted:                     "ok",
		"udp:" + udp.LocalAddr().String():    "permission denied",
		"udpmsg:" + udp.LocalAddr().String(): "permission denied",
		"unix:" + sock:                       "ok",
	}
	if ip, ok := hostAddr4(); ok {
		want["tcp:"+listen(netip.AddrPortFrom(ip, 0).String())] = "ok"
		want["udp:"+netip.AddrPortFrom(ip, 9).String()] = "ok"
	} else {
		t.Log("this host has no IPv4 address on a network interface: the outside is not probed")
	}
	pol := &netPolicy{grants: []netip.AddrPort{netip.MustParseAddrPort(granted)}}
	probe(t, pol, want)
}

// TestNetGuardEgress starts a process under the guard with a policy and checks its system calls:
// a connection to the allowed address and port reaches it, one to another port of the same
// address is refused; a DNS query (sendto, and sendmsg with the query in two pieces) to a
// resolver for an allowed name arrives there, one for a name the policy does not allow fails
// with permission denied and never arrives.
func TestNetGuardEgress(t *testing.T) {
	ip, ok := hostAddr4()
	if !ok {
		t.Fatal("this host has no IPv4 address on a network interface to serve the allowed and refused ports on")
	}
	serve := func() string { return acceptAll(t, netip.AddrPortFrom(ip, 0).String()) }
	allowed, refused := serve(), serve()
	// The fake resolver listens on loopback (the host's resolver of resolv.conf, as slirp
	// forwards the guest's DNS there) on a port of its own.
	res, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	resAddr := netip.MustParseAddrPort(res.LocalAddr().String())
	got := make(chan string, 8)
	go func() {
		buf := make([]byte, 512)
		for {
			n, _, err := res.ReadFromUDP(buf)
			if err != nil {
				return
			}
			name, _ := dnsQuestion(buf[:n])
			got <- name
		}
	}()

	want := map[string]string{
		"tcp:" + allowed: "ok",
		"tcp:" + refused: "connection refused",
		"dns:api.example.com@" + resAddr.String():       "ok",
		"dnsmsg:www.example.com@" + resAddr.String():    "ok",
		"dns:denied.example.org@" + resAddr.String():    "permission denied",
		"dnsmsg:denied.example.org@" + resAddr.String(): "permission denied",
		"udp:" + resAddr.String():                       "permission denied", // not a query
	}
	_, e, err := vm.ParseNetwork("network", map[string]any{"allow": []any{allowed, "*.example.com:443"}})
	if err != nil {
		t.Fatal(err)
	}
	pol := &netPolicy{
		dns: []netip.AddrPort{resAddr}, resolvers: []netip.Addr{resAddr.Addr()}, queryPort: resAddr.Port(),
		egress: []*vm.Egress{e}, names: newNameCache(),
	}
	pol.names.lookup = func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("offline") }
	probe(t, pol, want)
	arrived := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for len(arrived) < 2 {
		select {
		case n := <-got:
			arrived[n] = true
		case <-deadline:
			t.Fatalf("the resolver received %v, want api.example.com and www.example.com", arrived)
		}
	}
	if !arrived["api.example.com"] || !arrived["www.example.com"] {
		t.Fatalf("the resolver received %v", arrived)
	}
	select {
	case n := <-got:
		t.Fatalf("the resolver also received %q", n)
	default:
	}
}

// probe runs this test binary as a child under pol's network guard, trying each target of want
// (TestMain in lifetime_test.go runs them), and checks each one's outcome: "ok" or the end of its error.
func probe(t *testing.T, pol *netPolicy, want map[string]string) {
	t.Helper()
	var targets []string
	for k := range want {
		targets = append(targets, k)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "probe.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	os.Setenv("III_NETGUARD_PROBE", strings.Join(targets, " "))
	p, err := startNetProc("probe", []string{exe}, log, pol)
	os.Unsetenv("III_NETGUARD_PROBE")
	if err != nil {
		t.Fatal(err)
	}
	if !p.waitFor(30 * time.Second) {
		p.kill()
		t.Fatal("the probe did not finish in 30 s")
	}
	out, _ := os.ReadFile(log.Name())
	for target, w := range want {
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, target+" ") {
				line = l
			}
		}
		if w == "ok" && line != target+" ok" || w != "ok" && !strings.HasSuffix(line, w) {
			t.Errorf("%s: got %q, want %s\n%s", target, line, w, out)
		}
	}
}

// acceptAll listens on addr until the test ends, closing every connection it accepts, and
// returns the address it listens on.
func acceptAll(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}
