package adapter

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Exposed ports (contract 1.3). sandbox::expose opens a TCP listener on the host (expose_host,
// loopback unless the operator sets another address) whose every connection is relayed to the
// guest's 127.0.0.1:<port> through the guest agent (vm.Dialer): the bytes go over the machine's
// control channel, never the guest's network, so a sandbox without networking serves too. The
// relay is raw TCP, so HTTP, WebSocket and any other protocol over TCP work alike. With token,
// a connection must open with an HTTP request carrying `Authorization: Bearer <token>`; the
// header is checked in constant time and removed before the request reaches the guest, a
// connection without it gets 401 and is closed, and the rest of an accepted connection (later
// requests on it, a WebSocket's frames) is relayed unchecked. The listener and its connections
// close with the sandbox (stop, the idle reaper, the adapter's shutdown) or with unexpose.

// exposeDialTimeout bounds the guest agent's dial of one connection.
const exposeDialTimeout = 10 * time.Second

// tokenHeadTimeout and tokenHeadMax bound the request head read before a token is checked.
const (
	tokenHeadTimeout = 10 * time.Second
	tokenHeadMax     = 16 << 10
)

// ExposeRequest is the body of expose.
type ExposeRequest struct {
	SandboxID string `json:"sandbox_id"`
	Port      *int   `json:"port"`
	Token     bool   `json:"token"`
}

// UnexposeRequest is the body of unexpose.
type UnexposeRequest struct {
	SandboxID string `json:"sandbox_id"`
	Port      *int   `json:"port"`
}

// ExposeListRequest is the body of expose::list.
type ExposeListRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// ExposeReply is the reply of expose: URL reaches the guest's port GuestPort through the host
// listener Host:Port.
type ExposeReply struct {
	URL       string `json:"url"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	GuestPort int    `json:"guest_port"`
	Token     string `json:"token,omitempty"`
}

// ExposeRow is one exposed port of expose::list; the token itself is not listed.
type ExposeRow struct {
	URL         string `json:"url"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	GuestPort   int    `json:"guest_port"`
	Token       bool   `json:"token"`
	Connections int    `json:"connections"`
}

// exposure is one exposed port of a sandbox.
type exposure struct {
	s     *Service
	box   *sandbox
	dial  vm.Dialer
	guest int
	ln    net.Listener
	host  string
	port  int
	token string

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // the clients' connections
	closed bool
}

func (e *exposure) url() string {
	return "http://" + net.JoinHostPort(e.host, strconv.Itoa(e.port)) + "/"
}

func (s *Service) exposeHandlers(h map[string]Handler) {
	h["expose"] = s.Expose
	h["unexpose"] = s.Unexpose
	h["expose::list"] = s.ExposeList
}

func exposeUnsupported() *scode.Error {
	return scode.New(scode.S240, "port exposure unsupported by this sandbox's guest agent (it predates agent revision 10); "+
		"upgrade the sandbox adapter, whose guest agent relays connections, and create a new sandbox")
}

func checkPort(p *int) (int, error) {
	if p == nil {
		return 0, scode.Invalid("port is required: the guest TCP port to expose, e.g. {\"port\": 8000}")
	}
	if *p < 1 || *p > 65535 {
		return 0, scode.Invalid(fmt.Sprintf("port %d is not a TCP port (1..65535)", *p))
	}
	return *p, nil
}

// exposeTarget checks what expose and unexpose both name: the sandbox id, the guest port, and
// the sandbox, admitted as for any other operation on it.
func (s *Service) exposeTarget(sandboxID string, p *int) (id string, port int, box *sandbox, err error) {
	if id, err = checkID(sandboxID); err != nil {
		return "", 0, nil, err
	}
	if port, err = checkPort(p); err != nil {
		return "", 0, nil, err
	}
	if box, err = s.admit(id, false); err != nil {
		return "", 0, nil, err
	}
	return id, port, box, nil
}

// Expose answers expose.
func (s *Service) Expose(_ context.Context, raw json.RawMessage) (any, error) {
	var req ExposeRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, port, box, err := s.exposeTarget(req.SandboxID, req.Port)
	if err != nil {
		return nil, err
	}
	d, ok := box.machine.(vm.Dialer)
	if !ok || !d.Dials() {
		return nil, exposeUnsupported()
	}
	e := &exposure{s: s, box: box, dial: d, guest: port, conns: map[net.Conn]struct{}{}}
	if req.Token {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, scode.BootFailed("no randomness for the token: " + err.Error())
		}
		e.token = hex.EncodeToString(b[:])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if box.stopped {
		return nil, scode.Stopped(id)
	}
	if old := box.exposed[port]; old != nil {
		return nil, scode.Invalid(fmt.Sprintf("port %d of sandbox %s is already exposed at %s; sandbox::unexpose it first to expose it again", port, id, old.url()))
	}
	if max := s.opt.Settings.MaxExposedPorts; uint32(len(box.exposed)) >= max {
		return nil, scode.Limit(fmt.Sprintf("sandbox %s already exposes %d ports (max_exposed_ports)", id, max))
	}
	host := s.opt.Settings.ExposeHost
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, scode.Limit(fmt.Sprintf("no listener on expose_host %s for port %d of sandbox %s: %v", host, port, id, err))
	}
	e.ln, e.host, e.port = ln, host, ln.Addr().(*net.TCPAddr).Port
	if box.exposed == nil {
		box.exposed = map[int]*exposure{}
	}
	box.exposed[port] = e
	go e.serve()
	s.opt.Logf("sandbox %s: port %d exposed at %s (token: %t)", id, port, e.url(), e.token != "")
	return ExposeReply{URL: e.url(), Host: e.host, Port: e.port, GuestPort: port, Token: e.token}, nil
}

// Unexpose answers unexpose: the listener and its connections close.
func (s *Service) Unexpose(_ context.Context, raw json.RawMessage) (any, error) {
	var req UnexposeRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, port, box, err := s.exposeTarget(req.SandboxID, req.Port)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	e := box.exposed[port]
	delete(box.exposed, port)
	s.mu.Unlock()
	if e == nil {
		return nil, scode.Invalid(fmt.Sprintf("port %d of sandbox %s is not exposed; sandbox::expose::list shows the exposed ports", port, id))
	}
	e.close()
	return map[string]any{"sandbox_id": id, "port": port, "unexposed": true}, nil
}

// ExposeList answers expose::list, in guest port order.
func (s *Service) ExposeList(_ context.Context, raw json.RawMessage) (any, error) {
	var req ExposeListRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkID(req.SandboxID)
	if err != nil {
		return nil, err
	}
	box, err := s.admit(id, false)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	es := make([]*exposure, 0, len(box.exposed))
	for _, e := range box.exposed {
		es = append(es, e)
	}
	s.mu.Unlock()
	sort.Slice(es, func(i, j int) bool { return es[i].guest < es[j].guest })
	rows := make([]ExposeRow, 0, len(es))
	for _, e := range es {
		e.mu.Lock()
		n := len(e.conns)
		e.mu.Unlock()
		rows = append(rows, ExposeRow{URL: e.url(), Host: e.host, Port: e.port, GuestPort: e.guest, Token: e.token != "", Connections: n})
	}
	return map[string]any{"sandbox_id": id, "ports": rows}, nil
}

// openConnsLocked counts the open connections through box's exposed ports; s.mu is held.
func openConnsLocked(box *sandbox) int {
	n := 0
	for _, e := range box.exposed {
		e.mu.Lock()
		n += len(e.conns)
		e.mu.Unlock()
	}
	return n
}

// closeExposuresLocked closes every exposed port of box (it is being stopped); s.mu is held.
func closeExposuresLocked(box *sandbox) {
	for p, e := range box.exposed {
		delete(box.exposed, p)
		e.close()
	}
}

// close closes the listener and every connection; safe to call twice.
func (e *exposure) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	conns := make([]net.Conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	e.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// serve accepts connections until the listener closes.
func (e *exposure) serve() {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				e.s.opt.Logf("sandbox %s: exposed port %d: accept: %v", e.box.id, e.guest, err)
			}
			return
		}
		e.mu.Lock()
		switch {
		case e.closed:
			e.mu.Unlock()
			c.Close()
			return
		case uint32(len(e.conns)) >= e.s.opt.Settings.MaxExposeConnections:
			n := len(e.conns)
			e.mu.Unlock()
			e.s.opt.Logf("sandbox %s: exposed port %d: connection from %s closed: %d connections are open (max_expose_connections)",
				e.box.id, e.guest, c.RemoteAddr(), n)
			c.Close()
			continue
		}
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		go e.handle(c)
	}
}

// handle checks the token, when the port has one, and relays c to the guest port.
func (e *exposure) handle(c net.Conn) {
	defer func() {
		c.Close()
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
		e.s.touch(e.box)
	}()
	e.s.touch(e.box)
	var head []byte
	if e.token != "" {
		var ok bool
		if head, ok = e.checkToken(c); !ok {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), exposeDialTimeout)
	g, err := e.dial.DialGuest(ctx, e.guest)
	cancel()
	if err != nil {
		e.s.opt.Logf("sandbox %s: exposed port %d: connection from %s closed: %v", e.box.id, e.guest, c.RemoteAddr(), err)
		return
	}
	defer g.Close()
	if len(head) > 0 {
		if _, err := g.Write(head); err != nil {
			return
		}
	}
	relay(c, g)
}

// halfCloser is a connection whose write side closes apart from its read side.
type halfCloser interface{ CloseWrite() error }

// relay copies both ways until both directions ended; an end of file is passed on as the
// closing of the other's write side, so a client that half-closes still gets its answer.
func relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if hc, ok := dst.(halfCloser); ok && err == nil {
			_ = hc.CloseWrite()
		} else {
			dst.Close()
			src.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// checkToken reads the request head of c and checks its `Authorization: Bearer` header; the
// head to forward (the header removed, what followed it kept) and true when it holds the
// token, else a 401 is written and false returned.
func (e *exposure) checkToken(c net.Conn) ([]byte, bool) {
	_ = c.SetReadDeadline(time.Now().Add(tokenHeadTimeout))
	br := bufio.NewReaderSize(c, tokenHeadMax)
	var head bytes.Buffer
	found := false
	for {
		line, err := br.ReadSlice('\n')
		if err != nil || head.Len()+len(line) > tokenHeadMax {
			e.refuse(c, "400 Bad Request", "an exposed port with a token takes HTTP requests whose head ends within 16 KiB")
			return nil, false
		}
		if name, value, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(strings.TrimSpace(name), "authorization") {
			v := strings.TrimSpace(value)
			if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "bearer") &&
				subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(e.token)) == 1 {
				found = true
				continue // the guest does not see the token
			}
		}
		head.Write(line)
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	if !found {
		e.s.opt.Logf("sandbox %s: exposed port %d: connection from %s refused: no valid token", e.box.id, e.guest, c.RemoteAddr())
		e.refuse(c, "401 Unauthorized", "this exposed port needs the header `Authorization: Bearer <token>` with the token sandbox::expose returned")
		return nil, false
	}
	// What the client sent after the head (a body's first bytes) goes on with it.
	rest, _ := br.Peek(br.Buffered())
	head.Write(rest)
	return head.Bytes(), true
}

func (e *exposure) refuse(c net.Conn, status, msg string) {
	body := msg + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(tokenHeadTimeout))
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nWWW-Authenticate: Bearer\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", status, len(body), body)
}
