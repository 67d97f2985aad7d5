package sandbox

import (
	"github.com/iii-go/iii/engine/enginetest"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/sandbox/scode"
)

// clustered serves an engine with the router bound to the default adapter that joined the
// NATS server at natsURL.
func clustered(t *testing.T, natsURL, name string) string {
	t.Helper()
	e := core.New(core.Options{})
	if err := e.JoinCluster(cluster.Options{URL: natsURL, Name: name, Insecure: true, Key: []byte("0123456789abcdef0123456789abcdef")}); err != nil {
		t.Fatal(err)
	}
	New(e, &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}).Install()
	return enginetest.Start(t, e).URL
}

// sandbox::* on an engine of a cluster reaches the adapter a worker of another engine serves;
// with no adapter anywhere it is S301, as on a lone engine.
func TestRouterReachesAdapterOnAnotherEngine(t *testing.T) {
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	a, c := clustered(t, s.ClientURL(), "a"), clustered(t, s.ClientURL(), "c")
	if _, err := call(t, a, "sandbox::run"); errCode(err) != scode.S301 {
		t.Fatalf("no adapter anywhere: %v, want S301", err)
	}
	adapter(t, c, "default", "", "on-c", "adapter::info", "run")
	// Engine c's subscription is on its way.
	var who string
	if !enginetest.Poll(10*time.Second, func() bool {
		who, err = call(t, a, "sandbox::run")
		return err == nil && who == "on-c"
	}) {
		t.Fatalf("sandbox::run on engine a: %q, %v", who, err)
	}
}
