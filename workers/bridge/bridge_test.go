package bridge

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A forward runs the remote function, an expose runs the local one from the remote engine, and
// bridge.invoke reaches any remote function; when the remote engine goes, a forwarded call
// fails NOT_CONNECTED naming it, and the local engine and bridge stay up.
func TestBridgeJoinsTwoEngines(t *testing.T) {
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	localURL := enginetest.Start(t, core.New(core.Options{})).URL
	remoteEngine := enginetest.Start(t, core.New(core.Options{}))
	remoteURL, stopRemote := remoteEngine.URL, remoteEngine.Stop
	store := map[string]json.RawMessage{}
	enginetest.Connect(t, protocol.Config{URL: remoteURL, Name: "state"}, map[string]protocol.Handler{
		"state::set": func(_ context.Context, in json.RawMessage) (any, error) {
			var p struct {
				Key   string          `json:"key"`
				Value json.RawMessage `json:"value"`
			}
			_ = json.Unmarshal(in, &p)
			store[p.Key] = p.Value
			return map[string]any{"new_value": p.Value}, nil
		},
		"state::get": func(_ context.Context, in json.RawMessage) (any, error) {
			var p struct{ Key string }
			_ = json.Unmarshal(in, &p)
			return store[p.Key], nil
		},
	})
	enginetest.Connect(t, protocol.Config{URL: localURL, Name: "orders"}, map[string]protocol.Handler{
		"orders::count": func(context.Context, json.RawMessage) (any, error) { return 7, nil },
	})

	cfg := Config{URL: remoteURL, ServiceID: "bridge-test",
		Forward: []Forward{{LocalFunction: "remote::state::set", RemoteFunction: "state::set"},
			{LocalFunction: "remote::state::get", RemoteFunction: "state::get", TimeoutMS: 2000}},
		Expose: []Expose{{LocalFunction: "orders::count", RemoteFunction: "site-a::orders::count"}}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	local := protocol.NewWorker(protocol.Config{URL: localURL, Name: "bridge"})
	remote := protocol.NewWorker(protocol.Config{URL: remoteURL, Name: cfg.ServiceName})
	b, err := New(cfg, local, remote, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := local.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	b.Start(context.Background())
	defer b.Close()

	client := enginetest.Connect(t, protocol.Config{URL: localURL, Name: "client"}, nil)
	if _, err := client.Call(ctx, "remote::state::set", map[string]any{"scope": "s", "key": "k", "value": "v1"}); err != nil {
		t.Fatal(err)
	}
	out, err := client.Call(ctx, "remote::state::get", map[string]any{"scope": "s", "key": "k"})
	if err != nil || string(out) != `"v1"` {
		t.Fatalf("get through the bridge: %s %v", out, err)
	}
	out, err = client.Call(ctx, FnInvoke, map[string]any{"function_id": "state::get", "data": map[string]string{"key": "k"}})
	if err != nil || string(out) != `"v1"` {
		t.Fatalf("bridge.invoke: %s %v", out, err)
	}
	remoteClient := enginetest.Connect(t, protocol.Config{URL: remoteURL, Name: "remote-client"}, nil)
	// The exposed function registers once the remote link is up.
	enginetest.Poll(10*time.Second, func() bool {
		out, err = remoteClient.Call(ctx, "site-a::orders::count", nil)
		return err == nil
	})
	if err != nil || string(out) != "7" {
		t.Fatalf("exposed call from the remote engine: %s %v", out, err)
	}
	st, err := client.Call(ctx, FnStatus, nil)
	if err != nil || !strings.Contains(string(st), `"connected":true`) || !strings.Contains(string(st), `"forwarded":3`) {
		t.Fatalf("status: %s %v", st, err)
	}

	stopRemote()
	_, err = client.Call(ctx, "remote::state::get", map[string]any{"key": "k"})
	if pe := protocol.AsError(err); pe == nil || pe.Code != errcode.NotConnected || !strings.Contains(pe.Message, "the remote engine "+remoteURL) {
		t.Fatalf("with the remote engine gone: %v", err)
	}
	st, err = client.Call(ctx, FnStatus, nil)
	if err != nil || !strings.Contains(string(st), `"connected":false`) {
		t.Fatalf("status with the remote gone: %s %v", st, err)
	}
}

func TestCheckRefusesWhatCannotWork(t *testing.T) {
	loose := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(loose, []byte("t"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "url is required"},
		{Config{URL: "http://x"}, "ws:// or wss://"},
		{Config{URL: "ws://u:p@x"}, "carries credentials"},
		{Config{URL: "ws://x", TokenFile: loose}, "readable by others"},
		{Config{URL: "ws://x", Forward: []Forward{{LocalFunction: "a::b"}}}, "forward[0] needs"},
		{Config{URL: "ws://x", Forward: []Forward{{LocalFunction: "bridge.invoke", RemoteFunction: "x"}}}, "already served"},
		{Config{URL: "ws://x", Forward: []Forward{{LocalFunction: "a", RemoteFunction: "x", TimeoutMS: -1}}}, "timeout_ms"},
		{Config{URL: "ws://x", Expose: []Expose{{LocalFunction: "a"}, {LocalFunction: "b", RemoteFunction: "a"}}}, "already exposed"},
	} {
		err := c.cfg.Check()
		if errcode.CodeOf(err) != errcode.ConfigInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want CONFIG_INVALID naming %q", c.cfg, err, c.want)
		}
	}
	ok := Default()
	ok.URL = "ws://10.0.0.2:49134"
	ok.Forward = []Forward{{LocalFunction: "remote::state::get", RemoteFunction: "state::get"}}
	if err := ok.Check(); err != nil || ok.ServiceName != "bridge-client" || ok.Forward[0].TimeoutMS != DefaultTimeoutMS {
		t.Fatalf("%+v %v", ok, err)
	}
}
