package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// Connections to guest ports (vm.Dialer, agent revision 10; the frames are those of
// proto/conn.go). The Dial frame's id becomes the connection's: the read loop hands its Reply
// to DialGuest and its Data, End and Credit to the connection's proto.ConnEnd.

var _ vm.Dialer = (*machine)(nil)

// dialRevision is the first agent revision that relays connections.
const dialRevision = 10

// Dials reports whether the machine's agent relays connections (vm.Dialer).
func (m *machine) Dials() bool { return agentRevision(m.agent) >= dialRevision }

// DialGuest connects to port on the guest's loopback (vm.Dialer).
func (m *machine) DialGuest(ctx context.Context, port int) (net.Conn, error) {
	if !m.Dials() {
		return nil, vm.ErrDialUnsupported
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("vm: guest port %d is not 1..65535", port)
	}
	id := m.nextID.Add(1)
	ce := proto.NewConnEnd(id, m.send)
	c := &call{reply: make(chan proto.Frame, 1), conn: ce}
	m.mu.Lock()
	m.pending[id] = c
	m.mu.Unlock()
	f, err := proto.Marshal(proto.TypeDial, id, proto.Dial{Port: port})
	if err == nil {
		err = m.send(f)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrStopped, err)
		}
	}
	if err == nil {
		_, err = m.await(ctx, c)
	}
	if err != nil {
		m.forget(id)
		ce.Close("the host gave up the dial")
		var fe *vm.FSError
		if errors.As(err, &fe) && fe.Code == proto.DialRefused {
			return nil, &vm.DialError{Port: port, Message: fmt.Sprintf("guest port %d: %s", port, fe.Message)}
		}
		return nil, err
	}
	gc := &guestConn{ConnEnd: ce, m: m, port: port, done: make(chan struct{})}
	go func() {
		// The machine's end ends the connection: its reads and writes fail instead of waiting.
		select {
		case <-m.connErr:
			ce.Close("the machine exited")
		case <-gc.done:
		}
	}()
	return gc, nil
}

var _ net.Conn = (*guestConn)(nil)

// guestConn is a connection to a guest port as a net.Conn.
type guestConn struct {
	*proto.ConnEnd
	m    *machine
	port int
	done chan struct{} // closed by Close
	once sync.Once
}

// Close drops the connection and forgets it.
func (g *guestConn) Close() error {
	g.once.Do(func() {
		g.ConnEnd.Close("closed by the host")
		g.m.forget(g.ID())
		close(g.done)
	})
	return nil
}

// CloseWrite sends end of file to the guest's server; the connection's reads go on.
func (g *guestConn) CloseWrite() error { return g.ConnEnd.CloseWrite() }

func (g *guestConn) Read(p []byte) (int, error)  { return g.ConnEnd.Read(p) }
func (g *guestConn) Write(p []byte) (int, error) { return g.ConnEnd.Write(p) }

func (g *guestConn) LocalAddr() net.Addr { return guestAddr("host") }
func (g *guestConn) RemoteAddr() net.Addr {
	return guestAddr("guest:127.0.0.1:" + strconv.Itoa(g.port))
}

func (g *guestConn) SetDeadline(t time.Time) error {
	_ = g.ConnEnd.SetReadDeadline(t)
	return g.ConnEnd.SetWriteDeadline(t)
}

// guestAddr names an end of a relayed connection.
type guestAddr string

func (a guestAddr) Network() string { return "iii-guest" }
func (a guestAddr) String() string  { return string(a) }
