package adapter

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

var _ vm.Dialer = (*fakeMachine)(nil)

func (m *fakeMachine) Dials() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dialFn != nil
}

func (m *fakeMachine) DialGuest(_ context.Context, port int) (net.Conn, error) {
	m.mu.Lock()
	fn := m.dialFn
	m.mu.Unlock()
	if fn == nil {
		return nil, vm.ErrDialUnsupported
	}
	return fn(port)
}

// guest is a fake guest's servers: an HTTP server on port 8000 that answers with the path and
// the Authorization header it saw, a TCP echo server on 9000, a WebSocket echo server on 8100,
// and nothing elsewhere.
type guest struct {
	http *httptest.Server
	ws   *httptest.Server
	echo net.Listener
}

func newGuest(t *testing.T) *guest {
	t.Helper()
	g := &guest{http: httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s auth=%q", r.URL.Path, r.Header.Get("Authorization"))
	}))}
	t.Cleanup(g.http.Close)
	g.ws = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), b...)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(g.ws.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.echo = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return g
}

func (g *guest) dial(port int) (net.Conn, error) {
	switch port {
	case 8000:
		return net.Dial("tcp", g.http.Listener.Addr().String())
	case 9000:
		return net.Dial("tcp", g.echo.Addr().String())
	case 8100:
		return net.Dial("tcp", g.ws.Listener.Addr().String())
	}
	return nil, &vm.DialError{Port: port, Message: fmt.Sprintf("guest port %d: connection refused", port)}
}

// logs collects the adapter's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// wait polls until a line contains part.
func (l *logs) wait(t *testing.T, part string) {
	t.Helper()
	seen := enginetest.Poll(5*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.ContainsFunc(l.lines, func(line string) bool { return strings.Contains(line, part) })
	})
	if !seen {
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("no log line contains %q: %q", part, l.lines)
	}
}

// exposeHarness is a harness with one sandbox whose machine serves g's ports.
func exposeHarness(t *testing.T, mutate func(*settings.Settings)) (*harness, string, *logs) {
	t.Helper()
	h := newHarness(t, mutate, nil)
	lg := &logs{}
	h.svc.opt.Logf = lg.logf
	id := h.create(t, `{"image":"python"}`)
	g := newGuest(t)
	m := h.drv.machines[len(h.drv.machines)-1]
	m.mu.Lock()
	m.dialFn = g.dial
	m.mu.Unlock()
	return h, id, lg
}

func get(t *testing.T, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestExposeRelaysHTTPAndTCP: an exposed port's URL on the host loopback reaches the guest's
// HTTP server; a raw TCP exchange with a half-close (what WebSocket and any TCP protocol need)
// goes both ways; expose::list shows the ports.
func TestExposeRelaysHTTPAndTCP(t *testing.T) {
	h, id, _ := exposeHarness(t, nil)
	r := h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, id))
	if r["host"] != "127.0.0.1" || r["guest_port"] != float64(8000) || r["token"] != nil {
		t.Fatalf("reply %v", r)
	}
	url := r["url"].(string)
	if want := fmt.Sprintf("http://127.0.0.1:%d/", int(r["port"].(float64))); url != want {
		t.Fatalf("url %s, want %s", url, want)
	}
	if code, body := get(t, url+"hello.txt", nil); code != 200 || body != `path=/hello.txt auth=""` {
		t.Fatalf("GET: %d %q", code, body)
	}

	r = h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":9000}`, id))
	c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(r["url"].(string), "http://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping over raw tcp")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "ping over raw tcp" {
		t.Fatalf("echo: %q %v", b, err)
	}

	rows := h.mustCall(t, "expose::list", fmt.Sprintf(`{"sandbox_id":%q}`, id))["ports"].([]any)
	if len(rows) != 2 || rows[0].(map[string]any)["guest_port"] != float64(8000) || rows[1].(map[string]any)["guest_port"] != float64(9000) {
		t.Fatalf("list %v", rows)
	}
}

// TestExposeToken: with token, a request without the header or with another token gets 401
// and never reaches the guest; the right one is relayed with the header removed.
func TestExposeToken(t *testing.T) {
	h, id, lg := exposeHarness(t, nil)
	r := h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000,"token":true}`, id))
	url, tok := r["url"].(string), r["token"].(string)
	if len(tok) != 48 {
		t.Fatalf("token %q", tok)
	}
	if code, body := get(t, url, nil); code != 401 || !strings.Contains(body, "Authorization: Bearer") {
		t.Fatalf("without the token: %d %q", code, body)
	}
	lg.wait(t, "refused: no valid token")
	if code, _ := get(t, url, map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 48)}); code != 401 {
		t.Fatalf("another token: %d", code)
	}
	if code, body := get(t, url+"x", map[string]string{"Authorization": "Bearer " + tok}); code != 200 || body != `path=/x auth=""` {
		t.Fatalf("with the token: %d %q", code, body)
	}
	rows := h.mustCall(t, "expose::list", fmt.Sprintf(`{"sandbox_id":%q}`, id))["ports"].([]any)
	if row := rows[0].(map[string]any); row["token"] != true {
		t.Fatalf("list %v", row)
	}
}

// TestExposeRefusals: bad ports are S001, a port exposed twice S001, more than
// max_exposed_ports S400, an unknown sandbox S002, a machine whose agent predates exposure S240.
func TestExposeRefusals(t *testing.T) {
	h, id, _ := exposeHarness(t, func(s *settings.Settings) { s.MaxExposedPorts = 1 })
	for _, body := range []string{`{"sandbox_id":%q}`, `{"sandbox_id":%q,"port":0}`, `{"sandbox_id":%q,"port":65536}`, `{"sandbox_id":%q,"port":"80"}`, `{"sandbox_id":%q,"port":80,"host":"0.0.0.0"}`} {
		_, e := h.call(t, "expose", fmt.Sprintf(body, id))
		wantCode(t, e, scode.S001, "")
	}
	h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, id))
	_, e := h.call(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, id))
	wantCode(t, e, scode.S001, "already exposed")
	_, e = h.call(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":9000}`, id))
	wantCode(t, e, scode.S400, "max_exposed_ports")
	_, e = h.call(t, "unexpose", fmt.Sprintf(`{"sandbox_id":%q,"port":9000}`, id))
	wantCode(t, e, scode.S001, "not exposed")
	_, e = h.call(t, "expose", `{"sandbox_id":"6f1c1c47-8a3b-4c1e-9a57-2d1b0f3e4a5b","port":8000}`)
	wantCode(t, e, scode.S002, "")

	old := h.create(t, `{"image":"python"}`) // its fake machine has no dialFn: an older agent
	_, e = h.call(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, old))
	wantCode(t, e, scode.S240, "agent revision 10")
}

// TestExposeConnectionLimitAndDeadPort: past max_expose_connections a connection is closed at
// once, and so is one to a guest port nothing listens on; the adapter logs why.
func TestExposeConnectionLimitAndDeadPort(t *testing.T) {
	h, id, lg := exposeHarness(t, func(s *settings.Settings) { s.MaxExposeConnections = 1 })
	addr := func(port int) string {
		r := h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":%d}`, id, port))
		return strings.TrimSuffix(strings.TrimPrefix(r["url"].(string), "http://"), "/")
	}
	echo := addr(9000)
	first, err := net.Dial("tcp", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := first.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(first).ReadString('\n'); err != nil || line != "a\n" {
		t.Fatalf("first: %q %v", line, err)
	}
	second, err := net.Dial("tcp", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("second connection not closed: %d %v", n, err)
	}
	lg.wait(t, "max_expose_connections")

	dead, err := net.Dial("tcp", addr(7777))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	_ = dead.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := dead.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("connection to a dead port not closed: %d %v", n, err)
	}
	lg.wait(t, "guest port 7777: connection refused")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestExposeClosedWithSandbox: unexpose closes a listener; stopping the sandbox closes the
// others and their open connections, and the URL then refuses connections.
func TestExposeClosedWithSandbox(t *testing.T) {
	h, id, _ := exposeHarness(t, nil)
	hostOf := func(r map[string]any) string {
		return strings.TrimSuffix(strings.TrimPrefix(r["url"].(string), "http://"), "/")
	}
	a := hostOf(h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, id)))
	h.mustCall(t, "unexpose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, id))
	if c, err := net.Dial("tcp", a); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after unexpose", a)
	}
	b := hostOf(h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":9000}`, id)))
	open, err := net.Dial("tcp", b)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(open, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	h.mustCall(t, "stop", fmt.Sprintf(`{"sandbox_id":%q}`, id))
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := open.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("open connection survived stop: %d %v", n, err)
	}
	if c, err := net.Dial("tcp", b); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after stop", b)
	}
	_, e := h.call(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8000}`, id))
	wantCode(t, e, scode.S004, "")
}

// TestExposeOpenConnectionKeepsSandbox: the idle reaper leaves a sandbox alone while a
// connection through an exposed port is open; once it closed, the sandbox is reaped after its
// idle timeout as any other.
func TestExposeOpenConnectionKeepsSandbox(t *testing.T) {
	h, id, _ := exposeHarness(t, nil)
	r := h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":9000}`, id))
	c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(r["url"].(string), "http://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	h.clock.Add(time.Hour)
	h.svc.Reap()
	if _, e := h.call(t, "expose::list", fmt.Sprintf(`{"sandbox_id":%q}`, id)); e != nil {
		t.Fatalf("reaped with an open connection: %s", e.Error())
	}
	c.Close()
	var rows []any
	if !enginetest.Poll(5*time.Second, func() bool {
		rows = h.mustCall(t, "expose::list", fmt.Sprintf(`{"sandbox_id":%q}`, id))["ports"].([]any)
		return rows[0].(map[string]any)["connections"] == float64(0)
	}) {
		t.Fatalf("the connection is still counted: %v", rows)
	}
	h.clock.Add(time.Hour)
	h.svc.Reap()
	_, e := h.call(t, "expose::list", fmt.Sprintf(`{"sandbox_id":%q}`, id))
	wantCode(t, e, scode.S004, "")
}

// TestExposeWebSocket: a WebSocket server in the guest is reached through an exposed port with
// a token, the token in the upgrade request's header; without it the upgrade is refused 401.
func TestExposeWebSocket(t *testing.T) {
	h, id, _ := exposeHarness(t, nil)
	r := h.mustCall(t, "expose", fmt.Sprintf(`{"sandbox_id":%q,"port":8100,"token":true}`, id))
	url := "ws" + strings.TrimPrefix(r["url"].(string), "http")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, res, err := websocket.Dial(ctx, url, nil); err == nil || res == nil || res.StatusCode != 401 {
		t.Fatalf("upgrade without the token: %v %v", res, err)
	}
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + r["token"].(string)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	for _, msg := range []string{"one", strings.Repeat("big ", 100000)} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(ctx)
		if err != nil || string(b) != "echo: "+msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(b), err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}
