//go:build linux

package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestDialUnsupported: a machine whose agent predates revision 10 dials nothing.
func TestDialUnsupported(t *testing.T) {
	for _, agent := range []string{"", "iii-guest/9"} {
		m := &machine{agent: agent}
		if m.Dials() {
			t.Errorf("agent %q dials", agent)
		}
		if _, err := m.DialGuest(context.Background(), 80); !errors.Is(err, vm.ErrDialUnsupported) {
			t.Errorf("agent %q: %v, want ErrDialUnsupported", agent, err)
		}
	}
}

// TestDialGuest: a machine without networking relays connections to servers its guest runs on
// loopback: an HTTP server's 5 MiB answer whole, a half-closed exchange with an echo server,
// and a port nothing listens on as a *vm.DialError.
func TestDialGuest(t *testing.T) {
	root := procRoot(t)
	for _, app := range []string{"httpd"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", app)); err != nil {
			t.Fatal(err)
		}
	}
	d := newDriver(t)
	m := boot(t, d, vm.Spec{RootFS: root, MemoryMB: 512})
	dm, ok := m.(vm.Dialer)
	if !ok || !dm.Dials() {
		t.Fatal("the qemu machine does not dial")
	}
	pm := m.(vm.Processes)
	ctx := context.Background()
	const size = 5 << 20
	run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("mkdir -p /tmp/www && dd if=/dev/zero bs=1048576 count=%d 2>/dev/null | tr '\\0' x > /tmp/www/big", size>>20)}})
	for _, argv := range [][]string{
		{"httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/tmp/www"},
		{"nc", "-ll", "-p", "9000", "-e", "cat"},
	} {
		if _, _, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: argv}, nil); err != nil {
			t.Fatal(err)
		}
	}

	// A DialError (nothing listens yet) is retried; any other error fails at once.
	dial := func(port int) net.Conn {
		var c net.Conn
		var err error
		if !enginetest.Poll(20*time.Second, func() bool {
			c, err = dm.DialGuest(ctx, port)
			var de *vm.DialError
			if err != nil && !errors.As(err, &de) {
				t.Fatalf("dial %d: %v", port, err)
			}
			return err == nil
		}) {
			t.Fatalf("dial %d: %v", port, err)
		}
		return c
	}

	c := dial(8000)
	start := time.Now()
	if _, err := io.WriteString(c, "GET /big HTTP/1.0\r\nHost: guest\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := io.ReadAll(c)
	c.Close()
	el := time.Since(start)
	head, body, _ := bytes.Cut(res, []byte("\r\n\r\n"))
	if err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.")) || !bytes.Contains(head, []byte(" 200 ")) || len(body) != size || bytes.Count(body, []byte("x")) != size {
		t.Fatalf("GET /big: %v, head %q, body %d bytes", err, head, len(body))
	}
	t.Logf("5 MiB GET through the guest agent's relay in %s: %.1f MB/s", el.Round(time.Millisecond), float64(size)/el.Seconds()/1e6)

	e := dial(9000)
	msg := strings.Repeat("echo me, half-closed\n", 1000)
	if _, err := io.WriteString(e, msg); err != nil {
		t.Fatal(err)
	}
	if err := e.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = e.SetReadDeadline(time.Now().Add(30 * time.Second))
	back, err := io.ReadAll(e)
	e.Close()
	if err != nil || string(back) != msg {
		t.Fatalf("echo: %d bytes of %d, %v", len(back), len(msg), err)
	}

	_, err = dm.DialGuest(ctx, 7)
	var de *vm.DialError
	if !errors.As(err, &de) || de.Port != 7 {
		t.Fatalf("dial of a closed port: %v", err)
	}
}
