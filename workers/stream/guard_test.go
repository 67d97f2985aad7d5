package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// handshake sends a WebSocket upgrade for / to addr with Host host and Origin origin (none when
// ""), and returns the status code and, for a refusal, the body.
func handshake(t *testing.T, addr, host, origin string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET / HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	if origin != "" {
		req += "Origin: " + origin + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusSwitchingProtocols {
		return res.StatusCode, ""
	}
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The port Setup binds on loopback, with the default configuration, admits SDKs (no Origin),
// its own pages and pages served from loopback, and refuses another site's page and a Host a
// DNS-rebound name would send, before any auth function runs.
func TestStreamPortRefusesForeignPages(t *testing.T) {
	port := freePort(t)
	cfg := Default()
	cfg.Port = Port(port)
	cfg.Adapter = &Adapter{Name: "kv", Config: map[string]any{"file_path": t.TempDir()}}
	cleanup, err := Setup(context.Background(), cfg, protocol.NewWorker(protocol.Config{URL: "ws://127.0.0.1:1", Name: "t"}),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	addr := net.JoinHostPort(DefaultHost, strconv.Itoa(port))
	for _, c := range []struct {
		host, origin string
		status       int
		body         string
	}{
		{addr, "", 101, ""},
		{"localhost:" + strconv.Itoa(port), "", 101, ""},
		{addr, "http://" + addr, 101, ""},
		{addr, "http://localhost:5173", 101, ""},
		{addr, "http://127.0.0.1:8080", 101, ""},
		{addr, "https://evil.example", 403, "error[ORIGIN_FORBIDDEN]: "},
		{addr, "null", 403, "error[ORIGIN_FORBIDDEN]: "},
		{"attacker.example:" + strconv.Itoa(port), "", 403, "error[HOST_FORBIDDEN]: "},
		{"attacker.example:" + strconv.Itoa(port), "http://attacker.example:" + strconv.Itoa(port), 403, "error[HOST_FORBIDDEN]: "},
	} {
		status, body := handshake(t, addr, c.host, c.origin)
		if status != c.status || !strings.HasPrefix(body, c.body) {
			t.Errorf("Host %s, Origin %q: %d %q, want %d %q", c.host, c.origin, status, body, c.status, c.body)
		}
	}
}

// hub serves a hub with lim on a loopback test server.
func hub(t *testing.T, lim Limits, c Caller) (*Hub, string) {
	t.Helper()
	svc, closeStore := open(t, t.TempDir(), c)
	t.Cleanup(closeStore)
	h, err := NewHub(svc)
	if err != nil {
		t.Fatal(err)
	}
	h.Limits, h.Loopback = lim, true
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return h, strings.TrimPrefix(srv.URL, "http://")
}

// allowed_origins admits the pages it names (a pattern with a scheme, or a host), "*" all.
func TestStreamAllowedOrigins(t *testing.T) {
	_, addr := hub(t, Limits{AllowedOrigins: []string{"https://app.example", "*.corp.example"}}, nil)
	for origin, want := range map[string]int{"https://app.example": 101, "http://app.example": 403, "https://x.corp.example": 101, "https://evil.example": 403} {
		if status, body := handshake(t, addr, addr, origin); status != want {
			t.Errorf("Origin %s: %d %s, want %d", origin, status, body, want)
		}
	}
	_, all := hub(t, Limits{AllowedOrigins: []string{"*"}}, nil)
	if status, body := handshake(t, all, all, "https://evil.example"); status != 101 {
		t.Errorf(`allowed_origins ["*"]: %d %s, want 101`, status, body)
	}
}

// closedWithin waits for the server to close ws and returns the close status and reason.
func closedWithin(t *testing.T, ws *websocket.Conn, d time.Duration) (websocket.StatusCode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("socket still open after %v", d)
			}
			var ce websocket.CloseError
			errors.As(err, &ce)
			return websocket.CloseStatus(err), ce.Reason
		}
	}
}

// A socket that never joins is closed after the join timeout; one that joined stays past it,
// and is closed the idle timeout after it left its last subscription.
func TestHubClosesSocketsWithoutSubscription(t *testing.T) {
	_, addr := hub(t, Limits{JoinTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, nil)
	ctx := context.Background()
	// joined connects first: once idle (connected after it) is closed, joined's join timeout
	// has passed too.
	joined, _, err := websocket.Dial(ctx, "ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer joined.CloseNow()
	_ = joined.Write(ctx, websocket.MessageText, []byte(`{"type":"join","data":{"subscriptionId":"s","streamName":"a","groupId":"g"}}`))
	if m := read(t, joined); m.Event.Type != "sync" {
		t.Fatalf("join: %+v", m)
	}
	idle, _, err := websocket.Dial(ctx, "ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.CloseNow()
	start := time.Now()
	if code, why := closedWithin(t, idle, 10*time.Second); code != websocket.StatusPolicyViolation || why != "no stream joined within 300ms" {
		t.Errorf("unjoined socket closed with %v %q, want 1008 \"no stream joined within 300ms\"", code, why)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("unjoined socket closed after %v", d)
	}
	// Still served after its join timeout.
	_ = joined.Write(ctx, websocket.MessageText, []byte(`{"type":"join","data":{"subscriptionId":"t","streamName":"b","groupId":"g"}}`))
	if m := read(t, joined); m.Event.Type != "sync" || m.StreamName != "b" {
		t.Fatalf("joined socket after the join timeout: %+v", m)
	}
	for _, id := range []string{"s", "t"} {
		_ = joined.Write(ctx, websocket.MessageText, []byte(`{"type":"leave","data":{"subscriptionId":"`+id+`"}}`))
	}
	if code, why := closedWithin(t, joined, 10*time.Second); code != websocket.StatusPolicyViolation || why != "no subscription for 300ms" {
		t.Errorf("socket left without subscription closed with %v %q, want 1008 \"no subscription for 300ms\"", code, why)
	}
}

// Sockets past the per-address or the total cap are refused 503 STREAM_CONNECTION_LIMIT; a
// closed socket frees its place.
func TestHubSocketCaps(t *testing.T) {
	h, addr := hub(t, Limits{MaxPerAddress: 2, MaxConnections: 2}, nil)
	ctx := context.Background()
	var held []*websocket.Conn
	for range 2 {
		ws, _, err := websocket.Dial(ctx, "ws://"+addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		held = append(held, ws)
	}
	status, body := handshake(t, addr, addr, "")
	if status != http.StatusServiceUnavailable || !strings.HasPrefix(body, "error[STREAM_CONNECTION_LIMIT]: ") {
		t.Fatalf("third socket: %d %q, want 503 STREAM_CONNECTION_LIMIT", status, body)
	}
	held[0].Close(websocket.StatusNormalClosure, "")
	enginetest.Eventually(t, "a closed socket to free its place", 10*time.Second, func() bool {
		h.slots.mu.Lock()
		defer h.slots.mu.Unlock()
		return h.slots.total < 2
	})
	ws, _, err := websocket.Dial(ctx, "ws://"+addr, nil)
	if err != nil {
		t.Fatalf("after one closed: %v", err)
	}
	ws.CloseNow()
}

// failingAuth is an auth function that always fails.
type failingAuth struct{}

func (failingAuth) Call(_ context.Context, fn string, _ any, _ ...protocol.CallOption) (json.RawMessage, error) {
	if strings.HasPrefix(fn, "stream::") {
		return nil, notFound(fn)
	}
	return nil, errors.New("auth is down")
}

// A failing auth function is logged once a minute, not once per connection.
func TestAuthWarningRateLimited(t *testing.T) {
	h, addr := hub(t, Limits{}, failingAuth{})
	h.AuthFunction = "auth"
	var mu sync.Mutex
	var lines []string
	h.Log = func(msg string, _ ...any) { mu.Lock(); lines = append(lines, msg); mu.Unlock() }
	for range 20 {
		ws, _, err := websocket.Dial(context.Background(), "ws://"+addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		ws.CloseNow()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 {
		t.Errorf("%d warnings for 20 connections, want 1: %q", len(lines), lines)
	}
}

// The port's bounds read from the worker's YAML; negative values and bad patterns are refused
// CONFIG_INVALID naming the key.
func TestConfigLimits(t *testing.T) {
	cfg := Default()
	in := "allowed_origins: [\"https://app.example\"]\njoin_timeout_ms: 5000\nidle_timeout_ms: 60000\nmax_connections: 10\nmax_connections_per_address: 2\n"
	if err := yaml.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	lim := cfg.Limits()
	if lim.JoinTimeout != 5*time.Second || lim.IdleTimeout != time.Minute || lim.MaxConnections != 10 || lim.MaxPerAddress != 2 || lim.AllowedOrigins[0] != "https://app.example" {
		t.Errorf("limits = %+v", lim)
	}
	if _, err := cfg.Validate(); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.MaxConnections = -1 },
		func(c *Config) { c.JoinTimeoutMS = -5 },
		func(c *Config) { c.AllowedOrigins = []string{"[bad"} },
		func(c *Config) { c.AllowedOrigins = []string{""} },
	} {
		c := Default()
		bad(&c)
		var ce *errcode.Error
		if _, err := c.Validate(); !errors.As(err, &ce) || ce.Code != errcode.ConfigInvalid {
			t.Errorf("%+v: got %v, want CONFIG_INVALID", c, err)
		}
	}
}

// A socket that joined and then stops answering pings (a peer gone without closing) is dropped.
func TestHubDropsUnansweredPings(t *testing.T) {
	h, addr := hub(t, Limits{PingInterval: 200 * time.Millisecond}, nil)
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"join","data":{"subscriptionId":"s","streamName":"a","groupId":"g"}}`))
	read(t, ws) // the sync; from now on nothing reads, so no pong goes back
	enginetest.Eventually(t, "a socket that answers no ping to be dropped", 10*time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.conns) == 0
	})
}
