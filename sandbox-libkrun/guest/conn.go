//go:build linux

package main

import (
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// Connections to the guest's loopback (revision 10, proto/conn.go): the host's exposed ports.
// The agent dials the port on 127.0.0.1 (then ::1), so a server bound to loopback or to every
// address is reached whatever the sandbox's network; two goroutines copy the bytes between the
// socket and the connection's frames.

// dialTimeout bounds one dial of a guest port.
const dialTimeout = 5 * time.Second

// dial answers a Dial frame. The connection is registered before the read loop goes on, so an
// End of the host that comes while dialling (the host gave up) finds it and drops the socket.
func (a *agent) dial(f proto.Frame) {
	req, ok := decodeFrame[proto.Dial](a, f)
	if !ok {
		return
	}
	if req.Port < 1 || req.Port > 65535 {
		a.sendJSON(proto.TypeReply, f.ID, proto.Reply{Error: &proto.Error{Message: "dial: port " + strconv.Itoa(req.Port) + " is not 1..65535"}})
		return
	}
	c := proto.NewConnEnd(f.ID, func(fr proto.Frame) error { a.send(fr); return nil })
	a.mu.Lock()
	a.conns[f.ID] = c
	a.mu.Unlock()
	go func() {
		sock, err := dialLoopback(req.Port)
		if err != nil {
			a.forgetConn(f.ID)
			a.sendJSON(proto.TypeReply, f.ID, proto.Reply{Error: &proto.Error{Code: proto.DialRefused, Message: err.Error()}})
			return
		}
		a.sendJSON(proto.TypeReply, f.ID, proto.Reply{})
		a.relay(c, sock.(*net.TCPConn))
	}()
}

// dialLoopback connects to port on 127.0.0.1, or on ::1 for a server bound there alone.
func dialLoopback(port int) (net.Conn, error) {
	p := strconv.Itoa(port)
	sock, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", p), dialTimeout)
	if err == nil {
		return sock, nil
	}
	if s6, err6 := net.DialTimeout("tcp", net.JoinHostPort("::1", p), dialTimeout); err6 == nil {
		return s6, nil
	}
	return nil, err
}

// relay copies between sock and c until both directions ended, then forgets c.
func (a *agent) relay(c *proto.ConnEnd, sock *net.TCPConn) {
	done := make(chan struct{}, 2)
	go func() { // host → server
		_, err := io.Copy(sock, c)
		if err != nil && !errors.Is(err, io.EOF) {
			sock.Close()
		} else {
			_ = sock.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() { // server → host
		buf := make([]byte, proto.StreamChunk)
		_, err := io.CopyBuffer(c, sock, buf)
		if err != nil {
			c.Close("guest socket: " + err.Error())
		} else {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
	sock.Close()
	c.Close("closed by the guest")
	a.forgetConn(c.ID())
}

// deliverConn routes a host frame of a connection; it reports whether id was one.
func (a *agent) deliverConn(f proto.Frame) bool {
	a.mu.Lock()
	c := a.conns[f.ID]
	a.mu.Unlock()
	if c == nil {
		return false
	}
	c.Deliver(f)
	return true
}

func (a *agent) forgetConn(id uint32) {
	a.mu.Lock()
	delete(a.conns, id)
	a.mu.Unlock()
}
