package core

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

func TestShutdownIsPrompt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Serve(ctx, ln); close(done) }()
	w, err := protocol.Connect(context.Background(), protocol.Config{URL: "ws://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	cancel()
	<-done
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("shutdown took %v", d)
	}
}

func TestWorkerCloseIsPrompt(t *testing.T) {
	_, url := startEngine(t, Options{})
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
