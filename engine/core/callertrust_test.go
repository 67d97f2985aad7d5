package core

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// HoldsNamespaceToken tells the holders of a protected namespace's project or owner token from
// everyone else: a connection without a token, with a made-up one, and the engine's own calls
// (as a call relayed from another engine of a cluster arrives) hold none.
func TestHoldsNamespaceToken(t *testing.T) {
	clearTokenEnv(t)
	proj := writeToken(t, "token", "project-secret")
	owner := writeToken(t, "owner", "owner-secret")
	e := New(Options{Namespaces: map[string]NamespacePolicy{"shop": {TokenFile: proj, OwnerTokenFile: owner}}})
	url := enginetest.Start(t, e).URL
	e.Handle("engine::test::holds", "", func(_ context.Context, c Caller, _ json.RawMessage) (any, error) {
		return map[string]bool{"holds": e.HoldsNamespaceToken(c)}, nil
	})
	for _, tc := range []struct {
		token string
		want  bool
	}{{"", false}, {"guess", false}, {"project-secret", true}, {"owner-secret", true}} {
		out, err := callAs(t, url, tc.token, protocol.DefaultNamespace, "engine::test::holds")
		if err != nil {
			t.Fatalf("token %q: %v", tc.token, err)
		}
		if want := map[bool]string{true: `{"holds":true}`, false: `{"holds":false}`}[tc.want]; string(out) != want {
			t.Errorf("token %q: %s, want %s", tc.token, out, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, perr := e.Invoke(ctx, protocol.DefaultNamespace, "engine::test::holds", nil, time.Second)
	if perr != nil || string(out) != `{"holds":false}` {
		t.Errorf("the engine's own call: %s %v", out, perr)
	}
}
