package vm

import (
	"context"
	"errors"
	"net"
)

// Dialer is a Machine that connects to TCP ports inside its guest (the qemu driver's machines
// from agent revision 10): the guest agent dials the port on the guest's loopback and relays
// the connection's bytes over the machine's control channel, so it works whatever the guest's
// network (none at all by default). Who may dial is the caller's business: the adapter's
// sandbox::expose gives it to a host listener.
type Dialer interface {
	// Dials reports whether the guest agent relays connections (revision 10); DialGuest of a
	// machine that does not is ErrDialUnsupported.
	Dials() bool
	// DialGuest connects to port on the guest's 127.0.0.1 (or ::1). Nothing listening there is
	// a *DialError; the connection ends with the machine.
	DialGuest(ctx context.Context, port int) (net.Conn, error)
}

// DialError is a guest port that refused the connection (nothing listens there) or could not
// be reached in time.
type DialError struct {
	Port    int
	Message string
}

func (e *DialError) Error() string { return e.Message }

// ErrDialUnsupported is a machine whose guest agent predates connections (revision 10).
var ErrDialUnsupported = errors.New("the guest agent does not relay connections (agent revision < 10)")
