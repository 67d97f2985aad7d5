package core

import (
	"context"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

func TestShutdownIsPrompt(t *testing.T) {
	_, url, stop := serveEngine(t, Options{})
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
