package batchconn

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echoHandler answers one message per connection with "echo: " and the message.
var echoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
})

// echoServer serves echoHandler on plain HTTP.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(echoHandler)
	t.Cleanup(srv.Close)
	return srv
}

// TestDialWSS: a wss:// URL is dialled over TLS, verified against the system roots (here the
// test server's certificate through SSL_CERT_FILE, which Go reads once per process: no other
// test in this package may verify a certificate first), and messages go both ways on it.
func TestDialWSS(t *testing.T) {
	srv := httptest.NewTLSServer(echoHandler)
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)
	t.Setenv("SSL_CERT_DIR", t.TempDir())
	if err := roundTrip(t, "wss://"+strings.TrimPrefix(srv.URL, "https://")); err != nil {
		t.Fatal(err)
	}
}

// connectProxy is an HTTP proxy that tunnels CONNECT requests carrying auth (when set) and
// counts them.
func connectProxy(t *testing.T, auth string, tunnels *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		if auth != "" && r.Header.Get("Proxy-Authorization") != auth {
			http.Error(w, "who are you", http.StatusProxyAuthRequired)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		tunnels.Add(1)
		down, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { _, _ = io.Copy(up, down); up.Close() }()
		_, _ = io.Copy(down, up)
		down.Close()
	}))
	t.Cleanup(srv.Close)
	return srv
}

func useProxy(t *testing.T, proxy string) {
	t.Helper()
	u, err := url.Parse(proxy)
	if err != nil {
		t.Fatal(err)
	}
	old := proxyFor
	proxyFor = func(*http.Request) (*url.URL, error) { return u, nil }
	t.Cleanup(func() { proxyFor = old })
}

func roundTrip(t *testing.T, wsURL string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, wsURL, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.WriteText([][]byte{[]byte("hello")}, true); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.ReadMessage(nil, nil)
	if err != nil || string(msg) != "echo: hello" {
		t.Fatalf("ReadMessage = %q, %v; want %q", msg, err, "echo: hello")
	}
	return nil
}

// TestDialThroughProxy: with a proxy named, the connection is a CONNECT tunnel through it,
// with the proxy's credentials when its URL has them.
func TestDialThroughProxy(t *testing.T) {
	target := "ws://" + strings.TrimPrefix(echoServer(t).URL, "http://")
	var tunnels atomic.Int32
	p := connectProxy(t, "Basic dXNlcjpwYXNz", &tunnels) // user:pass
	useProxy(t, strings.Replace(p.URL, "http://", "http://user:pass@", 1))
	if err := roundTrip(t, target); err != nil {
		t.Fatal(err)
	}
	if n := tunnels.Load(); n != 1 {
		t.Fatalf("%d tunnels through the proxy, want 1", n)
	}
}

// TestDialProxyRefuses: a proxy's refusal and an unsupported proxy scheme are errors that name
// the proxy (without its password) and what to do.
func TestDialProxyRefuses(t *testing.T) {
	target := "ws://" + strings.TrimPrefix(echoServer(t).URL, "http://")
	var tunnels atomic.Int32
	p := connectProxy(t, "Basic other", &tunnels)
	useProxy(t, strings.Replace(p.URL, "http://", "http://user:s3cret@", 1))
	err := roundTrip(t, target)
	if err == nil || !strings.Contains(err.Error(), "407") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("refused by the proxy: %v", err)
	}
	useProxy(t, "socks5://127.0.0.1:1080")
	err = roundTrip(t, target)
	if err == nil || !strings.Contains(err.Error(), "NO_PROXY") {
		t.Fatalf("socks5 proxy: %v", err)
	}
}
