package serve

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/iii-go/iii/engine/protocol"
)

// projectTokenCaller calls the adapter's <prefix>::worker::* through a connection of its own
// that presents the project token. The adapter registers them protected (only Compose drives VM
// workers), and an engine Compose attaches to with that engine's owner credential has no grant
// that ties the credential to the project token, so Compose's own connection would be refused
// FORBIDDEN there. The connection opens at the first call and reopens after it ends.
type projectTokenCaller struct {
	cfg protocol.Config

	mu sync.Mutex
	w  *protocol.Worker
}

// Call calls fn through the project-token connection, opening it first when needed.
func (c *projectTokenCaller) Call(ctx context.Context, fn string, payload any, opts ...protocol.CallOption) (json.RawMessage, error) {
	w, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	return w.Call(ctx, fn, payload, opts...)
}

func (c *projectTokenCaller) conn(ctx context.Context) (*protocol.Worker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w != nil {
		select {
		case <-c.w.Done():
			c.w = nil
		default:
			return c.w, nil
		}
	}
	w, err := protocol.Connect(ctx, c.cfg)
	if err != nil {
		return nil, err
	}
	c.w = w
	return w, nil
}

// Close closes the connection if it is open.
func (c *projectTokenCaller) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w != nil {
		c.w.Close()
		c.w = nil
	}
}
