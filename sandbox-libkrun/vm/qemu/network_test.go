//go:build linux

package qemu

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestNetwork reaches a server on the host's loopback from the guest through the user-mode
// network's gateway, and checks that a machine without network has none.
func TestNetwork(t *testing.T) {
	d := newDriver(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "from host") })}
	go srv.Serve(ln)
	defer srv.Close()
	// busybox nc, not wget: Debian's static busybox wget crashes even on the host.
	get := fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 10 10.0.2.2 %d", ln.Addr().(*net.TCPAddr).Port)
	root := busyboxRoot(t)

	m := boot(t, d, vm.Spec{RootFS: root, Network: true})
	res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", get}})
	if code(res) != 0 || !strings.HasSuffix(string(res.Stdout), "from host") {
		t.Fatalf("with network: exit %d %q %q", code(res), res.Stdout, res.Stderr)
	}
	off := boot(t, d, vm.Spec{RootFS: root})
	res = run(t, off, vm.ExecRequest{Argv: []string{"sh", "-c", strings.Replace(get, "-w 10", "-w 2", 1)}})
	if code(res) == 0 || strings.Contains(string(res.Stdout), "from host") {
		t.Fatalf("without network: exit %d %q", code(res), res.Stdout)
	}
}
