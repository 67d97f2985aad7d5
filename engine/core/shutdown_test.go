package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

func TestShutdownIsPrompt(t *testing.T) {
	srv := enginetest.Start(t, New(Options{}))
	url, stop := srv.URL, srv.Stop
	w, err := protocol.Connect(context.Background(), protocol.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	stop()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("shutdown took %v", d)
	}
}

func TestWorkerCloseIsPrompt(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	w, err := protocol.Connect(context.Background(), protocol.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w.Close()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("close took %v", d)
	}
}

// TestShutdownCloseFrame: a worker connection is closed with 1001 "engine shutting down" when
// the engine stops.
func TestShutdownCloseFrame(t *testing.T) {
	srv := enginetest.Start(t, New(Options{}))
	url, stop := srv.URL, srv.Stop
	c := rawDial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	if _, _, err := c.Read(ctx); err != nil { // workerregistered: the engine holds the connection
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				errc <- err
				return
			}
		}
	}()
	stop()
	err := <-errc
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != "engine shutting down" {
		t.Fatalf("got %v, want a 1001 close with \"engine shutting down\"", err)
	}
}
