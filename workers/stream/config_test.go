package stream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// iii's iii-stream block reads as written: the port as a number or as the string an
// environment placeholder gives, and what is not set keeps Default's value.
func TestConfigYAML(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Config
	}{
		{"port: 4000\n", Config{Host: DefaultHost, Port: 4000, Replicas: 1}},
		{"port: \"4001\"\nhost: 0.0.0.0\nauth_function: auth::fn\n", Config{Host: "0.0.0.0", Port: 4001, AuthFunction: "auth::fn", Replicas: 1}},
		{"{}\n", Default()},
	} {
		got := Default()
		if err := yaml.Unmarshal([]byte(c.in), &got); err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if got.Host != c.want.Host || got.Port != c.want.Port || got.AuthFunction != c.want.AuthFunction || got.Replicas != c.want.Replicas {
			t.Errorf("%q: got %+v, want %+v", c.in, got, c.want)
		}
	}
	for _, in := range []string{"port: http\n", "port: [1]\n", "port: 3.5\n"} {
		got := Default()
		if err := yaml.Unmarshal([]byte(in), &got); err == nil || !strings.Contains(err.Error(), "port must be a number") {
			t.Errorf("%q: got %v, want a refusal naming the port", in, err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Setup binds the endpoint before the worker connects and frees it on cleanup; a port in use is
// LISTEN_FAILED naming the address, and opens nothing that stays behind (the port can be
// set up again once free).
func TestSetupBindsAndCleansUp(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	port := freePort(t)
	cfg := Default()
	cfg.Port = Port(port)
	cfg.Adapter = &Adapter{Name: "kv", Config: map[string]any{"file_path": t.TempDir()}}
	w := protocol.NewWorker(protocol.Config{URL: "ws://127.0.0.1:1", Name: "t"})
	cleanup, err := Setup(context.Background(), cfg, w, log)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(DefaultHost, strconv.Itoa(port))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the endpoint is not listening: %v", err)
	}
	c.Close()

	// A second worker on the same port fails before it registers anything.
	cfg2 := cfg
	cfg2.Adapter = &Adapter{Name: "kv", Config: map[string]any{"file_path": t.TempDir()}}
	_, err = Setup(context.Background(), cfg2, protocol.NewWorker(protocol.Config{URL: "ws://127.0.0.1:1", Name: "t2"}), log)
	var ce *errcode.Error
	if !errors.As(err, &ce) || ce.Code != errcode.ListenFailed || !strings.Contains(ce.Message, addr) {
		t.Fatalf("a port in use: got %v, want LISTEN_FAILED naming %s", err, addr)
	}

	cleanup()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the endpoint still listens after cleanup")
	}
	again, err := Setup(context.Background(), cfg2, protocol.NewWorker(protocol.Config{URL: "ws://127.0.0.1:1", Name: "t3"}), log)
	if err != nil {
		t.Fatalf("set up again on the freed port: %v", err)
	}
	again()
}

// A configuration Validate refuses is Setup's error, before any store is opened.
func TestSetupRefusesBadConfig(t *testing.T) {
	cfg := Default()
	cfg.Adapter = &Adapter{Name: "redis"}
	_, err := Setup(context.Background(), cfg, protocol.NewWorker(protocol.Config{URL: "ws://127.0.0.1:1", Name: "t"}), slog.Default())
	var ce *errcode.Error
	if !errors.As(err, &ce) || ce.Code != errcode.ConfigUnsupported {
		t.Fatalf("got %v, want CONFIG_UNSUPPORTED", err)
	}
}
