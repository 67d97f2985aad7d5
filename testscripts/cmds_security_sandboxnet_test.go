package testscripts

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("tcplisten", cmdTCPListen)
}

// tcplisten [-nonloopback] HOSTVAR PORTVAR LOG: listen on a free TCP port of 127.0.0.1 (with
// -nonloopback: of the host's first IPv4 address on a network interface, failing when it has
// none) until the script ends; set HOSTVAR and PORTVAR to its address and port. Each accepted
// connection appends "accepted <remote address>" to LOG, is sent "hello" and closed.
func cmdTCPListen(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("tcplisten", flag.ContinueOnError)
	nonLoopback := fs.Bool("nonloopback", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 3 || neg {
		ts.Fatalf("usage: tcplisten [-nonloopback] HOSTVAR PORTVAR LOG")
	}
	host := netip.MustParseAddr("127.0.0.1")
	if *nonLoopback {
		var ok bool
		if host, ok = hostNetworkAddr4(); !ok {
			ts.Fatalf("tcplisten -nonloopback: this host has no IPv4 address on a network interface")
		}
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(host, 0).String())
	ts.Check(err)
	ts.Defer(func() { ln.Close() })
	logPath := ts.MkAbs(fs.Arg(2))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintf(f, "accepted %s\n", c.RemoteAddr())
				f.Close()
			}
			_, _ = c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	ts.Setenv(fs.Arg(0), host.String())
	ts.Setenv(fs.Arg(1), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
}

// hostNetworkAddr4 is the host's first IPv4 address on a network interface (not loopback, not
// link-local).
func hostNetworkAddr4() (netip.Addr, bool) {
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
