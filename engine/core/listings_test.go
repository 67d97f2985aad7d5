package core

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
)

// TestGatedTriggerListings: engine::triggers::list shows a session only the trigger types its
// allowed_trigger_types admits, engine::registered-triggers::list only the triggers of functions
// it may call; a worker of the main listener sees them all.
func TestGatedTriggerListings(t *testing.T) {
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{AuthFunctionID: "auth::ok",
		Expose: []rbac.Filter{{Match: "api::*"}, {Match: "engine::*"}}}}
	_, urls := serveListeners(t, l)
	fired := make(recordTriggers, 8)
	main := client(t, urls[0], "", map[string]protocol.Handler{
		"auth::ok": func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"allowed_trigger_types": []string{"ok-type"}}, nil
		},
		"api::fn": echo("api::fn"), "hidden::fn": echo("hidden::fn"),
	})
	for _, tt := range []string{"ok-type", "other-type"} {
		if err := main.RegisterTriggerType(tt, "", fired); err != nil {
			t.Fatal(err)
		}
	}
	for _, fn := range []string{"api::fn", "hidden::fn"} {
		if _, err := main.RegisterTrigger("ok-type", fn, map[string]int{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	list := func(w *protocol.Worker, fn string) string {
		t.Helper()
		out, err := w.Call(ctx, fn, nil)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		return string(out)
	}
	if !enginetest.Poll(5*time.Second, func() bool {
		return strings.Contains(list(main, FnListTriggers), "hidden::fn") && strings.Contains(list(main, FnListTriggers), "api::fn")
	}) {
		t.Fatalf("the main listener's triggers: %s", list(main, FnListTriggers))
	}
	if !strings.Contains(list(main, FnListTriggerTypes), "other-type") {
		t.Errorf("the main listener's trigger types: %s", list(main, FnListTriggerTypes))
	}
	pub := client(t, urls[1], "", nil)
	if got := list(pub, FnListTriggers); strings.Contains(got, "hidden::fn") || !strings.Contains(got, "api::fn") {
		t.Errorf("the session's triggers: %s", got)
	}
	if got := list(pub, FnListTriggerTypes); strings.Contains(got, "other-type") || !strings.Contains(got, "ok-type") {
		t.Errorf("the session's trigger types: %s", got)
	}
}
