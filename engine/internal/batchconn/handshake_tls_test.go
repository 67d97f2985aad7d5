package batchconn

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDialWSS: a wss:// URL is dialled over TLS, verified against the system roots (here the
// test server's certificate through SSL_CERT_FILE, which Go reads once per process: no other
// test in this package may verify a certificate first), and messages go both ways on it.
func TestDialWSS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		_, msg, err := c.ReadMessage(nil, nil)
		if err != nil {
			return
		}
		_ = c.WriteText([][]byte{append([]byte("echo: "), msg...)}, false)
	}))
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)
	t.Setenv("SSL_CERT_DIR", t.TempDir())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "wss://" + strings.TrimPrefix(srv.URL, "https://")
	c, err := Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("Dial(%s): %v", url, err)
	}
	defer c.Close()
	if err := c.WriteText([][]byte{[]byte("hello")}, true); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.ReadMessage(nil, nil)
	if err != nil || string(msg) != "echo: hello" {
		t.Fatalf("ReadMessage = %q, %v; want %q", msg, err, "echo: hello")
	}
}
