//go:build unix

package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/internal/base/errcode"
)

func streamConfig(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf("workers:\n  - name: iii-worker-manager\n    config: {host: 127.0.0.1, port: %d}\n  - name: configuration\n    config: {adapter: {name: fs, config: {directory: %s}}}\n  - name: iii-stream\n    config: {port: 0}\n", port, dir)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, port
}

// A declared iii-stream needs the binary to hand its EngineWorker; without one the engine refuses
// to start rather than ignore the entry.
func TestDeclaredStreamWithoutWorker(t *testing.T) {
	cfg, _ := streamConfig(t)
	err := runEngine("test", []string{"--config", cfg}, nil, os.LookupEnv)
	var ce *errcode.Error
	if !errors.As(err, &ce) || ce.Code != errcode.ConfigUnsupported {
		t.Fatalf("got %v, want CONFIG_UNSUPPORTED", err)
	}
}

// The EngineWorker's error stops the engine with its code; a running one gets the engine's own
// URL and the parsed iii-stream config, and is stopped when the engine stops.
func TestDeclaredStreamServed(t *testing.T) {
	cfg, port := streamConfig(t)
	refuse := map[string]EngineWorker{"iii-stream": func(context.Context, EngineWorkerEnv) (func(), error) {
		return nil, errcode.New(errcode.ListenFailed, "port taken")
	}}
	var ce *errcode.Error
	if err := runEngine("test", []string{"--config", cfg}, refuse, os.LookupEnv); !errors.As(err, &ce) || ce.Code != errcode.ListenFailed {
		t.Fatalf("got %v, want LISTEN_FAILED", err)
	}

	got := make(chan EngineWorkerEnv, 1)
	stopped := make(chan struct{})
	serve := map[string]EngineWorker{"iii-stream": func(_ context.Context, env EngineWorkerEnv) (func(), error) {
		got <- env
		return func() { close(stopped) }, nil
	}}
	done := make(chan error, 1)
	go func() { done <- runEngine("test", []string{"--config", cfg}, serve, os.LookupEnv) }()
	var env EngineWorkerEnv
	select {
	case env = <-got:
	case err := <-done:
		t.Fatalf("engine ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the EngineWorker was not started within 10s")
	}
	if want := fmt.Sprintf("ws://127.0.0.1:%d", port); env.URL != want || env.Config.Stream == nil || env.Config.Stream.Port != 0 {
		t.Errorf("env: URL %s (want %s), stream %+v", env.URL, want, env.Config.Stream)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine did not stop within 10s of SIGINT")
	}
	select {
	case <-stopped:
	default:
		t.Error("the EngineWorker was not stopped with the engine")
	}
}
