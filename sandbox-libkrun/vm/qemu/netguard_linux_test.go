package qemu

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	listen := func(addr string) string {
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
	pol := &netPolicy{grants: []netip.AddrPort{netip.MustParseAddrPort(granted)}}
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
