package core

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// rawHandshake sends a WebSocket upgrade request for path with the given Host and Origin (none
// when empty) to addr and returns the response status code and body.
func rawHandshake(t *testing.T, addr, path, host, origin string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	if origin != "" {
		req += "Origin: " + origin + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp.StatusCode, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHandshakeOriginAndHost: a browser page of another origin, and a Host that is not a
// loopback name on a loopback listener (DNS rebinding), are refused on the engine endpoint and
// on the channel endpoint alike; SDK-style handshakes without Origin pass.
func TestHandshakeOriginAndHost(t *testing.T) {
	url := enginetest.Start(t, New(Options{AllowedOrigins: []string{"http://localhost:3000", "*.trusted.example"}})).URL
	addr := strings.TrimPrefix(url, "ws://")
	w := enginetest.Worker(t, url, "default", nil)
	p := channelPair(t, w, nil)
	chPath := protocol.ChannelPathPrefix + p.ChannelID + "?key=" + p.Writer.AccessKey
	_, port, _ := net.SplitHostPort(addr)
	cases := []struct {
		name, host, origin string
		status             int
		code               string
	}{
		{"no origin (SDK)", addr, "", http.StatusSwitchingProtocols, ""},
		{"localhost host", "localhost:" + port, "", http.StatusSwitchingProtocols, ""},
		{"ipv6 loopback host", "[::1]:" + port, "", http.StatusSwitchingProtocols, ""},
		{"same origin", addr, "http://" + addr, http.StatusSwitchingProtocols, ""},
		{"allowed origin", addr, "http://localhost:3000", http.StatusSwitchingProtocols, ""},
		{"allowed host pattern", addr, "https://app.trusted.example", http.StatusSwitchingProtocols, ""},
		{"cross origin", addr, "https://evil.example", http.StatusForbidden, errcode.OriginForbidden},
		{"null origin", addr, "null", http.StatusForbidden, errcode.OriginForbidden},
		{"allowed origin, other scheme", addr, "https://localhost:3000", http.StatusForbidden, errcode.OriginForbidden},
		{"dns rebinding", "evil.example:" + port, "http://evil.example:" + port, http.StatusForbidden, errcode.HostForbidden},
		{"foreign host, no origin", "evil.example", "", http.StatusForbidden, errcode.HostForbidden},
	}
	for _, c := range cases {
		for _, path := range []string{"/", chPath} {
			if c.status == http.StatusSwitchingProtocols && path == chPath {
				continue // the writer end connects once; the refusals below never take it
			}
			status, body := rawHandshake(t, addr, path, c.host, c.origin)
			if status != c.status || c.code != "" && !strings.Contains(body, "error["+c.code+"]") {
				t.Errorf("%s on %s: got %d %q, want %d with error[%s]", c.name, path, status, body, c.status, c.code)
			}
		}
	}
	// The refused handshakes left the channel's writer end free.
	if status, body := rawHandshake(t, addr, chPath, addr, ""); status != http.StatusSwitchingProtocols {
		t.Fatalf("channel writer: %d %s", status, body)
	}
}

// TestLoopbackNames: which listeners check the Host (a wildcard listener serves other hosts'
// names, so it does not); package webguard says what counts as a loopback Host.
func TestLoopbackNames(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "0.0.0.0:1": false, "[::]:1": false, "192.168.1.2:1": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopbackAddr(a); got != want {
			t.Errorf("isLoopbackAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestHandshakeTimeout: a socket that never finishes its upgrade request is closed after
// Options.HandshakeTimeout (config.yaml handshake_timeout_ms), not a fixed 10 s.
func TestHandshakeTimeout(t *testing.T) {
	url := enginetest.Start(t, New(Options{HandshakeTimeout: 100 * time.Millisecond})).URL
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HT"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second)) // the old engine waited 10 s
	_, err = io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the engine kept a half-sent handshake open past its handshake timeout")
	}
}

// TestSDKDialHasNoOrigin: the Go SDK's handshake carries no Origin, so it always passes.
func TestSDKDialHasNoOrigin(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	ws, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.CloseNow()
}
