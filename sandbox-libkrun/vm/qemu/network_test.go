//go:build linux

package qemu

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestNetwork: a guest with networking reaches the outside (here the host's own address on a
// network interface, where a server listens for the network) but not the host's loopback
// through its gateway 10.0.2.2, except the loopback address and port its spec grants (a VM
// worker's engine); a machine without network has none.
func TestNetwork(t *testing.T) {
	d := newDriver(t)
	serve := func(addr string) int {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "from host") })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	// busybox nc, not wget: Debian's static busybox wget crashes even on the host.
	get := func(host string, port int) []string {
		return []string{"sh", "-c", fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 10 %s %d", host, port)}
	}
	reached := func(res vm.ExecResult) bool {
		return code(res) == 0 && strings.HasSuffix(string(res.Stdout), "from host")
	}
	loopback, engine := serve("127.0.0.1:0"), serve("127.0.0.1:0")
	root := busyboxRoot(t)

	worker := boot(t, d, vm.Spec{RootFS: root, Network: true,
		HostAccess: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(engine))}})
	if res := run(t, worker, vm.ExecRequest{Argv: get("10.0.2.2", engine)}); !reached(res) {
		t.Fatalf("granted 127.0.0.1:%d through 10.0.2.2: exit %d %q %q", engine, code(res), res.Stdout, res.Stderr)
	}
	if res := run(t, worker, vm.ExecRequest{Argv: get("10.0.2.2", loopback)}); reached(res) {
		t.Fatalf("the host's loopback port %d, not granted, was reached through 10.0.2.2: %q", loopback, res.Stdout)
	}
	if ip, ok := hostAddr4(); ok {
		outside := serve(netip.AddrPortFrom(ip, 0).String())
		if res := run(t, worker, vm.ExecRequest{Argv: get(ip.String(), outside)}); !reached(res) {
			t.Fatalf("the host's network address %s:%d: exit %d %q %q", ip, outside, code(res), res.Stdout, res.Stderr)
		}
	} else {
		t.Log("this host has no IPv4 address on a network interface: the outside is not probed")
	}

	sandbox := boot(t, d, vm.Spec{RootFS: root, Network: true})
	for _, port := range []int{loopback, engine} {
		if res := run(t, sandbox, vm.ExecRequest{Argv: get("10.0.2.2", port)}); reached(res) {
			t.Fatalf("a guest granted nothing reached the host's loopback port %d through 10.0.2.2: %q", port, res.Stdout)
		}
	}

	off := boot(t, d, vm.Spec{RootFS: root})
	res := run(t, off, vm.ExecRequest{Argv: []string{"sh", "-c", strings.Replace(get("10.0.2.2", loopback)[2], "-w 10", "-w 2", 1)}})
	if code(res) == 0 || strings.Contains(string(res.Stdout), "from host") {
		t.Fatalf("without network: exit %d %q", code(res), res.Stdout)
	}
}
