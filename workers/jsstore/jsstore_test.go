package jsstore

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// put stores key=value in bucket kv of s, creating it.
func put(t *testing.T, s *Store, key, value string) {
	t.Helper()
	kv, err := s.JS.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(context.Background(), key, value); err != nil {
		t.Fatal(err)
	}
}

// get reads key from bucket kv of s.
func get(t *testing.T, s *Store, key string) string {
	t.Helper()
	kv, err := s.JS.KeyValue(context.Background(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Value())
}

// TestEmbeddedKeepsDataAcrossRestarts: the embedded server opens no port by default and what
// it stored is there when the same data directory is opened again.
func TestEmbeddedKeepsDataAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(context.Background(), Config{}, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	if u := s.ClientURL(); u != "" {
		t.Errorf("ClientURL %q without nats.listen", u)
	}
	put(t, s, "k", "v1")
	s.Close()
	s, err = Open(context.Background(), Config{Sync: "interval"}, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := get(t, s, "k"); v != "v1" {
		t.Errorf("after a restart k = %q, want v1", v)
	}
}

// TestListenServesAnotherWorker: with nats.listen the embedded server accepts clients, and a
// store opened with that URL shares its buckets.
func TestListenServesAnotherWorker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	server, err := Open(context.Background(), Config{Listen: "127.0.0.1:" + strconv.Itoa(port)}, t.TempDir(), "server")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if !strings.Contains(server.ClientURL(), strconv.Itoa(port)) {
		t.Fatalf("ClientURL %q does not name port %d", server.ClientURL(), port)
	}
	put(t, server, "shared", "yes")
	client, err := Open(context.Background(), Config{URL: server.ClientURL()}, t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if v := get(t, client, "shared"); v != "yes" {
		t.Errorf("the client reads %q, want yes", v)
	}
}

// TestOpenRefuses: a non-loopback listen address without allow_remote, a malformed one, a bad
// port and an unreachable URL are errors that name the key.
func TestOpenRefuses(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Listen: "0.0.0.0:4222"}, "set nats.allow_remote"},
		{Config{Listen: "example.com:4222"}, "not a loopback address"},
		{Config{Listen: "127.0.0.1"}, "nats.listen"},
		{Config{Listen: "127.0.0.1:x"}, "bad port"},
		{Config{URL: "nats://127.0.0.1:1"}, "(nats.url)"},
	} {
		s, err := Open(context.Background(), c.cfg, t.TempDir(), "test")
		if err == nil {
			s.Close()
			t.Errorf("%+v: opened", c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to say %q", c.cfg, err, c.want)
		}
	}
}

func TestDefaultDataDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	got, err := DefaultDataDir("queue", "shop")
	if err != nil || got != filepath.Join(home, ".iii", "data", "queue", "shop") {
		t.Errorf("DefaultDataDir = %q, %v", got, err)
	}
}
