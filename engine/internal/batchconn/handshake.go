package batchconn

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gobwas/ws"
)

// Accept upgrades an HTTP request to a WebSocket connection that this package reads and
// writes. It negotiates no extension and no subprotocol; the caller checks origins and tokens
// first. When the server's listener is a Listener, the connection is the Conn it accepted;
// otherwise the hijacked socket is wrapped with writeTimeout.
func Accept(w http.ResponseWriter, r *http.Request, writeTimeout time.Duration) (*Conn, error) {
	nc, rw, _, err := ws.HTTPUpgrader{}.Upgrade(r, w)
	if err != nil {
		if nc != nil {
			_ = nc.Close()
		}
		return nil, err
	}
	c, ok := nc.(*Conn)
	if !ok {
		c = New(nc, writeTimeout)
	}
	c.br = newReader(c.Conn, rw.Reader)
	return c, nil
}

// Dial opens a WebSocket connection to rawURL (ws:// or wss://) sending header with the
// handshake, through the HTTP proxy the environment names for it if any. Its frames are
// masked, as a client's must be.
func Dial(ctx context.Context, rawURL string, header http.Header) (*Conn, error) {
	target, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	dial, err := netDial(target)
	if err != nil {
		return nil, err
	}
	var msg strings.Builder
	d := ws.Dialer{
		NetDial: dial,
		Header:  ws.HandshakeHeaderHTTP(header),
		OnStatusError: func(status int, reason []byte, resp io.Reader) {
			fmt.Fprintf(&msg, "%d %s", status, reason)
			if r, err := http.ReadResponse(bufio.NewReader(resp), nil); err == nil && r.ContentLength > 0 {
				b, _ := io.ReadAll(io.LimitReader(r.Body, min(r.ContentLength, 1024)))
				fmt.Fprintf(&msg, ": %s", strings.TrimSpace(string(b)))
			}
		},
	}
	nc, br, _, err := d.Dial(ctx, rawURL)
	if err != nil {
		if msg.Len() > 0 {
			return nil, fmt.Errorf("WebSocket handshake with %s refused: %s", rawURL, msg.String())
		}
		return nil, err
	}
	c := New(nc, 0)
	c.client = true
	c.br = newReader(nc, br)
	if br != nil {
		ws.PutReader(br)
	}
	return c, nil
}

var _ net.Conn = (*Conn)(nil)
